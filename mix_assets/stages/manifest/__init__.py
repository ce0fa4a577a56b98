"""The manifest stage: `manifest`, manifest.json describing the mix directory, and its gates (the manifest
checker, format/checker.py, and the audit of the shards, stages/audit/published.py).

  assets.py    the asset and its checks
  metadata.py  what the UI shows
  builder.py   manifest.json from the shard stats, the tokenizer identity and the review files
It has no config section: what the manifest records is the other sections' (the format is format/manifest.py).
"""
