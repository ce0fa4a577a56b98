"""mix_assets: a Dagster project that builds an LLM pretraining token mix (README.md).

definitions.py, jobs.py and resources.py wire it; config.py is the mix spec; core/ is shared, format/ the
published mix, console/ the UI helpers, stages/<stage>/ one folder per stage, reader/ the trainer's reader.
"""
