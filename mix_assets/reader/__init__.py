"""The trainer's reader: sample k of a published mix as a pure function of (fingerprint, shuffle_seed, k).

    from mix_assets.reader import open_mix
    r = open_mix("build/published/mix", cache_dir="/scratch/mixcache", shuffle_seed=1234)
    x = r.batch(step, batch_size)          # (batch_size, sample_len) tokens; advances the cursor
    ckpt["data"] = r.state_dict()          # ... later, in a new process:
    r.load_state_dict(ckpt["data"])        # raises ResumeMismatchError on any other dataset/permutation

Locations: a local mix directory; `s3://bucket/prefix` (boto3; endpoint from `s3_endpoint_url=` or
AWS_ENDPOINT_URL[_S3]; unsigned requests when `anonymous=True`, or when no credentials are configured);
`hf://datasets/org/name@revision[/subdir]` (huggingface_hub `hf_hub_download`, so HF_HUB_OFFLINE and a
pre-populated cache work; `hub_endpoint=` or HF_ENDPOINT for mirrors). Remote locations are those of
`core/transport.py` (S3Location, HubLocation), shared with the build's storage and the publish targets.

Fetching: manifest.json is read and checked (structure, totals, fingerprint) at open; a shard is fetched
only when a requested sample lives in it, and its size and sha256 are verified when it arrives (once per
reader for files found already cached or local). Local shards are read in place. Remote files live in
`cache_dir/objects/<sha256[:2]>/<sha256>`, which any number of processes may share (fcntl locks, see
reader/cache.py): `cache_bytes` bounds the whole directory, not one process's part, and it never goes over
(a reader that finds no room beside the files others hold, or no space on the cache's disk, reads that
shard into its own memory instead); a file a reader has open or mapped is never removed; a file is
downloaded by one process at a time. Shards
in the cache or local are read through `numpy.memmap`. `prefetch_bytes=P` starts a thread that holds up to
P bytes of the shards the next reads need (`prefetch`; batch/next_batch call it), see reader/prefetch.py.

Order: train sample k is storage sample perm_e[k mod N] with e = k // N (N = len(r), samples per pass).
Scheme "global" (default): perm_e is the argsort of splitmix64(i XOR base(shuffle_seed, e)) over i < N, a
bijection, so no ties and nothing depends on numpy's RNG algorithms. Scheme "shard_window"
(`shuffle_window=K`): shards in a seeded order, cut into windows of K shards, samples shuffled within each
window (reader/shuffle.py), so a batch touches a bounded number of shards.
`shuffle_perm_sha` = sha256 of perm_0 as little-endian uint64.
Past one pass: by default (`epochs=1`) reading sample N raises `EndOfMix` (iteration stops); with
`epochs=E` (None = unbounded) epoch e uses perm_e, and the state records `epoch` and `epoch_perm_sha`.
The validation reader (`split="val"`, or `r.validation_reader()`) reads storage order unless asked to
shuffle, one pass.

State: `state_dict()` = {seq_len, samples_consumed, shuffle_seed, shuffle_perm_sha, dataset_files_sha,
step, tokens_consumed} + format, split, sample_len, num_samples, shuffle, shuffle_scheme, shuffle_window,
epochs, epoch, epoch_perm_sha, interpretation_sha256 (the manifest's hash of how the bytes are read).
Format /2; a /1 state (before shuffle schemes) is read as the global scheme.
tokens_consumed = samples_consumed x sample_len (tokens read from the mix); step counts batches (each of
at least one sample; iterating consumes samples without steps), so step <= samples_consumed; epoch =
samples_consumed // num_samples and epoch_perm_sha is that epoch's permutation. `load_state_dict` requires
exactly these fields, each of its type (an int is never a bool; numpy integers count as ints), checks
those relations, and recomputes and compares the rest (the state's `epochs` may differ from the reader's:
resume with more passes). Any problem raises ResumeMismatchError naming the field. Nothing is re-shuffled.

Jobs of several ranks and workers: `r.plan(global_batch, rank, world_size, steps)` (a StepPlan) says which
positions each rank and worker reads at each global step, and `r.state_at(samples_consumed, step)` is the
job's state at a step boundary; mix_assets/reader/torch_data.py wraps both for torch (docs/reader.md).

Document boundaries: on a revision built with packing.doc_index, `r.doc_starts(k)` gives the offsets
inside sample k where a document starts and `r.segment_ids(k)` a per-token document number (for
intra-document attention masks); without the index both raise NoDocIndexError.
"""


from mix_assets.reader.errors import (
    EndOfMix,
    NoDocIndexError,
    PositionError,
    ResumeMismatchError,
    ShardCorruptError,
)
from mix_assets.reader.mix import MixReader, open_mix
from mix_assets.reader.plan import StepPlan

__all__ = [
    "EndOfMix",
    "MixReader",
    "NoDocIndexError",
    "PositionError",
    "ResumeMismatchError",
    "ShardCorruptError",
    "StepPlan",
    "open_mix",
]
