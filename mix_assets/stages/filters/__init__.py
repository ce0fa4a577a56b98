"""The filters stage: `document_filters`, the heuristic quality cascade and language ID over every source.

  assets.py     the document_filters asset and its gates
  config.py     `filters:` (its document-filter keys generated from registry.py) and each source's override
  metadata.py   what the UI shows: kill rates, composition, guarded domains, samples
  registry.py   the filters in cascade order: one line per filter
  rules/        one module per filter (its config, its rules, its statistics); adding a filter is one file
                there plus one line in registry.py (docs/filters.md)
  rule.py       what a filter is to the cascade (Filter, Batch)
  kernels.py    the text kernels the rules share
  cascade.py    the cascade over a batch (`apply_filters`, `measure`)
  langid.py     language identification (fastText lid.176.ftz from a wheel)
  decisions.py  the cascade as a map stage: decisions per source, the summary the gates and the UI read
"""
