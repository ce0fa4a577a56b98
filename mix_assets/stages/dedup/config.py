"""The dedup stage's config section: exact and near-duplicate removal (MinHash LSH, stages/dedup/)."""

from __future__ import annotations

from pydantic import Field

from mix_assets.core.spec import Strict


class DedupSpec(Strict):
    """Exact and near-duplicate removal over the merged pool."""

    shingle_words: int = Field(5, ge=1)  # word shingle size
    num_perm: int = Field(128, ge=16)  # MinHash permutations
    threshold: float = Field(0.8, gt=0, lt=1)  # Jaccard at which two documents are near-duplicates
    max_loss_share_warn: float = Field(0.3, gt=0, le=1)  # WARN when a source loses more than this
    # LSH (b, r): among those missing a pair AT the threshold with P <= 1e-6 (lsh.recall_params),
    # the one minimising fp_weight * P(false positive) + fn_weight * P(false negative) (datasketch's
    # integral). Candidates are verified by exact shingle Jaccard, so a false positive costs one set
    # comparison and a false negative loses a duplicate: weight misses more.
    lsh_fp_weight: float = Field(0.05, gt=0, lt=1)
    lsh_fn_weight: float = Field(0.95, gt=0, lt=1)
    threads: int = Field(2, ge=1, exclude=True)  # signature threads; operational, not published (as packing.threads)
    # node partitions of the reduce (candidate pairs, components, keep rule; stages/dedup/partitioned.py): each
    # task holds one partition's pairs; also validation_split's doc_id ranges (stages/split/ranges.py).
    # Operational: the bytes do not depend on it (so not published, in no code_version)
    partitions: int = Field(1, ge=1, exclude=True)
    samples_per_reason: int = Field(5, ge=0, le=50)  # excluded docs shown beside their kept member
