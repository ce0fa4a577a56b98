"""The URL / domain filter: documents whose URL is on a blocklist are rejected with reason `url:<list>`.

Blocklists are files, one entry a line (blank lines and `#` comments skipped), of one of two kinds:
  domains     a host name; it blocks that host and every subdomain of it (`example.com` blocks
              `ads.example.com`), as datatrove's URLFilter blocks a registered domain (url_filter.py) and
              dolma's banlists do; a leading `*.` or `.` is accepted and means the same
  substrings  a piece of text; it blocks every URL containing it (case-insensitive), DCLM's url substring
              filter
A malformed line (a domain with a space, a slash or an empty label) fails with its file and line. Each list
is keyed by its content (the sha256 of its bytes, in `describe` and the decisions' key, so an edit re-runs
the filter) and may be pinned by a `sha256:` in the config (another content fails, naming both).

A document's URL is its `field` column (a string); it is parsed with urllib (a URL without a scheme is read
as `http://`); one without a usable host is `unparseable`: kept and counted, or rejected as `url:unparseable`
when the config says so. Lists are tried in config order; a document's reason is the first that matches.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence
from urllib.parse import urlsplit

UNPARSEABLE = "unparseable"
KINDS = ("domains", "substrings")
_LABEL = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$")


class BlocklistError(ValueError):
    """A blocklist that cannot be used; the message names the file (and line)."""


@dataclass(frozen=True)
class UrlList:
    """One blocklist as the filter takes it (plain values: travels to Ray workers)."""

    name: str
    path: str
    kind: str  # domains | substrings
    sha256: str  # of the file's bytes (checked against a pin when the config gives one)


@dataclass(frozen=True)
class UrlParams:
    """What the URL filter decides with."""

    field: str
    lists: tuple[UrlList, ...]
    reject_unparseable: bool = False

    def describe(self) -> dict:
        return {"field": self.field, "reject_unparseable": self.reject_unparseable,
                "lists": [{"name": u.name, "kind": u.kind, "sha256": u.sha256} for u in self.lists]}


def file_sha256(path: str) -> str:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError as e:
        raise BlocklistError(f"{path}: blocklist not readable ({e.strerror or e})") from None


def resolve(lists: Sequence[dict], base_dir: Optional[str] = None) -> tuple[UrlList, ...]:
    """The config's lists ({name, path, kind, sha256 pin or None}) with each file's content hash, a pin checked
    and every line parsed once (a malformed one fails here, at the asset's start, not in a worker)."""
    out = []
    for spec in lists:
        path = str(Path(base_dir, spec["path"]) if base_dir and not Path(spec["path"]).is_absolute() else spec["path"])
        sha = file_sha256(path)
        pin = spec.get("sha256")
        if pin and pin.lower() != sha:
            raise BlocklistError(f"{path}: blocklist {spec['name']!r} has sha256 {sha}, the config pins {pin}; "
                                 "update the pin if the edit is intended")
        u = UrlList(spec["name"], path, spec["kind"], sha)
        load(u)
        out.append(u)
    return tuple(out)


def _entries(path: str) -> list[tuple[int, str]]:
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise BlocklistError(f"{path}: not UTF-8 at byte {e.start}") from None
    except OSError as e:
        raise BlocklistError(f"{path}: blocklist not readable ({e.strerror or e})") from None
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        entry = line.split("#", 1)[0].strip()
        if entry:
            out.append((n, entry))
    return out


def parse_domain(entry: str, where: str) -> str:
    """A blocklist domain, lowercased, without a leading `*.`/`.`; a malformed one fails naming `where`."""
    d = entry.lower().rstrip(".")
    d = d[2:] if d.startswith("*.") else d[1:] if d.startswith(".") else d
    try:
        d = d.encode("idna").decode("ascii") if not d.isascii() else d
    except UnicodeError:
        raise BlocklistError(f"{where}: not a domain: {entry!r} (IDNA encoding fails)") from None
    labels = d.split(".")
    if not d or any(not _LABEL.match(lab) for lab in labels):
        raise BlocklistError(f"{where}: not a domain: {entry!r} (expected a host name such as example.com: "
                             "letters, digits and hyphens between dots, no scheme, path or space)")
    return d


@functools.lru_cache(maxsize=64)
def load(u: UrlList) -> frozenset:
    """The list's entries (domains normalised, substrings lowercased), read once per process and list
    content; a file whose content is no longer `u.sha256` fails (the list changed under the run)."""
    if u.kind not in KINDS:
        raise BlocklistError(f"{u.path}: blocklist {u.name!r}: kind {u.kind!r}, expected one of {KINDS}")
    if file_sha256(u.path) != u.sha256:
        raise BlocklistError(f"{u.path}: blocklist {u.name!r} changed while the filters ran; run again")
    entries = _entries(u.path)
    if u.kind == "domains":
        return frozenset(parse_domain(e, f"{u.path}:{n}") for n, e in entries)
    return frozenset(e.lower() for _, e in entries)


def host_of(url: Optional[str]) -> Optional[str]:
    """The URL's host, lowercased (None: missing or unparseable)."""
    if not url or not url.strip():
        return None
    u = url.strip()
    try:
        parts = urlsplit(u)
        if not parts.netloc:  # a document's URL written without a scheme ("example.com/page")
            parts = urlsplit("//" + u)
        host = parts.hostname
    except ValueError:
        return None
    if not host or " " in host or "." not in host.strip("."):
        return None
    return host.rstrip(".")


def _suffixes(host: str) -> list[str]:
    labels = host.split(".")
    return [".".join(labels[i:]) for i in range(len(labels))]


@dataclass
class UrlResult:
    reason: list  # per document: "url:<list>", "url:unparseable" (when rejected) or None
    matched: dict  # list name (or "unparseable") -> documents
    missing: int  # documents without a URL (kept)
    unparseable: int  # documents whose URL has no usable host


def judge(urls: Sequence[Optional[str]], p: UrlParams) -> UrlResult:
    """Every document's URL against the lists, in config order."""
    lists = [(u, load(u)) for u in p.lists]
    reason, matched, missing, bad = [], {}, 0, 0
    for url in urls:
        if not url or not str(url).strip():
            missing += 1
            reason.append(None)
            continue
        host = host_of(url)
        if host is None:
            bad += 1
            r = f"url:{UNPARSEABLE}" if p.reject_unparseable else None
            if r:
                matched[UNPARSEABLE] = matched.get(UNPARSEABLE, 0) + 1
            reason.append(r)
            continue
        low, hit = url.lower(), None
        for u, entries in lists:
            if (u.kind == "domains" and any(s in entries for s in _suffixes(host))) or \
                    (u.kind == "substrings" and any(e in low for e in entries)):
                hit = u.name
                break
        if hit:
            matched[hit] = matched.get(hit, 0) + 1
        reason.append(f"url:{hit}" if hit else None)
    return UrlResult(reason, matched, missing, bad)
