"""Generated prose with planted near-copies at a chosen true Jaccard, for dedup tests and benches.

Text: a word-level Markov chain (order 2 by default) trained on real books, so word frequencies,
word lengths, punctuation and local phrasing follow real prose while no passage is a repeated copy
(the chain walks many lanes at once in numpy, so hundreds of MB take seconds). Document lengths are
log-normal (median ~330 words), with paragraph breaks after some sentence ends.

Near-copies: a share of the documents (`near_dup_fraction`, 10 % by default) get one extra document
that is a copy of it with a true 5-word-shingle Jaccard drawn uniformly from `jaccard_range`
(0.80-0.85 by default: just above the dedup threshold, where a MinHash estimate misses). The copy
replaces `k` words spaced >= `shingle` apart (each such edit turns `shingle` shared shingles into
new ones) and appends `m` words (each adds one new shingle), with k and m solved for the drawn
target; the Jaccard is then measured exactly, on the normalised words (`textkeys`, the rule the
dedup stage and the split gate use), and m nudged until it lands in range. Every planted pair is
returned with its measured Jaccard.

Filter signals (`write_jsonl_sources(..., signals=FilterSignals())`, off by default: without it the files are
byte for byte those written before the option): every row gets a `url` (a share on a blocklisted domain or
holding a blocklisted substring), a planted boilerplate line ends a share of the documents, and word salad
(words drawn one by one with their corpus frequency: the unigram statistics of prose without its word order)
is mixed into the pool; `write_reference_sources` writes the classifier's labelled sources beside it, clean
generated prose (`reference`, the positives) and salad alone (`junk`, the negatives), and the blocklists.
mix_assets_tests/support/filters_mix.py turns that into a config with the three filters on.

Everything is a function of the training texts and the seed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional, Sequence

import numpy as np

from mix_assets.stages.dedup.lsh import set_jaccard
from mix_assets.stages.dedup.minhash import shingle_sets

BREAK = "\x00"  # marks a paragraph break after a word while texts are joined


@dataclass
class MarkovModel:
    """An order-`order` word chain over a training token stream (tokens = whitespace pieces)."""

    vocab: np.ndarray  # object array of token strings
    stream: np.ndarray  # int32 token ids of the training text
    order: int
    by_state: np.ndarray  # positions 0..len-order-1 sorted by the state (order tokens) starting there
    state: np.ndarray  # int64 state id of every position 0..len-order
    start: np.ndarray  # per state: first index into by_state
    count: np.ndarray  # per state: positions with a successor

    @classmethod
    def from_texts(cls, texts: Iterable[str], order: int = 2) -> "MarkovModel":
        tokens = [t for text in texts for t in text.split()]
        if len(tokens) < order + 2:
            raise ValueError(f"need more than {order + 1} words of training text, got {len(tokens)}")
        vocab, stream = np.unique(np.asarray(tokens, dtype=object).astype(str), return_inverse=True)
        stream = stream.astype(np.int32)
        n = len(stream)
        state = stream[: n - order + 1].astype(np.int64)  # position i -> state of tokens i..i+order-1
        for j in range(1, order):
            _, state = np.unique(state * len(vocab) + stream[j : n - order + 1 + j], return_inverse=True)
            state = state.reshape(-1).astype(np.int64)
        n_states = int(state.max()) + 1
        with_next = state[: n - order]  # positions whose state has a successor token
        by_state = np.argsort(with_next, kind="stable")
        count = np.bincount(with_next, minlength=n_states)
        start = np.concatenate(([0], np.cumsum(count)[:-1]))
        return cls(vocab.astype(object), stream, order, by_state, state, start, count)

    @classmethod
    def from_files(cls, paths: Sequence[str | Path], order: int = 2) -> "MarkovModel":
        texts = [Path(p).read_text(encoding="utf-8", errors="replace") for p in sorted(map(str, paths))]
        return cls.from_texts(texts, order)

    def walk(self, lanes: int, steps: int, rng: np.random.Generator) -> np.ndarray:
        """(lanes, steps) token ids: `lanes` independent walks of the chain."""
        order, n = self.order, len(self.stream)
        out = np.empty((lanes, steps), dtype=np.int32)
        pos = rng.integers(0, n - order, lanes)  # the last `order` tokens emitted are stream[pos:pos+order]
        first = min(order, steps)
        for j in range(first):
            out[:, j] = self.stream[pos + j]
        for j in range(first, steps):
            s = self.state[pos]
            cnt = self.count[s]
            dead = cnt == 0  # the stream's last state: jump to a random place
            q = self.by_state[self.start[s] + (rng.random(lanes) * np.maximum(cnt, 1)).astype(np.int64)]
            if dead.any():
                q[dead] = rng.integers(0, n - order, int(dead.sum()))
            out[:, j] = self.stream[q + order]
            pos = q + 1
        return out


@dataclass
class Corpus:
    texts: list[str]
    pairs: np.ndarray  # (n_pairs, 2) int64 indices into texts: (original, near-copy)
    jaccard: np.ndarray  # float64 measured 5-word-shingle Jaccard of each pair

    @property
    def n_bytes(self) -> int:
        return sum(len(t.encode("utf-8")) for t in self.texts)


def exact_jaccard(a: Sequence[str], b: Sequence[str], n: int = 5) -> np.ndarray:
    """True n-word-shingle Jaccard of a[i] and b[i] (sets of normalised shingles; 0 when both are empty)."""
    g, off = shingle_sets(list(a) + list(b), n)
    i = np.arange(len(a))
    return set_jaccard(g, off, i, i + len(a)).astype(np.float64)


def _texts(ids_per_doc: list[np.ndarray], vocab_ext: np.ndarray) -> list[str]:
    return [" ".join(vocab_ext[ids].tolist()).replace(BREAK + " ", "\n\n") for ids in ids_per_doc]


def generate(
    model: MarkovModel,
    n_docs: int,
    seed: int = 0,
    near_dup_fraction: float = 0.1,
    jaccard_range: tuple[float, float] = (0.80, 0.85),
    shingle: int = 5,
    median_words: int = 330,
    sigma: float = 0.7,
    min_words: int = 40,
    max_words: int = 4000,
    paragraph_break: float = 0.15,
) -> Corpus:
    """`n_docs` generated documents plus one near-copy for `near_dup_fraction` of them, shuffled."""
    rng = np.random.default_rng(seed)
    lens = np.clip(np.round(rng.lognormal(np.log(median_words), sigma, n_docs)), min_words, max_words).astype(np.int64)
    lanes = int(min(4096, max(1, n_docs)))
    steps = int(-(-lens.sum() // lanes))
    flat = model.walk(lanes, steps, rng).reshape(-1)[: lens.sum()]
    ends = np.cumsum(lens)
    docs = np.split(flat, ends[:-1])
    # Paragraph breaks: ids >= V are "the same word, then a break".
    V = len(model.vocab)
    ends_sentence = np.array([w.endswith((".", "!", "?")) for w in model.vocab.tolist()])
    vocab_ext = np.concatenate([model.vocab, np.array([w + BREAK for w in model.vocab.tolist()], dtype=object)])
    docs = [np.where(ends_sentence[d] & (rng.random(len(d)) < paragraph_break) & (np.arange(len(d)) < len(d) - 1),
                     d + V, d) for d in docs]
    # Replacement / appended words: plain alphabetic tokens, drawn with their corpus frequency.
    alpha = np.flatnonzero(np.array([w.isalpha() for w in model.vocab.tolist()]))
    pool = model.stream[np.isin(model.stream, alpha)]

    n_plant = int(round(near_dup_fraction * n_docs))
    eligible = np.flatnonzero(lens >= max(min_words, 8 * shingle))
    chosen = np.sort(rng.choice(eligible, size=min(n_plant, len(eligible)), replace=False))
    lo_j, hi_j = jaccard_range
    originals = _texts([docs[i] for i in chosen], vocab_ext)
    base_sets = shingle_sets(originals, shingle)
    edited, tails, m = [], [], np.zeros(len(chosen), np.int64)
    for t, i in enumerate(chosen):
        d = docs[i]
        n_sets = int(base_sets[1][t + 1] - base_sets[1][t])
        target = rng.uniform(lo_j, hi_j)
        k = int(np.floor(n_sets * (1 - target) / (shingle * (1 + target))))
        slots = np.arange(shingle - 1 + int(rng.integers(0, shingle)), len(d) - shingle, shingle)
        k = min(k, len(slots))
        where = np.sort(rng.choice(slots, size=k, replace=False)) if k else np.zeros(0, np.int64)
        e = d.copy()
        e[where] = pool[rng.integers(0, len(pool), k)]
        edited.append(e)
        m[t] = max(0, int(round((n_sets - shingle * k) / target - n_sets - shingle * k)))
        tails.append(pool[rng.integers(0, len(pool), m[t] + 64)])
    # Measure every copy at once; nudge the tail length of those out of range and measure again.
    j = np.full(len(chosen), -1.0)
    todo = np.arange(len(chosen))
    copies: list[str] = [""] * len(chosen)
    for _ in range(64):
        if not len(todo):
            break
        made = _texts([np.concatenate([edited[t], tails[t][: m[t]]]) for t in todo], vocab_ext)
        j[todo] = exact_jaccard([originals[t] for t in todo], made, shingle)
        for t, c in zip(todo.tolist(), made):
            copies[t] = c
        m[todo] += np.where(j[todo] > hi_j, 1, np.where(j[todo] < lo_j, -1, 0))
        room = np.array([len(tails[t]) for t in todo], np.int64)
        todo = todo[((j[todo] < lo_j) | (j[todo] > hi_j)) & (m[todo] >= 0) & (m[todo] <= room)]
    ok = np.flatnonzero((j >= lo_j) & (j <= hi_j))
    measured = j[ok]
    copies = [(int(chosen[t]), copies[t]) for t in ok]
    texts = _texts(docs, vocab_ext)
    texts += [c for _, c in copies]
    pairs = np.array([[i, n_docs + p] for p, (i, _) in enumerate(copies)], dtype=np.int64).reshape(-1, 2)
    perm = rng.permutation(len(texts))  # new position of old index: inverse of perm
    where_now = np.empty(len(texts), np.int64)
    where_now[perm] = np.arange(len(texts))
    return Corpus([texts[k] for k in perm], where_now[pairs], np.asarray(measured, np.float64))


def generate_bytes(model: MarkovModel, target_bytes: int, seed: int = 0, **kw) -> Corpus:
    """About `target_bytes` of text (near-copies included): `generate` with n_docs estimated from a sample."""
    probe = generate(model, 200, seed=seed + 1, near_dup_fraction=0.0,
                     **{k: v for k, v in kw.items() if k != "near_dup_fraction"})
    per_doc = probe.n_bytes / 200 * (1 + kw.get("near_dup_fraction", 0.1))
    return generate(model, max(1, int(target_bytes / per_doc)), seed=seed, **kw)


# -- filter signals (off by default) ---------------------------------------------------------------------
BLOCKED_DOMAIN = "spamfarm.example"  # FilterSignals.blocked_fraction of the URLs are on subdomains of it
BLOCKED_SUBSTRING = "casino"  # FilterSignals.substring_fraction of the URLs hold it in their path
BOILERPLATE = "Subscribe to our newsletter for the latest stories, offers and events."


@dataclass(frozen=True)
class FilterSignals:
    """What `write_jsonl_sources(..., signals=...)` plants for the URL filter, line dedup and the classifier."""

    salad_fraction: float = 0.1  # word-salad documents added to the pool, as a share of its documents
    blocked_fraction: float = 0.03  # URLs on a subdomain of BLOCKED_DOMAIN
    substring_fraction: float = 0.01  # URLs (on ordinary hosts) whose path holds BLOCKED_SUBSTRING
    boilerplate_fraction: float = 0.3  # documents ending with BOILERPLATE on a line of its own
    hosts: int = 200  # ordinary hosts the other URLs are spread over


def word_salad(model: MarkovModel, n_docs: int, rng: np.random.Generator, median_words: int = 330,
               sigma: float = 0.7, min_words: int = 40, max_words: int = 4000) -> list[str]:
    """`n_docs` documents of words drawn independently with their frequency in the training text (lengths
    as `generate`'s): prose's vocabulary without its word order."""
    lens = np.clip(np.round(rng.lognormal(np.log(median_words), sigma, n_docs)), min_words, max_words).astype(np.int64)
    ids = model.stream[rng.integers(0, len(model.stream), int(lens.sum()))]
    return [" ".join(model.vocab[d].tolist()) for d in np.split(ids, np.cumsum(lens)[:-1])] if n_docs else []


def _urls(n: int, rng: np.random.Generator, sig: FilterSignals) -> tuple[list[str], np.ndarray]:
    """n URLs and what each is: 0 ordinary, 1 on BLOCKED_DOMAIN, 2 holding BLOCKED_SUBSTRING."""
    u = rng.random(n)
    kind = np.where(u < sig.blocked_fraction, 1, np.where(u < sig.blocked_fraction + sig.substring_fraction, 2, 0))
    host = rng.integers(0, sig.hosts, n)
    sub = np.array(["www", "blog", "m", "news"])[rng.integers(0, 4, n)]
    out = []
    for i in range(n):
        if kind[i] == 1:
            out.append(f"https://{sub[i]}.{BLOCKED_DOMAIN}/post/{i}")
        else:
            section = f"{BLOCKED_SUBSTRING}-night" if kind[i] == 2 else "articles"
            out.append(f"https://{sub[i]}.site{int(host[i])}.example.org/{section}/{i}.html")
    return out, kind


def write_jsonl_sources(corpus: Corpus, folder: str | Path, sources: Sequence[str], seed: int = 0,
                        signals: Optional[FilterSignals] = None,
                        model: Optional[MarkovModel] = None) -> dict:
    """Spread the documents over `sources` (seeded) as <folder>/<source>.jsonl ({"text": ...} rows).

    Writes <folder>/ground_truth.json: every planted pair as (source, line) of both documents and its
    Jaccard. Returns {source: path}. With `signals` (and the `model` the salad is drawn from), the pool is
    first grown by the salad documents (shuffled in), planted lines are appended and every row is
    {"text", "url"}; ground_truth.json then also lists, per source, the lines holding salad, the planted line,
    a blocked domain and a blocked substring.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    texts, pairs, urls, marks = corpus.texts, corpus.pairs, None, {}
    if signals is not None:
        if model is None:
            raise ValueError("write_jsonl_sources: signals need the model the word salad is drawn from")
        srng = np.random.default_rng([seed, 30])  # its own stream: the pool's documents are the default's
        salad = word_salad(model, int(round(signals.salad_fraction * len(texts))), srng)
        texts = texts + salad
        perm = srng.permutation(len(texts))  # texts[perm[j]] goes to position j
        where_now = np.empty(len(texts), np.int64)
        where_now[perm] = np.arange(len(texts))
        is_salad = np.arange(len(texts)) >= len(corpus.texts)
        texts, pairs, is_salad = [texts[k] for k in perm], where_now[pairs], is_salad[perm]
        planted = srng.random(len(texts)) < signals.boilerplate_fraction
        texts = [t + "\n\n" + BOILERPLATE if p else t for t, p in zip(texts, planted)]
        urls, kind = _urls(len(texts), srng, signals)
        marks = {"salad": is_salad, "boilerplate": planted, "blocked_domain": kind == 1,
                 "blocked_substring": kind == 2}
    which = rng.integers(0, len(sources), len(texts))
    line = np.zeros(len(texts), np.int64)
    paths = {}
    for k, name in enumerate(sources):
        idx = np.flatnonzero(which == k)
        line[idx] = np.arange(len(idx))
        paths[name] = folder / f"{name}.jsonl"
        rows = ({"text": texts[i]} if urls is None else {"text": texts[i], "url": urls[i]} for i in idx)
        paths[name].write_text("".join(json.dumps(r) + "\n" for r in rows))
    truth: dict = {"pairs": [{"a": [sources[which[a]], int(line[a])], "b": [sources[which[b]], int(line[b])],
                              "jaccard": j} for (a, b), j in zip(pairs.tolist(), corpus.jaccard.tolist())]}
    if marks:
        truth["signals"] = {m: {name: line[(which == k) & v].tolist() for k, name in enumerate(sources)}
                            for m, v in marks.items()}
    (folder / "ground_truth.json").write_text(json.dumps(truth, indent=0))
    return {k: str(v) for k, v in paths.items()}


def write_reference_sources(model: MarkovModel, folder: str | Path, n_reference: int, n_junk: int, seed: int = 0,
                            signals: FilterSignals = FilterSignals()) -> dict:
    """The classifier's labelled sources and the blocklists, beside a pool written with `signals`:
    <folder>/reference.jsonl (clean generated prose: no near-copies, no planted line; the positives),
    <folder>/junk.jsonl (word salad alone; the negatives), both with ordinary URLs, and
    <folder>/blocklists/{domains,url_words}.txt. Returns {"reference": path, "junk": path, "domains": path,
    "url_words": path}."""
    folder = Path(folder)
    rng = np.random.default_rng([seed, 31])
    ref = generate(model, n_reference, seed=seed + 31, near_dup_fraction=0.0).texts
    junk = word_salad(model, n_junk, rng)
    clean = FilterSignals(blocked_fraction=0.0, substring_fraction=0.0, hosts=signals.hosts)
    out = {}
    for name, texts in (("reference", ref), ("junk", junk)):
        urls, _ = _urls(len(texts), rng, clean)
        out[name] = folder / f"{name}.jsonl"
        out[name].write_text("".join(json.dumps({"text": t, "url": u}) + "\n" for t, u in zip(texts, urls)))
    (folder / "blocklists").mkdir(parents=True, exist_ok=True)
    out["domains"] = folder / "blocklists" / "domains.txt"
    out["domains"].write_text(f"# generated spam hosts (gen_corpus.FilterSignals)\n{BLOCKED_DOMAIN}\n")
    out["url_words"] = folder / "blocklists" / "url_words.txt"
    out["url_words"].write_text(f"{BLOCKED_SUBSTRING}\n")
    return {k: str(v) for k, v in out.items()}
