"""The pipeline's stages, one folder each, all of the same shape (README.md, Layout):

  assets.py     the Dagster assets and checks, thin: verify inputs, call the logic, record lineage, metadata
  config.py     the stage's section of the mix spec (pydantic, on core/spec.Strict; mix_assets/config.py
                composes them)
  metadata.py   what the UI shows of the stage's assets and checks (console/metadata.py's vocabulary)
  the rest      the stage's logic: no Dagster, no mix_assets/config.py (it takes the spec or its section);
                publish/reproducibility.py (a check) is the one Dagster module beside assets and metadata

common.py is the asset kit every assets.py uses (keys, gates, lineage, derived code_version, the run lock).
A stage imports the core, the format package and its own modules; a stage's logic may use another stage's.
"""
