"""What every stage shares and that knows no stage and no Dagster: storage and transport (the one place
that knows URL schemes), the map engine, the artifact layout, lineage records, progress, the run lease,
the config base class, and the text kernels (normalisation, hashing, PII rules)."""
