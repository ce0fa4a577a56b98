"""The dedup stage: `dedup_keys` (exact and MinHash-LSH near-duplicate clusters over the merged pool) and
`exclusion_masks` (every document left out: duplicates, contaminated documents).

  assets.py      the two assets and their checks
  config.py      `dedup:`
  metadata.py    what the UI shows
  dedup.py       the map (signatures per source) and reduce (clusters), and the masks
  minhash.py     MinHash signatures (datasketch's affine32 scheme, bit for bit)
  signatures.py  the map's per-source signature files
  lsh.py         banding, confirmed pairs, clusters and the keep rule
  partitioned.py the reduce's candidate pairs, components and keep rule as tasks per node partition
  pairs.py       verified Jaccards stored per pair of sources
"""
