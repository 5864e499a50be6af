"""Speed benchmark: Bayesian forest fit/predict, bayestrees vs the same forest built with scikit-learn.

Same work on both sides: ``n_trees`` CART trees with ``min_samples_leaf``, each
fit to its own i.i.d. Exp(1) row-weight draw (scikit-learn:
``DecisionTreeRegressor(min_samples_leaf=...).fit(X, y, sample_weight=w)``),
two workers on each side: scikit-learn's tree builder releases the GIL and runs
in two threads; ours (``n_jobs=2``) runs in two worker processes pinned to one
core each (``bayestrees.inference.forest.workers``), started and compiled during the
warm-up and kept for the timed fits.

* Our fit time is the full ``BayesianForestRegressor.fit``: binning to 255
  bins, validation, weight draws, growth and the copy of the trees to NumPy.
  It is measured after a warm-up fit on the same shapes (JIT compilation is
  reported separately: warm-up time minus the per-tree time of the warm-up's
  trees).
* Prediction: posterior mean of the forest on the held-out fold (ours: binning
  + tree traversal; scikit-learn: mean of the trees' ``predict`` over 2
  threads); 5 interleaved calls per repeat, median over all of them.
* CPU time: the process's own CPU time plus, for ours, that of its worker
  processes (``/proc/<pid>/stat``) over the same interval.
* Peak memory: each side is fit once in a fresh child process, measured the
  same way on both sides (``memory_child``): the growth of the process's peak
  resident set size (``VmHWM`` in ``/proc/self/status``, reset through
  ``/proc/self/clear_refs`` once imports and data loading are done; ``ru_maxrss``
  would carry the parent's peak over ``exec`` on Linux) over its RSS at that
  point, plus the whole peak RSS of every process it started during the fit
  (ours: the worker processes and the short-lived compiling process, their JAX
  runtimes included), found by walking ``/proc/<pid>/task/*/children`` every
  20 ms: the sum of the peaks (``peak_growth_mb``), an upper bound on the peak
  of the sum, which is also sampled (``sampled_peak_sum_mb``).  Shared-library
  pages count in every process's RSS, so each child's peak anonymous memory
  (``RssAnon``, sampled) is recorded beside it.  Ours is measured twice, each in
  a fresh process, with one fresh persistent compilation cache: ``cold`` (the
  program compiled, as in a first fit) and ``warm`` (loaded from that cache, as
  in every later process).
* Scaling: Friedman-1 with 8 features at n = 20k, 200k, 2M rows, fewer trees
  at larger n (same number on both sides).

Times are wall-clock medians of ``--repeats`` runs in one process, sides
interleaved, so the ratios are comparable even on a busy machine.

Usage::

    python benchmarks/speed_forest.py                  # full run (California + scaling)
    python benchmarks/speed_forest.py --sizes 20000    # quicker scaling part

Run it from the repository root against the installed library. The data are read
from ``--data-dir`` (default: ``$BAYESTREES_DATA``, else ``../shared/data``
relative to the repository root).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from devices import _reset_peak  # noqa: E402  (this folder's every-family benchmark: the same peak-RSS reset)

# the compile time is reported, so no persistent compilation cache (bayestrees.compile_cache, on by
# default) unless one is asked for: with it, a second run would load the programs the first compiled
os.environ.setdefault("BAYESTREES_COMPILATION_CACHE", "0")

ROOT = Path(__file__).resolve().parents[1]
# the public data sets: ../shared/data relative to the repository root unless BAYESTREES_DATA or --data-dir says
DATA_DIR = Path(os.environ.get("BAYESTREES_DATA", ROOT.parent / "shared" / "data"))
RESULTS = ROOT / "benchmarks" / "results" / "speed_forest.jsonl"


def california_fold(fold: int = 0, data_dir=DATA_DIR):
    import pandas as pd
    from sklearn.model_selection import KFold

    df = pd.read_csv(Path(data_dir) / "california_housing.csv")
    y = df.pop("medianHouseValue").to_numpy(float)
    X = df.to_numpy(float)
    tr, te = list(KFold(10, shuffle=True, random_state=0).split(X))[fold]
    return X[tr], y[tr], X[te], y[te]


def friedman(n: int, seed: int = 0):
    from sklearn.datasets import make_friedman1

    X, y = make_friedman1(n_samples=n, n_features=8, noise=1.0, random_state=seed)
    return X, y


# -- the two sides ---------------------------------------------------------------------------------
def ours_fit(X, y, n_trees, msl, seed=0, n_jobs=2):
    from bayestrees import BayesianForestRegressor

    return BayesianForestRegressor(draws=n_trees, min_samples_leaf=msl, n_jobs=n_jobs,
                                   random_state=seed).fit(X, y)


def ours_predict(model, X):
    return model.predict(X)


def sk_fit(X, y, n_trees, msl, seed=0, n_jobs=2):
    from sklearn.tree import DecisionTreeRegressor

    rng = np.random.default_rng(seed)
    seeds = rng.integers(0, 2**31 - 1, n_trees)

    def one(i):
        w = np.random.default_rng(seeds[i]).exponential(size=len(y))
        return DecisionTreeRegressor(min_samples_leaf=msl, random_state=int(seeds[i])).fit(X, y, sample_weight=w)

    with ThreadPoolExecutor(n_jobs) as ex:
        return list(ex.map(one, range(n_trees)))


def sk_predict(trees, X, n_jobs=2):
    with ThreadPoolExecutor(n_jobs) as ex:
        preds = list(ex.map(lambda t: t.predict(X), trees))
    return np.mean(preds, axis=0)


CPU = {}


def _worker_pids():
    from bayestrees.inference.forest import workers as workers

    return [w.proc.pid for w in workers.default_pool().workers if w.proc.poll() is None]


def _children_cpu():
    """CPU seconds (user + system) used so far by our worker processes."""
    total = 0.0
    for pid in _worker_pids():
        try:
            with open(f"/proc/{pid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except OSError:
            pass
    return total


def _timed(f, *a, **k):
    """Wall time of one call; the CPU time (all threads, and our worker processes) goes to ``CPU['last']``."""
    c0 = time.process_time() + _children_cpu()
    t0 = time.perf_counter()
    out = f(*a, **k)
    CPU["last"] = time.process_time() + _children_cpu() - c0
    return out, time.perf_counter() - t0


def _rss_mb():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _hwm_mb(pid="self"):
    """Peak resident set size of a process (VmHWM; unlike ``ru_maxrss`` it is reset by exec)."""
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _status_mb(pid, fields=("VmHWM", "VmRSS", "RssAnon")) -> dict | None:
    """Memory fields (MiB) of ``/proc/<pid>/status``, or None once the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            return {k: int(v.split()[0]) / 1024 for k, v in (ln.split(":", 1) for ln in fh) if k in fields}
    except (OSError, ValueError):
        return None


def _descendants(pid) -> list[int]:
    """Every process started by ``pid``, and by those, still running (``/proc/<pid>/task/*/children``)."""
    out = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for t in tasks:
        try:
            with open(f"/proc/{pid}/task/{t}/children") as fh:
                kids = [int(c) for c in fh.read().split()]
        except OSError:
            continue
        for c in kids:
            out += [c, *_descendants(c)]
    return out


class _TreeMemory:
    """Peak memory of this process's descendants while it runs, sampled every ``every`` seconds.

    Keeps, per descendant, its latest ``VmHWM`` (a true peak: it only grows) and the largest
    ``RssAnon`` seen, and the largest sum of (this process's RSS - ``base``) + every descendant's
    RSS.  ``note(pid)`` reads a process once more just before it is stopped (the compiling process).
    """

    def __init__(self, base_mb: float, every: float = 0.02):
        import threading

        self.base, self.every = base_mb, every
        self.hwm: dict[int, float] = {}
        self.anon: dict[int, float] = {}
        self.peak_sum = 0.0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def note(self, pid) -> float:
        st = _status_mb(pid)
        if st is not None:
            with self._lock:
                self.hwm[pid] = max(self.hwm.get(pid, 0.0), st["VmHWM"])
                self.anon[pid] = max(self.anon.get(pid, 0.0), st["RssAnon"])
            return st["VmRSS"]
        return 0.0

    def _sample(self):
        me = _status_mb("self")
        total = (me["VmRSS"] - self.base) if me else 0.0
        for pid in _descendants(os.getpid()):
            total += self.note(pid)
        self.peak_sum = max(self.peak_sum, total)

    def _run(self):
        while not self._stop.wait(self.every):
            self._sample()

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join()
        self._sample()
        after = [_status_mb(p) for p in _descendants(os.getpid())]  # what the kept workers hold between fits
        return {"children": len(self.hwm), "children_peak_rss_mb": [round(v, 1) for v in self.hwm.values()],
                "children_rss_after_mb": [round(a["VmRSS"], 1) for a in after if a],
                "children_peak_anon_mb": [round(v, 1) for v in self.anon.values()],
                "sampled_peak_sum_mb": round(self.peak_sum, 1)}


def _cache_kind(setting: str) -> str:
    """The compilation cache setting as the record keeps it: "0" (off), "" (the default folder) or
    "a temporary folder" (never a machine's path)."""
    return setting if setting in ("", "0") else "a temporary folder"


def memory_child(side: str, n_trees: int, msl: int, data_dir=DATA_DIR, n_jobs: int = 2) -> dict:
    """Run in a fresh process: peak RSS growth of one fit (see the module docstring).

    Ours includes starting the worker processes, compiling (or loading from the compilation
    cache named by ``BAYESTREES_COMPILATION_CACHE``) and the stored trees.
    """
    X, y, Xte, _ = california_fold(data_dir=data_dir)
    tracker = None
    if side == "ours":
        import bayestrees  # noqa: F401  (imports before the baseline)
        from bayestrees.inference.forest import workers

        close = workers._Worker.close

        def noted_close(self):  # the compiling process exits within the fit: read its peak first
            if tracker is not None:
                tracker.note(self.proc.pid)
            close(self)

        workers._Worker.close = noted_close
    else:
        import sklearn.tree  # noqa: F401
    base = _rss_mb()
    reset = _reset_peak()
    tracker = _TreeMemory(base)
    t0 = time.perf_counter()
    if side == "ours":
        ours_fit(X, y, n_trees, msl, n_jobs=n_jobs)
    else:
        sk_fit(X, y, n_trees, msl, n_jobs=n_jobs)
    seconds = time.perf_counter() - t0
    kids = tracker.stop()
    peak = _hwm_mb()
    own = peak - base if reset else peak  # without the reset: the whole process's peak
    return {"side": side, "n_jobs": n_jobs, "cache": _cache_kind(os.environ.get("BAYESTREES_COMPILATION_CACHE", "")),
            "fit_s": round(seconds, 2), "load_avg": os.getloadavg()[0], "baseline_rss_mb": round(base, 1),
            "peak_rss_mb": round(peak, 1), "own_growth_mb": round(own, 1), "peak_is_growth": reset,
            "workers_peak_rss_mb": round(sum(kids["children_peak_rss_mb"]), 1), **kids,
            "peak_growth_mb": round(own + sum(kids["children_peak_rss_mb"]), 1)}


def _library_commit() -> dict:
    """The repository commit the library was run from and whether ``bayestrees/`` had changes."""
    def git(*a):
        try:
            return subprocess.run(["git", "-C", str(ROOT), *a], capture_output=True, text=True, timeout=10).stdout.strip()
        except Exception:  # pragma: no cover - git missing
            return ""

    return {"repo_head": git("rev-parse", "--short", "HEAD"),
            "repo_dirty": bool(git("status", "--porcelain", "--", "bayestrees"))}


def _memory(side, n_trees, msl, data_dir=DATA_DIR, cache="0", n_jobs=2):
    env = dict(os.environ, BAYESTREES_COMPILATION_CACHE=cache)
    out = subprocess.run([sys.executable, __file__, "--memory-child", side, "--trees", str(n_trees),
                          "--msl", str(msl), "--data-dir", str(data_dir), "--memory-n-jobs", str(n_jobs)],
                         capture_output=True, text=True, check=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def memory_records(n_trees, msl, data_dir=DATA_DIR, n_jobs=2) -> dict:
    """Peak memory of one fit, each in a fresh process: scikit-learn's, and ours with a fresh
    persistent compilation cache (``cold``: compiled) and then with the same cache (``warm``: loaded)."""
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="speed-forest-cache-")
    try:
        rec = {"ours_cold": _memory("ours", n_trees, msl, data_dir, folder, n_jobs),
               "ours": _memory("ours", n_trees, msl, data_dir, folder, n_jobs)}
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    rec["sklearn"] = _memory("sklearn", n_trees, msl, data_dir, "0", n_jobs)
    return rec


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trees", type=int, default=100)
    ap.add_argument("--msl", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sizes", default="20000,200000,2000000")
    ap.add_argument("--size-trees", default="10,4,2", help="trees per size in the scaling part")
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--data-dir", default=str(DATA_DIR),
                    help="folder holding california_housing.csv (default: $BAYESTREES_DATA, else ../shared/data "
                         "relative to the repository root)")
    ap.add_argument("--out", default=str(RESULTS), help="JSON-lines file the record is appended to "
                    "(default: benchmarks/results/speed_forest.jsonl)")
    ap.add_argument("--memory-child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--memory-n-jobs", type=int, default=2, help=argparse.SUPPRESS)
    ap.add_argument("--memory-only", action="store_true",
                    help="only the peak-memory measurement (three fresh processes), printed as JSON")
    args = ap.parse_args()
    if args.memory_child:
        print(json.dumps(memory_child(args.memory_child, args.trees, args.msl, args.data_dir, args.memory_n_jobs)))
        return
    if args.memory_only:
        rec = {"benchmark": "speed_forest_memory", "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
               "host": platform.node(), "cpus": os.cpu_count(), "n_trees": args.trees, "min_samples_leaf": args.msl,
               "n_jobs": args.memory_n_jobs, "ours_parallel": os.environ.get("BAYESTREES_PARALLEL", "threads"),
               **_library_commit(),
               "memory": memory_records(args.trees, args.msl, args.data_dir, args.memory_n_jobs)}
        print(json.dumps(rec))
        with open(Path(args.out), "a") as fh:
            fh.write(json.dumps(rec) + "\n")
        return

    import jax

    X, y, Xte, yte = california_fold(data_dir=args.data_dir)
    T, msl = args.trees, args.msl
    rec = {"benchmark": "speed_forest", "time": time.strftime("%Y-%m-%dT%H:%M:%S"), "host": platform.node(),
           "cpus": os.cpu_count(), "jax": jax.__version__, "backend": jax.default_backend(),
           "n_train": len(y), "n_test": len(yte), "n_features": X.shape[1], "n_trees": T,
           "min_samples_leaf": msl, "n_jobs": 2, "binning_in_fit_time": True,
           "ours_parallel": os.environ.get("BAYESTREES_PARALLEL", "threads"),
           **_library_commit()}
    print(f"California housing fold 0: {len(y)} train / {len(yte)} test rows, {X.shape[1]} features; "
          f"{T} trees, min_samples_leaf={msl}, 2 workers each side; backend {jax.default_backend()}, "
          f"{os.cpu_count()} CPUs", flush=True)

    # warm-up (compilation) on the same shapes: 2 trees
    _, t_warm = _timed(ours_fit, X, y, 2, msl)
    m, _ = _timed(ours_fit, X, y, 2, msl)
    _, t_two = _timed(ours_fit, X, y, 2, msl)
    rec["ours_compile_s"] = round(max(t_warm - t_two, 0.0), 2)
    _timed(ours_predict, m, Xte)
    sk_fit(X[:2000], y[:2000], 2, msl)

    fits = {"ours": [], "sklearn": []}
    cpus = {"ours": [], "sklearn": []}
    preds = {"ours": [], "sklearn": []}
    for r in range(args.repeats):
        mo, t = _timed(ours_fit, X, y, T, msl, seed=r)
        fits["ours"].append(t)
        cpus["ours"].append(CPU["last"])
        ms, t = _timed(sk_fit, X, y, T, msl, seed=r)
        fits["sklearn"].append(t)
        cpus["sklearn"].append(CPU["last"])
        ours_predict(mo, Xte)  # compiles for this number of trees on the first repeat
        sk_predict(ms, Xte)
        for _ in range(5):  # predictions are short: 5 interleaved calls per repeat
            po, t = _timed(ours_predict, mo, Xte)
            preds["ours"].append(t)
            ps, t = _timed(sk_predict, ms, Xte)
            preds["sklearn"].append(t)
        print(f"  repeat {r}: fit ours {fits['ours'][-1]:.2f}s sklearn {fits['sklearn'][-1]:.2f}s; "
              f"predict ours {preds['ours'][-1] * 1e3:.0f} ms sklearn {preds['sklearn'][-1] * 1e3:.0f} ms", flush=True)
    rmse = lambda p: float(np.sqrt(np.mean((p - yte) ** 2)))  # noqa: E731
    med = {k: float(np.median(v)) for k, v in fits.items()}
    medp = {k: float(np.median(v)) for k, v in preds.items()}
    medc = {k: float(np.median(v)) for k, v in cpus.items()}
    rec.update(fit_s={k: round(v, 3) for k, v in med.items()}, fit_ratio=round(med["ours"] / med["sklearn"], 3),
               fit_cpu_s={k: round(v, 3) for k, v in medc.items()},
               fit_cpu_ratio=round(medc["ours"] / medc["sklearn"], 3),
               predict_s={k: round(v, 4) for k, v in medp.items()},
               predict_ratio=round(medp["ours"] / medp["sklearn"], 3),
               rmse={"ours": round(rmse(po), 1), "sklearn": round(rmse(ps), 1)},
               n_leaves_mean={"ours": float(np.mean(np.asarray((mo.trees_.left < 0) & (
                   np.arange(mo.trees_.left.shape[1]) < mo.trees_.n_nodes[:, None])).sum(1))),
                              "sklearn": float(np.mean([t.get_n_leaves() for t in ms]))})
    if not args.no_memory:
        rec["memory"] = memory_records(T, msl, args.data_dir)

    # scaling with n
    sizes = [int(s) for s in args.sizes.split(",") if s]
    st = [int(s) for s in args.size_trees.split(",")]
    rec["scaling"] = []
    for i, n in enumerate(sizes):
        k = st[min(i, len(st) - 1)]
        Xs, ys = friedman(n)
        _, tw = _timed(ours_fit, Xs, ys, 2, msl)  # warm-up for these shapes
        _, t2 = _timed(ours_fit, Xs, ys, 2, msl) if n <= 200_000 else (None, None)
        _, to = _timed(ours_fit, Xs, ys, k, msl)
        co = CPU["last"]
        _, ts = _timed(sk_fit, Xs, ys, k, msl)
        cs = CPU["last"]
        row = {"n": n, "trees": k, "ours_s": round(to, 2), "sklearn_s": round(ts, 2), "ratio": round(to / ts, 3),
               "ours_cpu_s": round(co, 2), "sklearn_cpu_s": round(cs, 2), "ours_warmup_2_trees_s": round(tw, 2)}
        if t2 is not None:
            row["ours_compile_s"] = round(max(tw - t2, 0.0), 2)
        rec["scaling"].append(row)
        print(f"  scaling n={n}: {k} trees ours {to:.2f}s sklearn {ts:.2f}s ratio {to / ts:.2f}", flush=True)

    # table
    print()
    print("| quantity | bayestrees | scikit-learn | ratio |")
    print("|---|---|---|---|")
    print(f"| fit {T} trees (s, median of {args.repeats}, incl. binning) | {med['ours']:.2f} | {med['sklearn']:.2f} "
          f"| {rec['fit_ratio']:.2f} |")
    print(f"| fit CPU time, all threads (s) | {medc['ours']:.2f} | {medc['sklearn']:.2f} "
          f"| {rec['fit_cpu_ratio']:.2f} |")
    print(f"| predict {len(yte)} rows (ms) | {medp['ours'] * 1e3:.0f} | {medp['sklearn'] * 1e3:.0f} "
          f"| {rec['predict_ratio']:.2f} |")
    print(f"| compile (s, once per shape) | {rec['ours_compile_s']:.1f} | - | |")
    if "memory" in rec:
        ms_ = rec["memory"]["sklearn"]
        for k, what in (("ours", "warm cache"), ("ours_cold", "cold: compiled")):
            mo_ = rec["memory"][k]
            print(f"| peak RSS growth of one fit, {what} (MiB): this process + {mo_['children']} others | "
                  f"{mo_['own_growth_mb']:.0f} + {mo_['workers_peak_rss_mb']:.0f} | {ms_['peak_growth_mb']:.0f} | "
                  f"{mo_['peak_growth_mb'] / max(ms_['peak_growth_mb'], 1):.2f} |")
    print(f"| test RMSE | {rec['rmse']['ours']:.0f} | {rec['rmse']['sklearn']:.0f} | |")
    print(f"| mean leaves per tree | {rec['n_leaves_mean']['ours']:.0f} | {rec['n_leaves_mean']['sklearn']:.0f} | |")
    for row in rec["scaling"]:
        print(f"| Friedman-1 n={row['n']:,}, {row['trees']} trees: wall s (CPU s) | {row['ours_s']:.2f} "
              f"({row['ours_cpu_s']:.1f}) | {row['sklearn_s']:.2f} ({row['sklearn_cpu_s']:.1f}) | {row['ratio']:.2f} |")
    out = Path(args.out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "a") as fh:
        fh.write(json.dumps(rec) + "\n")
    print(f"\nappended to {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")


if __name__ == "__main__":
    main()
