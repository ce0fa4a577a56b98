"""The published mix's format, no Dagster and no stage: what a reader relies on.

  manifest.py  manifest.json's constants, fingerprint and interpretation hash
  shards.py    the token shards' bytes: the one writer and the one reader
  docindex.py  the per-shard document index
  card.py      the README.md dataset card
  paths.py     path safety for every path a manifest names
  mixdir.py    where the checker reads a mix's files from
  checker.py   the manifest checker, composing checks/ (one module per concern)
"""
