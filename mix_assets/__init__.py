"""mix_assets: the Dagster project that builds an LLM pretraining token mix, with a gate on every promise.

`definitions.py` is the Dagster entry point; `config.py` the mix spec; `core/` the shared I/O, engine and
text kernels; `format/` the published mix's format; `stages/<stage>/` one folder per stage; `reader/`
the trainer's reader (README.md, "Layout").
"""
