"""The publish stage: `published_revision`, the mix at its publish target as an immutable revision, and the
checks that a stranger can read it and that a rebuild reproduces it.

  assets.py            the asset and its checks
  config.py            `publish:`
  metadata.py          what the UI shows
  target.py            the publish target a spec names (with write access, and as a stranger reads it)
  publish.py           publishing to a local directory, S3 or the hub, and the verifying read
  drift.py             what differs between two manifests: the drift of a rebuild, the diff of two revisions
  input_keys.py        what a revision was built from, read from the lineage records in storage
  reproducibility.py   the fingerprint_reproduced check on manifest (Dagster, like assets.py)
"""
