"""The audit stage: eval contamination, counts and ids only: `eval_registry`, `contamination_report`, the
`zero_eval_overlap` gate on exclusion_masks and the fuzzy advisory; and the audit of a published revision.

  assets.py           the assets and checks
  config.py           `audit:` (eval tasks, n-gram rules, fuzzy advisory)
  metadata.py         what the UI shows
  evals.py            the eval loader (non-test splits only)
  eval_scan.py        the eval registry on disk and the scans against it
  contamination.py    the 13-gram scan
  fuzzy.py            the MinHash near-copy advisory
  published.py        the audit of a published revision's shards (the shards_audit_clean check,
                      mix_assets/audit_published.py)
"""
