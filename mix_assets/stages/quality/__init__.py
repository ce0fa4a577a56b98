"""quality: a fastText quality classifier trained in the graph (or brought as a pinned file), its held-out
quality, a score on every document of the sources that keep by it, and the cutoff each source keeps at.

The keep decision itself is one more filter of document_filters (reason `quality:<model>`), so kill rates,
samples, `no_domain_vanished` and exclusion_masks treat it like every other filter (docs/quality.md).
"""
