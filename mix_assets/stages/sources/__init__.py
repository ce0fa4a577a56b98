"""The sources stage: `raw/<source>`, each configured source read, sampled to its budget and normalised
to Parquet documents.

  assets.py       the raw/<source> assets and their checks
  config.py       `sources:` (SourceSpec, its loaders: hub, jsonl, parquet, text folder) and the demo corpus
  metadata.py     what the UI shows of raw/<source>
  sources.py      the loaders (`read_raw_source`): a new loader kind is a config class here + a reader there
  modifiers.py    the text modifiers applied as documents are written (PII redaction, C4 line modification)
  demo_corpus.py  the embedded demo corpus, generated from a seed
"""
