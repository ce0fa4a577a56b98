"""Where each asset's files live under the storage root: the contract between stages.

Every key is relative to the storage root (see `core/storage.py`). The `mix/` prefix holds exactly
what is published: shards, manifest.json and the review files the manifest lists.
"""

# raw/<source>: Parquet documents, columns
#   doc_id (str, stable across rebuilds), source (str), text (str), row_index (int64, ordinal of the
#   row/document in the source as read), origin (str, file:line or split:row), n_bytes (int64, UTF-8),
#   n_chars (int64), est_tokens (int64)
RAW_DOCS = "raw/{source}/documents.parquet"
RAW_STATS = "raw/{source}/stats.json"

# dedup_keys: doc_id, source, exact_key (hex sha256 of normalised text; of the raw text when it has no
#   words), cluster_id (str: doc_id of the cluster's survivor), cluster_size (int), keep (bool), reason
#   (null | "exact_dup" | "near_dup"),
#   jaccard_to_kept (float32, exact shingle Jaccard), n_words (int64, normalised words)
DEDUP_KEYS = "dedup/dedup_keys.parquet"
# dedup_keys' map output per source (stages/dedup/signatures.py): doc_id, exact_key, n_shingles, n_chars, n_words,
#   m000 .. m127 (uint32 MinHash values), raw row order; reused while raw/<source> and the dedup params hold
DEDUP_SIGNATURES = "dedup/signatures/{source}.parquet"
# dedup_keys' verified candidate pairs per pair of sources (stages/dedup/pairs.py): row_a, row_b (int64 raw rows
#   of the two sources, names sorted), jaccard (float64 exact shingle Jaccard); <key> = sha256 of both sources'
#   identities (name, rows, signature file metadata) and the shingling code. A cache: written once, never
#   replaced, only spares comparisons (the output is a from-scratch reduce's); gc (mix_assets/gc.py) removes stale ones
DEDUP_PAIRS = "dedup/pairs/{key}.parquet"
# ... and by text (stages/dedup/pairs.TextPairs): key_a, key_b (exact keys, hex, key_a < key_b), jaccard, every pair
#   the last reduce verified, replaced by the next; <key> = "by-text-<shingling code>-<shingle>"

# charts that are a function of a few parameters (console/metadata.stored_chart: the S-curve), the Markdown drawn
#   once per <key> = sha256 of the chart's name, parameters, charts code and matplotlib version; a cache
CHARTS = "console/charts/{key}.md"

# document_filters (stages/filters/decisions.py), per source in raw row order: doc_id, keep (bool), reason (first
#   failing rule, null when kept: "gopher_quality:min_doc_words", "language:fr", ...), rules (list<str>, the
#   first failing rule of every failing filter), language, language_score (float64), n_chars, n_bytes;
#   reused while raw/<source>, the source's filter parameters and the filter code hold
FILTER_DECISIONS = "filters/decisions/{source}.parquet"
# kill rates per source x filter, the composition before/after (source x language x length bucket), domains
FILTER_REPORT = "filters/report.json"

# line_dedup (stages/lines/lines.py), when the mix has a `line_dedup:` section: the line hashes found in at least
#   min_docs documents of the mix (hash uint64, docs int64, sorted by hash); per source raw/<source>'s rows in raw
#   order with the frequent lines removed (raw's columns, text / n_bytes / n_chars / est_tokens recomputed, then
#   removed_lines int32, removed_bytes int64, dropped bool): what document_filters, the tokenizer and token_shards
#   read instead of raw/<source>'s text; the counts per source and the most frequent removed lines (JSON)
LINE_FREQUENT = "lines/frequent.parquet"
LINE_DOCS = "lines/docs/{source}.parquet"
LINE_REPORT = "lines/report.json"

# eval_registry: per task a sorted, unique uint64 array of hashed n-grams (numpy .npy) + denominators
EVAL_NGRAMS = "audit/eval_registry/{task}.npy"
EVAL_REGISTRY = "audit/eval_registry/registry.json"
# per task, items shorter than the n-gram: uint64 (k, 3) [hash of first words, length, whole hash]
EVAL_SHORT_ITEMS = "audit/eval_registry/{task}.short.npy"
# every 8-word run of every reference item, hashed (audit_artifact_scrubbed looks leaks up in it)
EVAL_SCRUB_NGRAMS = "audit/eval_registry/scrub-ngrams.npy"

# contamination_report: counts per source x task (JSON) and the ids of contaminated documents
CONTAMINATION_REPORT = "audit/contamination_report.json"
CONTAMINATED_DOCS = "audit/contaminated_docs.parquet"  # doc_id, source, tasks (list<str>), overlap_ngrams, task_overlap_ngrams (list<int64>, per task)
# contamination_report's map output per source (stages/audit/eval_scan.py), the documents with an exact or fuzzy
#   hit in raw row order: doc_id, counts (list<int64>, per registry task), fuzzy_item (list<int64>), fuzzy_jaccard
#   (list<float64>); reused while raw/<source>, the eval registry's files, the audit parameters and the scan code hold
CONTAMINATION_HITS = "audit/hits/{source}.parquet"
# contamination_report's per-document key of that scan, per source in raw row order: text_key (blake2b-128 of the
#   UTF-8 text, null for a null text), hit (int32: the row in audit/hits/<source>.parquet, -1 without a hit);
#   the hits file's metadata. A rescan of a changed source reuses the rows of the texts it holds
CONTAMINATION_TEXT_KEYS = "audit/text_keys/{source}.parquet"

# no_fuzzy_eval_overlap (WARN check on contamination_report, stages/audit/fuzzy.py): advisory, excludes nothing.
# The index (hashes and ints: per item its shingles, the argmin postings of its MinHash signature),
# counts per source x task (JSON) and the matched doc ids: doc_id, source, tasks (list<str>),
# task_items (list<int64>, items matched per task), max_jaccard (float64), exact_hit (bool)
FUZZY_INDEX = "audit/fuzzy/index/{name}.npy"
FUZZY_INDEX_META = "audit/fuzzy/index.json"
FUZZY_REPORT = "audit/fuzzy_contamination.json"
FUZZY_DOCS = "audit/fuzzy_matched_docs.parquet"

# exclusion_masks: one row per excluded document: doc_id, source, reasons (list<str>), kept_doc_id (str|null)
EXCLUSION_MASKS = "masks/exclusion_masks.parquet"
COMPOSITION = "masks/composition.json"

# validation_split: one row per KEPT document: doc_id, source, cluster_id, split ("train" | "val")
VALIDATION_SPLIT = "split/validation_split.parquet"

# tokenizer: the tokenizer file and its identity record
TOKENIZER_FILE = "mix/tokenizer/tokenizer.json"
TOKENIZER_IDENTITY = "tokenizer/identity.json"

# token_shards and manifest: the publishable directory
MIX_DIR = "mix"
SHARD = "mix/{split}/{split}-{index:05d}.bin"
# packing.doc_index: per shard, the token offsets of the document starts in it (format/docindex.py); outside
#   train/ and val/ so manifest checkers that predate it still count only shards there
DOC_INDEX_DIR = "mix/doc_index"
DOC_INDEX = DOC_INDEX_DIR + "/{split}/{split}-{index:05d}.docs.npy"
SHARD_STATS = "tokens/shard_stats.json"
# ~30 samples read back from the shards and decoded (stages/tokens/samples.py); reviewed, never published
RENDERED_SAMPLES = "tokens/rendered_samples.md"
# token_shards: per split, every document appearance in stream order (start token, tokens, source, doc_id),
#   so a sample's segments are labelled with their documents (stages/tokens/samples.py); reviewed, never published
STREAM_DOCS = "tokens/stream_docs/{split}.parquet"
# token_shards' token-id cache (stages/tokens/idcache.py): per source, immutable parts of key (blake2b-128 of a
#   document's UTF-8 text, fixed_size_binary(16)), n_bytes (int64), ids (binary: the tokenizer's ids, no
#   separator, in the mix dtype, little-endian); <key> = hash of the tokenizer file's sha256, the encoding code
#   and the id-deciding parameters; <name> = hash of the part's keys. Never published; delete the folder to clear
TOKEN_CACHE_DIR = "tokens/cache"
TOKEN_CACHE_PART = TOKEN_CACHE_DIR + "/{key}/{source}/part-{name}.parquet"
# the text keys of every row of a raw (or line_dedup) file, as the token-id cache looks them up (idcache.text_keys:
#   n x 16 bytes, then one is-null byte per row): the working file each is filed from, as a blob named by a keyed
#   record keyed/token_text_keys/<key>.json (key: the file's sha256 and the hashing code), then deleted
TOKEN_TEXT_KEYS = "tokens/text_keys/{source}.bin"
# token_ids_match_reference's HF ids of a source's sample (stages/tokens/reference_ids.py): text_key
#   (fixed_size_binary(16)), ids (list<uint32>); the working file each sample is filed from, as a blob named by a
#   keyed record keyed/token_ids_reference/<key>.json
TOKEN_IDS_REFERENCE = "tokens/reference_ids/{source}.parquet"
MANIFEST = "mix/manifest.json"
MIX_DEDUP_KEYS = "mix/review/dedup_keys.parquet"
MIX_EXCLUSION_MASKS = "mix/review/exclusion_masks.parquet"
MIX_CONTAMINATION_REPORT = "mix/review/contamination_report.json"
MIX_CONFIG = "mix/review/mix_config.json"
# when a source scrubs PII (filters.pii): the rules, their version and sha256, counts per source
# (core/pii.py, stages/sources/modifiers.build_scrub_manifest); listed in the manifest's `review` as scrub_manifest
MIX_SCRUB_MANIFEST = "mix/scrub_manifest.json"

# shards_audit_clean (check on manifest): the 13-gram audit of the decoded shards, counts only
SHARDS_AUDIT = "audit/shards_audit.json"
# the working file of the audit's clean documents while it is filed (stages/audit/published.KnownClean)
SHARDS_AUDIT_KNOWN_CLEAN = "audit/shards_audit_known_clean.bin"

# A map stage's chunk parts (core/chunks.py): one Arrow IPC file per finished chunk (source x row range) while
#   its source's file is not yet assembled, so a killed run resumes at the first missing chunk; stage is
#   "filters" (decisions), "signatures" (dedup, also written by contamination_report's signing pass) or
#   "contamination" (hits); key = sha256 of {stage, source, the per-source file's meta (raw data version, params,
#   code), the row range}. Deleted once the source's file is written.
CHUNK_PART = "parts/{stage}/{key}.arrow"
# A partitioned reduce's scratch (stages/dedup/partitioned.py): the parts its tasks pass to each other (candidate
#   pairs, edges per round, labels), under a fresh run token; deleted when the reduce ends.
REDUCE_SCRATCH = "scratch/{stage}/{run}"
# raw/<source>'s pass 1 of one JSONL chunk (stages/sources/sources._plan_chunk): the working file it is filed from,
#   as a blob named by a keyed record keyed/raw_chunk_plan/<key>.json, then deleted
RAW_CHUNK_PLAN = "scratch/raw_chunk_plans/{key}.npz"

# lineage/<asset>.json: what each artifact was computed from (core/lineage.py)
LINEAGE = "lineage/{asset}.json"

# published_revision: what was published where
PUBLISHED = "publish/published_revision.json"

# stages/quality: the classifier (a fastText .bin), what it was trained on, its score on every document of
# the sources that keep by it (raw row order: doc_id, score) and the cutoff each such source keeps at
QUALITY_MODEL = "quality/model.bin"
QUALITY_TRAINING_SET = "quality/training_set.json"
QUALITY_SCORES = "quality/scores/{source}.parquet"
QUALITY_CUTOFFS = "quality/cutoffs.json"
# published beside the other review files when some source keeps by the classifier (manifest `review`)
MIX_QUALITY_MODEL = "mix/review/quality_model.bin"
MIX_QUALITY_TRAINING_SET = "mix/review/quality_training_set.json"
