"""stages/filters/cascade.py's cascade as first written (issue 14), kept verbatim where a faster version replaced it:
the oracle the current `apply_filters` must match exactly (mix_assets_tests/stages/filters/test_filters_identity.py)
and the "old" side of bench/filters_stage.py --compare's identity check. Unchanged helpers come from
the library itself."""

from __future__ import annotations

import time

import numpy as np
import polars as pl

from mix_assets.stages.filters.cascade import FilterConfig, FilterResult, _as_series, _first_reason
from mix_assets.stages.filters.kernels import SEP, TOKEN_RE, dups, gt, lt, NGrams, presplit, ratio, splitlines, tokens
from mix_assets.stages.filters.rules.c4 import C4Filter, _sentences
from mix_assets.stages.filters.rules.fineweb import _TERMINAL_END, FineWebFilter
from mix_assets.stages.filters.rules.gopher_quality import _gopher_quality
from mix_assets.stages.filters.rules.gopher_repetition import (
    GopherRepetitionFilter, _dup_ngram_fails, _per_doc_max, _repeated_elements, _top_ngram_chars,
)
from mix_assets.stages.filters.rules.sanity import _sanity


FILTER_ORDER = ("sanity", "gopher_repetition", "gopher_quality", "c4", "fineweb")  # the cascade as first written


def _top_ngram_fails(key: np.ndarray, doc: np.ndarray, chars: np.ndarray, n: int, limit: np.ndarray) -> np.ndarray:
    """`_top_ngram_chars(...) > limit` per document. One plain sort of (document, key's high bits) gives
    each document's highest count; that count * the document's longest n-gram bounds the characters,
    and only documents over `limit` on the bound (~5 % here) need the first-seen tie-break."""
    ndoc = len(limit)
    out = np.zeros(ndoc, dtype=bool)
    if not len(key):
        return out
    shift = np.uint64(max(1, (ndoc - 1).bit_length()))
    s = np.sort((doc.astype(np.uint64) << (np.uint64(64) - shift)) | (key >> shift))
    starts = np.flatnonzero(np.concatenate([[True], s[1:] != s[:-1]]))
    cmax = _per_doc_max((s[starts] >> (np.uint64(64) - shift)).astype(np.int64),
                        np.diff(starts, append=len(s)), ndoc)  # a collision in the truncated key only raises it
    longest = _per_doc_max(doc, chars, ndoc)
    need = (longest + n - 1) * cmax > limit
    if need.any():
        sub = need[doc]
        out[need] = (_top_ngram_chars(key[sub], doc[sub], chars[sub], n, ndoc) > limit)[need]
    return out


def _gopher_repetition(text: pl.Series, toks: pl.Series, cfg: GopherRepetitionFilter) -> tuple[pl.DataFrame, int, float]:
    t = pl.col("text")
    parts = pl.DataFrame({"text": text}).select(
        n=t.str.len_chars(),
        paras=t.str.strip_chars().str.replace_all(r"\n{2,}", SEP).str.split(SEP),
        lines=t.str.replace_all(r"\n+", "\n").str.split("\n"))
    p, ln = _repeated_elements(parts["paras"]), _repeated_elements(parts["lines"])
    st = pl.DataFrame({"n": parts["n"], "p_frac": p["rep"] / np.maximum(p["n"], 1), "p_chars": p["chars"],
                       "l_frac": ln["rep"] / np.maximum(ln["n"], 1), "l_chars": ln["chars"]})
    c, n = pl.col, pl.col("n")
    out = st.select(
        (n == 0).alias("gopher_repetition:empty"),  # datatrove 0.10.1 returns "empty" first
        gt(c("p_frac"), cfg.dup_para_frac).alias("gopher_repetition:dup_para_frac"),
        gt(ratio(c("p_chars"), n), cfg.dup_para_char_frac).alias("gopher_repetition:dup_para_char_frac"),
        gt(c("l_frac"), cfg.dup_line_frac).alias("gopher_repetition:dup_line_frac"),
        gt(ratio(c("l_chars"), n), cfg.dup_line_char_frac).alias("gopher_repetition:dup_line_char_frac"),
    )
    ndoc, lens = len(st), st["n"].to_numpy()
    flat = toks.explode().drop_nulls()  # tokens are never null; an empty list may explode to one
    doc = np.repeat(np.arange(ndoc, dtype=np.uint64), toks.list.len().fill_null(0).to_numpy())
    grams = NGrams(doc, flat.hash().to_numpy(), flat.str.len_chars().to_numpy().astype(np.int64))
    for k, thr in cfg.top_n_grams:
        rows, key, chars = grams.grow(k)
        fails = _top_ngram_fails(key, doc[rows].astype(np.int64), chars, k, thr * np.maximum(lens, 1))
        out = out.with_columns(pl.Series(f"gopher_repetition:top_{k}_gram", fails))
    python_docs, python_s = 0, 0.0
    if cfg.dup_n_grams:
        cols, python_docs, python_s = _dup_ngram_fails(grams, toks, lens, cfg.dup_n_grams)
        out = out.with_columns(**cols)
    return out, python_docs, python_s


def _c4(text: pl.Series, cfg: C4Filter) -> tuple[pl.DataFrame, pl.Series]:
    """(rule columns, the kept lines joined by newlines per document)."""
    ndoc = len(text)
    lines = (pl.DataFrame({"text": text}).with_row_index("doc")
             .select("doc", line=splitlines(pl.col("text"))).explode("line")
             .with_row_index("lid").with_columns(pl.col("line").str.strip_chars()))
    s = pl.col("line")
    words = s.str.count_matches(r"\S+")
    long_word = pl.lit(False) if cfg.max_word_length is None else s.str.contains(f"\\S{{{cfg.max_word_length + 1}}}")
    cleaned = s.str.replace_all(r"\[\d*]|\[edit]|\[citation needed]", "") if cfg.remove_citations else s
    lines = lines.with_columns(words=words, long=long_word, line=cleaned)
    low = s.str.to_lowercase()
    no_term = (~s.str.contains(r"[.?!\"']$") | s.str.ends_with("...")) if cfg.filter_no_terminal_punct else pl.lit(False)
    few = pl.lit(False) if cfg.min_words_per_line is None else pl.col("words") < cfg.min_words_per_line
    reach = ~pl.col("long") & ~no_term & ~few
    lorem = reach & low.str.contains("lorem ipsum", literal=True) if cfg.filter_lorem_ipsum else pl.lit(False)
    js = reach & ~lorem & low.str.contains("javascript", literal=True) if cfg.filter_javascript else pl.lit(False)
    curly = reach & ~lorem & ~js & s.str.contains("{", literal=True) if cfg.filter_curly_bracket else pl.lit(False)
    pol = (reach & low.str.contains_any(list(cfg.policy_substrings)) if cfg.filter_policy else pl.lit(False))
    lines = lines.with_columns(lorem=lorem, curly=curly, kept=reach & ~lorem & ~js & ~curly & ~pol)
    kept = lines.filter("kept")
    if cfg.min_num_sentences is not None:
        # every kept line holds a sentence: only documents with fewer kept lines than the minimum
        # need their sentences counted
        few_lines = pl.len().over("doc") < cfg.min_num_sentences
        kept = kept.join(_sentences(kept.filter(few_lines)), on="lid", how="left").with_columns(
            pl.col("sent").fill_null(1))
    else:
        kept = kept.with_columns(sent=pl.lit(0))
    per_doc = kept.group_by("doc").agg(sent=pl.col("sent").sum(), out=pl.col("line").str.join("\n"))
    first = lines.group_by("doc").agg(
        lorem=pl.col("lid").filter("lorem").min(), curly=pl.col("lid").filter("curly").min())
    docs = (pl.DataFrame({"doc": pl.int_range(ndoc, eager=True).cast(pl.UInt32)})
            .join(first, on="doc", how="left").join(per_doc, on="doc", how="left"))
    lo, cu = pl.col("lorem"), pl.col("curly")
    out = docs.select(
        (lo.is_not_null() & (cu.is_null() | (lo <= cu))).alias("c4:lorem_ipsum"),
        (cu.is_not_null() & (lo.is_null() | (cu < lo))).alias("c4:curly_bracket"),
        lt(pl.col("sent").fill_null(0), cfg.min_num_sentences).alias("c4:too_few_sentences"),
    )
    return out, docs["out"].fill_null("").str.strip_chars()


def _fineweb(text: pl.Series, cfg: FineWebFilter) -> pl.DataFrame:
    t = pl.col("text")
    lines = t.str.split("\n").list.eval(pl.element().filter(pl.element().str.strip_chars() != ""))
    nl = lines.list.len()
    _, dup_chars = dups(lines)
    st = pl.DataFrame({"text": text}).select(
        nl=nl,
        punct=lines.list.eval(pl.element().str.contains(_TERMINAL_END)).list.mean(),
        short=lines.list.eval(pl.element().str.len_chars() <= cfg.short_line_length).list.mean(),
        dup=ratio(dup_chars, t.str.len_chars() - t.str.count_matches("\n", literal=True)),
        newline=ratio(t.str.count_matches("\n", literal=True), presplit(t).str.count_matches(TOKEN_RE)),
    )
    c = pl.col
    punct = lt(c("punct"), cfg.line_punct_thr)
    if cfg.line_punct_exclude_zero:
        punct = punct & (c("punct") != 0)
    return st.select(
        (c("nl") == 0).alias("fineweb:empty"),
        punct.alias("fineweb:line_punct_ratio"),
        gt(c("short"), cfg.short_line_thr).alias("fineweb:short_line_ratio"),
        gt(c("dup"), cfg.char_duplicates_ratio).alias("fineweb:char_dup_ratio"),
        gt(c("newline"), cfg.new_line_ratio).alias("fineweb:list_ratio"),
    )


def apply_filters(texts, config: FilterConfig | None = None) -> FilterResult:
    """Evaluate every enabled filter on every document of the batch (see the module docstring)."""
    config = FilterConfig() if config is None else config
    text = _as_series(texts).fill_null("")
    n = len(text)
    frames, seconds, python_docs = [], {}, 0
    out_text = text
    toks = None
    for name in FILTER_ORDER:
        cfg = getattr(config, name)
        if not cfg.enabled:
            continue
        t0 = time.perf_counter()
        if name in ("gopher_quality", "gopher_repetition") and toks is None:
            toks = tokens(text)
        if name == "sanity":
            frames.append(_sanity(text, cfg))
        elif name == "gopher_quality":
            frames.append(_gopher_quality(text, toks, cfg))
        elif name == "gopher_repetition":
            f, python_docs, seconds["gopher_repetition:python_scan"] = _gopher_repetition(text, toks, cfg)
            frames.append(f)
        elif name == "c4":
            f, rewritten = _c4(text, cfg)
            frames.append(f)
            if cfg.mode == "modify":
                c4_keep = ~f.select(pl.any_horizontal(pl.all())).to_series()
                out_text = pl.select(pl.when(c4_keep).then(rewritten).otherwise(text)).to_series()
        elif name == "fineweb":
            frames.append(_fineweb(out_text, cfg))
        seconds[name] = time.perf_counter() - t0
    failed_df = pl.concat(frames, how="horizontal") if frames else pl.DataFrame(height=n)
    rules = failed_df.columns
    reason = _first_reason(failed_df, rules) if rules else pl.Series([None] * n, dtype=pl.String)
    filter_reason = {}
    for name in FILTER_ORDER:
        own = [r for r in rules if r.split(":")[0] == name]
        if own:
            filter_reason[name] = _first_reason(failed_df, own).to_list()
    failed = {r: failed_df[r].to_numpy() for r in rules}
    stats = {r: {"failed_documents": int(failed[r].sum()), "first_failure_documents": int((reason == r).sum())}
             for r in rules}
    return FilterResult(
        keep=reason.is_null().to_numpy(), reason=reason.to_list(), texts=out_text.to_arrow(),
        failed=failed, filter_reason=filter_reason, stats=stats, seconds=seconds, python_docs=python_docs)
