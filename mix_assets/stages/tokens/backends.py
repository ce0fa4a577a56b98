"""Encoder backends of the token stage: HF `tokenizers` (the reference) and tiktoken (fast, exact where it can be).

    enc = encoder_for(tokenizer, "auto")    # tiktoken when it expresses the tokenizer exactly, else HF
    enc.name, enc.reason                    # "tiktoken" | "hf", and why HF when it fell back
    ids = enc.encode(texts, threads)        # one id list per text, add_special_tokens=False

`tiktoken_plan` converts a byte-level BPE tokenizer.json to tiktoken's (pattern, mergeable ranks): each vocab
string through the GPT-2 bytes<->unicode table (bytelevel._char_bytes) to its bytes, its id the rank; the
pattern from the pre-tokenizer (ByteLevel with use_regex: GPT-2's; Split(regex, Isolated) + ByteLevel without
regex: the Split's, wrapped so text between matches is a piece as in HF; Digits + ByteLevel: GPT-2's with
digits isolated). tiktoken merges by the rank of the concatenated bytes after looking the whole piece up;
HF applies the merge list in order (the whole piece first only with ignore_merges), so the plan also requires
merge results in rank order and, without ignore_merges, every token rebuilt by the merges from its own bytes.
Whatever it cannot express exactly (a normalizer, another model, dropout, prefixes/suffixes, byte fallback,
missing bytes, another pre-tokenizer) gives a reason instead, and the tokenizer is encoded with HF.
Added tokens (special or not) are matched inside text by HF and not by tiktoken's ordinary encode: a text
that contains one is encoded with HF (`TiktokenEncoder.encode`), so ids stay HF's document by document.
Which backend runs is operational: ids are the same either way (token_ids_match_reference checks every build).
"""

from __future__ import annotations

import itertools
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Optional

import numpy as np
from tokenizers import Tokenizer

from mix_assets.stages.tokens.bytelevel import _char_bytes

BACKENDS = ("auto", "hf", "fast")
ADD_SPECIAL_TOKENS = False  # every backend: no post-processor templates (tiktoken's ordinary encode has none)

# tokenizers' ByteLevel(use_regex=True) split (GPT-2's), in tiktoken's regex syntax (fancy-regex)
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
# Digits(individual_digits) then ByteLevel(use_regex): every digit its own piece first, GPT-2's split on the
# text between; a piece ends before a digit, so GPT-2's `\s+(?!\S)` also stops before one
GPT2_DIGITS_PATTERN = r"""\p{N}|'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?[^\s\p{L}\p{N}]+|\s+(?![^\s\p{N}])|\s+"""
GPT2_DIGIT_RUNS_PATTERN = r"""\p{N}+|'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?[^\s\p{L}\p{N}]+|\s+(?![^\s\p{N}])|\s+"""


@dataclass(frozen=True)
class TiktokenPlan:
    pattern: str
    ranks: dict[bytes, int]
    added: dict[str, int]  # added tokens (content -> id): texts holding one go to HF


def _isolated(pattern: str) -> str:
    """`pattern` as HF's Split(behavior=Isolated) uses it: each match a piece, and the text between two
    matches one piece too (tiktoken encodes matches only): the leftmost match from a position is where the
    gap alternative stops."""
    return f"(?:{pattern})|(?:(?!(?:{pattern}))(?s:.))+"


def _pattern(pt: Optional[dict]) -> tuple[Optional[str], str]:
    """(tiktoken pattern, "") of a pre-tokenizer, or (None, why not)."""
    if pt is None:
        return None, "no pre-tokenizer (not byte-level)"
    steps = pt["pretokenizers"] if pt.get("type") == "Sequence" else [pt]
    kinds = [s.get("type") for s in steps]
    last = steps[-1]
    if kinds[-1] != "ByteLevel":
        return None, f"pre-tokenizer {kinds} does not end with ByteLevel"
    if last.get("add_prefix_space"):
        return None, "ByteLevel add_prefix_space=true"
    if kinds == ["ByteLevel"]:
        return (GPT2_PATTERN, "") if last.get("use_regex", True) else (None, "ByteLevel without a split")
    if len(steps) == 2 and kinds[0] == "Split" and not last.get("use_regex", True):
        sp = steps[0]
        regex = (sp.get("pattern") or {}).get("Regex")
        if regex is None:
            return None, "Split on a literal string"
        if sp.get("behavior") != "Isolated" or sp.get("invert"):
            return None, f"Split behavior {sp.get('behavior')} invert={sp.get('invert')}"
        return _isolated(regex), ""
    if len(steps) == 2 and kinds[0] == "Digits" and last.get("use_regex", True):
        return (GPT2_DIGITS_PATTERN if steps[0].get("individual_digits") else GPT2_DIGIT_RUNS_PATTERN), ""
    return None, f"pre-tokenizer sequence {kinds} (with ByteLevel use_regex={last.get('use_regex', True)})"


def tiktoken_plan(tok: Tokenizer) -> tuple[Optional[TiktokenPlan], str]:
    """(plan, "") when tiktoken gives `tok`'s ids exactly (add_special_tokens=False), else (None, why not)."""
    d = json.loads(tok.to_str())
    if d.get("normalizer") is not None:
        return None, f"normalizer {d['normalizer'].get('type')}"
    m = d.get("model") or {}
    if m.get("type") != "BPE":
        return None, f"model {m.get('type')} (not BPE)"
    for k in ("dropout", "continuing_subword_prefix", "end_of_word_suffix"):
        if m.get(k):
            return None, f"BPE {k}={m[k]!r}"
    if m.get("byte_fallback"):
        return None, "BPE byte_fallback"
    pattern, why = _pattern(d.get("pre_tokenizer"))
    if pattern is None:
        return None, why
    added = {a["content"]: int(a["id"]) for a in d.get("added_tokens") or []}
    added_ids = set(added.values())
    alphabet = _char_bytes()
    ranks: dict[bytes, int] = {}
    for s, i in m["vocab"].items():
        if i in added_ids:
            continue
        if not all(c in alphabet for c in s):
            return None, f"vocab token {s!r} is not byte-level"
        ranks[bytes(alphabet[c] for c in s)] = int(i)
    if len(ranks) != len(set(ranks.values())):
        return None, "two vocab tokens with one id"
    missing = [b for b in range(256) if bytes([b]) not in ranks]
    if missing:
        return None, f"{len(missing)} byte(s) without a token (e.g. {missing[0]:#04x})"
    vocab = m["vocab"]
    last = -1
    for k, pair in enumerate(m.get("merges") or []):
        a, b = pair.split(" ", 1) if isinstance(pair, str) else pair
        i = vocab.get(a + b)
        if i is None or i in added_ids:
            return None, f"merge {k} ({a!r}, {b!r}) makes no vocab token"
        if i <= last:
            return None, f"merge {k} ({a!r}, {b!r}) is not in rank order (its token id {i} <= {last})"
        last = i
    if not m.get("ignore_merges"):
        # tiktoken takes a whole piece that is a token; HF's merges must then rebuild it from its bytes. The
        # model alone (no normalizer, pre-tokenizer or added tokens) encodes each token string as one piece
        bare = Tokenizer.from_str(json.dumps({**d, "normalizer": None, "pre_tokenizer": None, "post_processor": None,
                                              "decoder": None, "added_tokens": []}))
        strs = [s for s, i in vocab.items() if len(s) > 1 and i not in added_ids]
        got = bare.encode_batch_fast(strs, add_special_tokens=False)
        bad = [s for s, e in zip(strs, got) if e.ids != [vocab[s]]]
        if bad:
            return None, (f"ignore_merges=false and {len(bad)} token(s) the merges do not rebuild from their "
                          f"bytes (e.g. {bad[0]!r})")
    return TiktokenPlan(pattern, ranks, added), ""


class HFEncoder:
    """The reference: `tokenizers`' encode_batch_fast (Rust threads: the process's RAYON_NUM_THREADS)."""

    name = "hf"

    def __init__(self, tok: Tokenizer, reason: str = ""):
        self.tok, self.reason = tok, reason

    def encode(self, texts: list[str], threads: int = 1) -> list[list[int]]:
        return [e.ids for e in self.tok.encode_batch_fast(texts, add_special_tokens=ADD_SPECIAL_TOKENS)]

    def encode_flat(self, texts: list[str], threads: int, dtype, separator_id: Optional[int]
                    ) -> tuple[np.ndarray, np.ndarray]:
        """(the texts' ids back to back, each followed by `separator_id` when set; int64 lengths with it)."""
        docs = self.encode(texts, threads)
        n = np.fromiter(map(len, docs), np.int64, len(docs))
        if separator_id is not None:  # one flat list, each document's ids then the separator
            for d in docs:
                d.append(separator_id)
            n += 1
        return np.fromiter(itertools.chain.from_iterable(docs), dtype, int(n.sum())), n


class TiktokenEncoder:
    """tiktoken's ordinary encode of a converted tokenizer; texts holding an added token go to HF."""

    name = "tiktoken"
    reason = ""

    def __init__(self, tok: Tokenizer, plan: TiktokenPlan):
        import tiktoken

        self.hf = HFEncoder(tok)
        self.added = sorted(plan.added)
        self.enc = tiktoken.Encoding("mix_assets", pat_str=plan.pattern, mergeable_ranks=plan.ranks,
                                     special_tokens=dict(plan.added))
        self._one = self.enc._core_bpe.encode_ordinary  # releases the GIL; the wrapper only fixes surrogates
        # ids as a uint32 buffer (no Python int per id); nothing allowed as special = encode_ordinary's ids
        self._buf = self.enc._core_bpe.encode_to_tiktoken_buffer

    def _hf_rows(self, texts: list[str]) -> list[int]:
        return [k for k, t in enumerate(texts) if any(a in t for a in self.added)] if self.added else []

    def _array(self, text: str) -> np.ndarray:
        try:
            return np.frombuffer(self._buf(text, set()), np.uint32)
        except UnicodeEncodeError:  # a lone surrogate: replaced as tiktoken's wrapper does
            return np.asarray(self.enc.encode_ordinary(text), np.uint32)
        except BaseException as e:  # noqa: BLE001 - a Rust panic (pyo3 PanicException is a BaseException)
            return np.asarray(self._after_panic(text, e), np.uint32)

    def _list(self, text: str) -> list[int]:
        try:
            return self._one(text)
        except UnicodeEncodeError:
            return self.enc.encode_ordinary(text)
        except BaseException as e:  # noqa: BLE001
            return self._after_panic(text, e)

    def _after_panic(self, text: str, e: BaseException) -> list[int]:
        """HF's ids of a text tiktoken's regex engine gave up on (a ValueError "Regex error ... Max stack size
        exceeded for backtracking", or a Rust panic on another path): fancy-regex's backtracking overflows its stack
        on a long whitespace run (`\\s+(?!\\S)` over ~1 MB of spaces: measured in bench/tokens_pathological.py)."""
        if not (type(e).__name__ == "PanicException" or (isinstance(e, ValueError) and "Regex error" in str(e))):
            raise e
        return self.hf.encode([text])[0]

    def encode_flat(self, texts: list[str], threads: int, dtype, separator_id: Optional[int]
                    ) -> tuple[np.ndarray, np.ndarray]:
        """As HFEncoder.encode_flat (same ids), each document's ids straight into numpy."""
        if threads > 1 and len(texts) > 1:
            with ThreadPoolExecutor(threads) as pool:
                arrays = list(pool.map(self._array, texts))
        else:
            arrays = [self._array(t) for t in texts]
        hf = self._hf_rows(texts)
        if hf:
            for k, ids in zip(hf, self.hf.encode([texts[k] for k in hf])):
                arrays[k] = np.asarray(ids, np.uint32)
        n = np.fromiter(map(len, arrays), np.int64, len(arrays))
        if separator_id is not None:
            sep = np.asarray([separator_id], np.uint32)
            arrays = [x for a in arrays for x in (a, sep)]
            n += 1
        flat = np.concatenate(arrays) if arrays else np.zeros(0, np.uint32)
        if len(flat) and int(flat.max()) > np.iinfo(dtype).max:
            raise ValueError(f"token id {int(flat.max())} does not fit {np.dtype(dtype).name}")
        return flat.astype(dtype, copy=False), n

    def encode(self, texts: list[str], threads: int = 1) -> list[list[int]]:
        hf = self._hf_rows(texts)
        if threads > 1 and len(texts) > 1:
            with ThreadPoolExecutor(threads) as pool:
                out = list(pool.map(self._list, texts))
        else:
            out = [self._list(t) for t in texts]
        if hf:
            for k, ids in zip(hf, self.hf.encode([texts[k] for k in hf])):
                out[k] = ids
        return out


def encoder_for(tok: Tokenizer, backend: str = "auto"):
    """The encoder `backend` asks for: "hf"; "auto": tiktoken when it is installed and expresses `tok` exactly,
    else HF with the reason (`.reason`); "fast": tiktoken or a ValueError saying why not."""
    if backend not in BACKENDS:
        raise ValueError(f"tokenizer backend {backend!r}: expected one of {BACKENDS}")
    if backend == "hf":
        return HFEncoder(tok, "backend hf (configured)")
    try:
        import tiktoken  # noqa: F401
    except ImportError:
        why = "tiktoken is not installed"
    else:
        plan, why = tiktoken_plan(tok)
        if plan is not None:
            return TiktokenEncoder(tok, plan)
        why = f"tiktoken cannot express this tokenizer exactly: {why}"
    if backend == "fast":
        raise ValueError(f"tokenizer.backend fast: {why}")
    return HFEncoder(tok, why)
