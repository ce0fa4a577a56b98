"""The split stage: `validation_split`, kept documents to train/val, decided per near-duplicate cluster.

  assets.py    the asset and its checks
  config.py    `split:`
  metadata.py  what the UI shows
  split.py     the split (a pure function of seed and cluster id), what its checks measure, the near-dup scan
"""
