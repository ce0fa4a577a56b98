"""One folder per stage of the graph, each of the same shape: config.py (its config section), assets.py
(thin assets and checks), metadata.py (what the UI shows) and its pure logic modules. common.py is the
asset kit every stage uses: gates, lineage records, derived code versions, the run lease. Each stage's
__init__.py lists its files. Deviations: manifest/ has no config section (it records the others'), and
publish/reproducibility.py, a check, is the one Dagster module beside an assets.py and a metadata.py."""
