"""The tokens stage: `tokenizer` and `token_shards`, the kept documents tokenised once and packed into the
published shards (their bytes are format/shards.py's).

  assets.py     the two assets and their checks
  config.py     `tokenizer:` and `packing:`
  metadata.py   what the UI shows, with the rendered samples
  tokenizer.py  the mix tokenizer: from the hub, a local file, or trained
  shards.py     encode (map) and pack (reduce) into train/val shards, bounded memory
  encoding.py   texts to token ids (the code the token-id cache is keyed by)
  backends.py   the encoders: HF tokenizers (reference) and tiktoken converted exactly, HF fallback with a reason
  exactness.py  token_ids_match_reference: sampled documents' ids in the shards against HF's
  reference_ids.py  HF's ids of the exactness sample, reused per document through the keyed store
  idcache.py    the token-id cache: ids of already-encoded text, per source, reused across builds
  packing.py    budget fill, stream order and contiguous packing into fixed-length samples
  samples.py    the seeded samples read back from the shards, decoded and marked, for the UI
  bytelevel.py  byte-level BPE decoding as a table gather
"""
