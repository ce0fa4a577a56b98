"""The README.md dataset card a published revision carries: a pure function of its manifest.

The card is part of the published format: a reader regenerates it from manifest.json and compares
(`card_problems`, run by the checker on a directory holding a README.md). `revision_id` names the
revision of a fingerprint (`rev-<fingerprint[:16]>`: the folder of a local or S3 target, the hub tag).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mix_assets.format.manifest import INTERPRETATION_KEY, README_NAME

REV_PREFIX = "rev-"


def revision_id(fingerprint: str) -> str:
    """The immutable revision id of a manifest fingerprint; ValueError unless it is lowercase hex."""
    if len(fingerprint) < 16 or any(c not in "0123456789abcdef" for c in fingerprint):
        raise ValueError(f"manifest fingerprint {fingerprint!r} is not a lowercase hex sha256")
    return f"{REV_PREFIX}{fingerprint[:16]}"


def dataset_card(manifest: dict) -> str:
    """A README.md dataset card, a pure function of the manifest (no time, no target)."""
    fp = manifest["fingerprint"]
    tok = manifest.get("tokenizer", {})
    pk = manifest.get("packing", {})
    splits = manifest.get("splits", {})
    lines = [
        "---",
        f"pretty_name: {manifest.get('name', 'mix')}",
        "tags:",
        "- pretraining",
        "- tokenized",
        "---",
        "",
        f"# {manifest.get('name', 'mix')}",
        "",
        "A tokenised pretraining mix built by `mix_assets`. Every number below is read from `manifest.json`,",
        "which lists each file with its size and sha256.",
        "",
        f"- revision: `{revision_id(fp)}`",
        f"- content fingerprint (sha256 over the ordered per-file sha256s): `{fp}`",
        (f"- interpretation sha256 (dtype, packing, tokenizer identity, split shard samples): "
         f"`{manifest.get(INTERPRETATION_KEY)}`"),
        f"- seed: {manifest.get('seed')}, config sha256: `{manifest.get('config_sha256')}`",
        f"- dtype: `{manifest.get('dtype')}` little-endian, raw arrays without header",
        (f"- packing: {pk.get('rule')}, seq_len {pk.get('seq_len')}, sample_len {pk.get('sample_len')}, "
         f"separator {pk.get('separator')!r}, shifted targets {pk.get('shifted_targets')}"),
        f"- tokenizer: {tok.get('kind')} {tok.get('repo_id') or ''} {tok.get('revision') or ''}".rstrip()
        + f", vocab size {tok.get('vocab_size')}",
        "",
        "## Splits",
        "",
        "| split | samples | tokens | shards | dropped tail tokens | seam rate | documents |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, s in splits.items():
        lines.append(
            f"| {name} | {s.get('samples')} | {s.get('tokens')} | {len(s.get('shards', []))} | "
            f"{s.get('dropped_tail_tokens')} | {s.get('seam_rate')} | {s.get('documents')} |"
        )
    lines += [
        "",
        "## Sources",
        "",
        "| source | train tokens | val tokens | budget tokens | epochs | unique documents |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, s in manifest.get("sources", {}).items():
        lines.append(
            f"| {name} | {s.get('train_tokens')} | {s.get('val_tokens')} | {s.get('budget_tokens')} | "
            f"{s.get('epochs')} | {s.get('unique_documents')} |"
        )
    tiers = [(n, t, r) for n, s in manifest.get("sources", {}).items() for t, r in (s.get("tiers") or {}).items()]
    if tiers:  # sources filled by quality tier (docs/quality.md): only then, so other cards keep their bytes
        lines += ["", "## Quality tiers", "",
                  "| source | tier | epochs (source x tier) | unique documents | unique tokens | train tokens |",
                  "|---|---|---:|---:|---:|---:|"]
        lines += [f"| {n} | {t} | {r.get('epochs')} | {r.get('documents')} | {r.get('unique_tokens')} | "
                  f"{r.get('train_tokens')} |" for n, t, r in tiers]
    lines += ["", "## Review files", ""]
    lines += [f"- `{k}`: `{v}`" for k, v in manifest.get("review", {}).items()]
    if "scrub_manifest" in manifest.get("review", {}):
        lines += ["", "PII (emails, IP addresses, phone numbers, as configured) was replaced by placeholders "
                  f"such as `<EMAIL>` before tokenisation; `{manifest['review']['scrub_manifest']}` lists the "
                  "rules, their version and sha256, and the redactions per source and rule."]
    lines += [
        "",
        "## Reading it",
        "",
        "```python",
        "from mix_assets.reader import open_mix",
        'reader = open_mix("<this revision>", cache_dir="/tmp/mix-cache", shuffle_seed=0)  # reader.sample(k)',
        "```",
        "",
        "The reader downloads only the shards it needs and checks each shard's sha256 against the manifest.",
        "",
    ]
    return "\n".join(lines)


def card_problems(src: Any, m: Mapping[str, Any]) -> list[str]:
    """A published revision's README.md must be exactly the card generated from its manifest."""
    try:
        want = dataset_card(dict(m))
    except Exception as e:  # noqa: BLE001 -- a manifest too broken for a card is reported above
        return [f"{README_NAME}: no dataset card can be generated from this manifest ({type(e).__name__}: {e})"]
    with src.open(README_NAME) as f:
        got = f.read()
    if got != want.encode("utf-8"):
        return [f"{README_NAME}: present but not the dataset card generated from the manifest "
                f"(format/card.dataset_card); {len(got)} bytes, the card is {len(want.encode('utf-8'))}"]
    return []
