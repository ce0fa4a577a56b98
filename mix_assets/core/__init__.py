"""What every stage shares; it imports no stage, no mix_assets/config.py, no console and no Dagster.

  transport.py  locations (local, s3://, hf://): the one module that knows URL schemes
  storage.py    the storage root every artifact is written under; tables.py its Parquet tables
  layout.py     where each asset's files live (the contract between stages)
  lineage.py    content-hash lineage records; runlock.py the lease on a storage root; scratch.py scratch names
  engine.py     map a pure function over chunks, in process or on Ray
  progress.py   progress lines for long steps
  textkeys.py   normalisation and hashing for matching (dedup, audit); kernels_jit.py compiled loops;
                pii.py PII redaction; seeded.py seeded hashes; idset.py a compact set of doc ids
  spec.py       the base of every config section (Strict)
  imports.py    the package's imports read statically (derived code_version, the layering test)
"""
