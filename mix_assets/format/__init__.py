"""The published mix's format, written by the token and manifest stages and read by the reader, the
audits and publish: shard bytes and document index (shards.py, docindex.py), the manifest and its
fingerprint (manifest.py), its paths (paths.py), the dataset card (card.py) and the checker
(checker.py composing checks/ by concern). No Dagster, no stage."""
