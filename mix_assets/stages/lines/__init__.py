"""The lines stage: `line_dedup`, lines that recur across many documents of the whole mix removed as a modifier.

  config.py     the `line_dedup:` section (min_docs, when a document is dropped, the WARN share, samples)
  lines.py      the pure logic: line hashes, the count map and its reduce, the removal map, per-source totals
  assets.py     the line_dedup asset and its WARN check (thin)
  metadata.py   what the UI shows: counts per source, the most frequent removed lines (scrubbed)
"""
