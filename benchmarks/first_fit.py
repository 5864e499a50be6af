"""The first fit of a fresh process: compilation with a cold, warm and no persistent compilation cache.

Issue 31, item 2.  Each run is a new Python process (``subprocess``) that imports bayestrees, loads
one Taddy fold of California housing (``KFold(10, shuffle=True, random_state=5807)``, fold 0 by
default; ``medianIncome`` times 1e4, as in ``forest_california.py``) and fits
``BayesianForestRegressor(100, min_samples_leaf=2, n_jobs=2)`` three times (seeds 0, 1, 2), then
predicts the held-out rows after the first fit.  The runs, in order, all with the same fresh
temporary cache folder (``BAYESTREES_COMPILATION_CACHE=<folder>``; a ``JAX_COMPILATION_CACHE_DIR``
of the caller is removed from the children's environment):

* ``cold``: the folder is empty;
* ``warm``: ``--warm-runs`` more processes with the folder the cold run filled;
* ``off``: ``BAYESTREES_COMPILATION_CACHE=0`` (no persistent cache: what every fresh process paid
  before; the worker processes still share a temporary folder of their own).

Figures per run (seconds):

* ``import``: ``import bayestrees`` (with NumPy, pandas and scikit-learn already imported);
* ``fit1``: the first fit's wall time; ``fit2``: the faster of the second and third fits (same
  shapes, so nothing left to compile: the steady fit time);
* ``compile``: ``fit1 - fit2``, the estimate of what the first fit spends on compilation and
  start-up (worker processes, tracing, loading programs); ``compile_cpu``: the same difference in
  CPU seconds of this process, its worker processes and the ones that have exited (less sensitive
  to other jobs on a shared machine);
* ``tree1``: time from the start of the first fit to its first finished tree (the progress
  counter's first update), ``tree1_steady`` the same in the steady fit; their difference is a
  second compile estimate, less noisy than ``fit1 - fit2``;
* ``first_result``: from the start of the process to the first fit's predictions on the held-out
  rows (interpreter start, imports, data, compilation, fit and prediction);
* ``load``: the 1-minute load average at the run's start and end (the box is shared).

One JSON line per run goes to ``benchmarks/results/first_fit.jsonl`` (``--out``).

    python benchmarks/first_fit.py                       # cold, 2 warm, off; n_jobs=2
    python benchmarks/first_fit.py --n-jobs 1,2 --warm-runs 3
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from forest_common import RESULTS, append_jsonl, data_dir, machine  # noqa: E402

SEED = 5807


def _proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) of a live process, from ``/proc/<pid>/stat``; 0 if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            parts = f.read().rsplit(")", 1)[1].split()
        return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def _cpu_now() -> float:
    """CPU seconds of this process, its exited children, and its live forest workers."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    gone = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = own.ru_utime + own.ru_stime + gone.ru_utime + gone.ru_stime
    if "bayestrees.inference.forest.workers" in sys.modules:
        from bayestrees.inference.forest import workers
        total += sum(_proc_cpu(w.proc.pid) for w in workers.default_pool().workers if w.proc.poll() is None)
    return total


def child(args) -> None:
    """One fresh process: import, load, fit three times, predict after the first; print one JSON line."""
    import numpy as np
    import pandas as pd
    from sklearn.model_selection import KFold

    t = time.perf_counter()
    import bayestrees as bt
    t_import = time.perf_counter() - t
    from bayestrees.inference.forest import bootstrap

    first_update: list = []
    update = bootstrap.Progress.update

    def timed_update(self, k=1):  # the time of the first finished tree of each fit
        if not first_update or first_update[-1] is None:
            if first_update:
                first_update[-1] = time.perf_counter()
        return update(self, k)

    bootstrap.Progress.update = timed_update

    df = pd.read_csv(Path(args.data_dir) / "california_housing.csv")
    y = df.pop("medianHouseValue").to_numpy(float)
    df["medianIncome"] = df["medianIncome"] * 1e4
    X = df.to_numpy(float)
    tr, te = list(KFold(10, shuffle=True, random_state=SEED).split(X))[args.fold]

    fits, trees, cpus = [], [], []
    rmse = first_result = None
    for s in range(3):
        first_update.append(None)
        c0, t0 = _cpu_now(), time.perf_counter()
        est = bt.BayesianForestRegressor(args.n_trees, min_samples_leaf=2, n_jobs=args.n_jobs, random_state=s)
        est.fit(X[tr], y[tr])
        fits.append(time.perf_counter() - t0)
        cpus.append(_cpu_now() - c0)
        trees.append(first_update[-1] - t0 if first_update[-1] is not None else float("nan"))
        if s == 0:
            pred = est.predict(X[te])
            first_result = time.time()  # epoch seconds: the parent subtracts its clock at the start
            rmse = float(np.sqrt(np.mean((np.asarray(pred) - y[te]) ** 2)))
    folder = bt.compilation_cache_dir() if hasattr(bt, "compilation_cache_dir") else None
    entries = len([f for f in os.listdir(folder) if f.endswith("-cache")]) if folder and os.path.isdir(folder) else 0
    steady = 1 + int(np.argmin(fits[1:]))
    # records name no machine's paths: the library relative to this repository (or "another checkout"),
    # the cache folder by its kind
    here = Path(__file__).resolve().parents[1]
    lib = Path(bt.__file__).resolve()
    lib_name = str(lib.relative_to(here)) if here in lib.parents else "another checkout"
    print(json.dumps({"bayestrees_file": lib_name, "import_s": t_import, "fit_s": fits, "cpu_s": cpus, "tree1_s": trees,
                      "fit1": fits[0], "fit2": fits[steady], "compile": fits[0] - fits[steady],
                      "compile_cpu": cpus[0] - cpus[steady], "tree1": trees[0], "tree1_steady": trees[steady],
                      "compile_tree1": trees[0] - trees[steady], "result_epoch": first_result,
                      "rmse": rmse, "cache_dir": "temporary folder" if folder else None, "cache_entries": entries}))


def run(kind: str, cache: str, n_jobs: int, args) -> dict:
    """Start one child process and return its record (with the parent's figures added)."""
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_COMPILATION_CACHE_DIR",
                                                          "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS",
                                                          "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES")}
    env["BAYESTREES_COMPILATION_CACHE"] = "0" if kind == "off" else cache
    if args.library:  # another checkout of the library (its folder holding ``bayestrees/``) first on the path
        env["PYTHONPATH"] = os.pathsep.join([args.library, *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("PYTHONWARNINGS", "ignore")
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--n-jobs", str(n_jobs), "--n-trees", str(args.n_trees),
           "--fold", str(args.fold), "--data-dir", str(args.data_dir)]
    load0 = os.getloadavg()[0]
    t0 = time.time()
    # (in the other checkout's folder: its worker processes, started with ``python -c``, import from there)
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800, cwd=args.library)
    wall = time.time() - t0
    if out.returncode != 0:
        raise RuntimeError(f"{kind} run failed:\n{out.stderr[-3000:]}")
    rec = json.loads(out.stdout.strip().splitlines()[-1])
    rec.update(run=kind, n_jobs=n_jobs, library="another checkout" if args.library else "this checkout", n_trees=args.n_trees, fold=args.fold, process_s=wall,
               first_result=rec.pop("result_epoch") - t0, load_start=load0, load_end=os.getloadavg()[0],
               time=time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t0)))
    return rec


def table(recs: list[dict]) -> str:
    head = (f"{'run':<8}{'n_jobs':>7}{'import':>8}{'fit1':>8}{'fit2':>8}{'compile':>9}{'cpu':>8}"
            f"{'tree1':>8}{'steady':>8}{'tree1 d':>9}{'result':>8}{'load':>11}")
    lines = [head, "-" * len(head)]
    for r in recs:
        lines.append(f"{r['run']:<8}{r['n_jobs']:>7}{r['import_s']:>8.2f}{r['fit1']:>8.2f}{r['fit2']:>8.2f}"
                     f"{r['compile']:>9.2f}{r['compile_cpu']:>8.2f}{r['tree1']:>8.2f}{r['tree1_steady']:>8.2f}"
                     f"{r['compile_tree1']:>9.2f}{r['first_result']:>8.2f}"
                     f"{r['load_start']:>6.1f}-{r['load_end']:<4.1f}")
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default=str(data_dir().resolve()))
    p.add_argument("--n-trees", type=int, default=100)
    p.add_argument("--n-jobs", default="2", help="comma-separated n_jobs values (default 2: the worker processes)")
    p.add_argument("--fold", type=int, default=0)
    p.add_argument("--warm-runs", type=int, default=2)
    p.add_argument("--runs", default="cold,warm,off", help="which runs, in order (default cold,warm,off)")
    p.add_argument("--out", default=str(RESULTS / "first_fit.jsonl"))
    p.add_argument("--library", default=None,
                   help="the folder of another checkout to import bayestrees from (e.g. a git worktree of an "
                        "older commit, for a before/after; use --runs off there: it has no persistent cache)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        args.n_jobs = int(args.n_jobs)
        child(args)
        return
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"uptime at start: {uptime}  ({os.cpu_count()} CPUs)", flush=True)
    info = machine()
    recs = []
    for n_jobs in [int(v) for v in args.n_jobs.split(",")]:
        cache = tempfile.mkdtemp(prefix="bayestrees-first-fit-")
        try:
            for kind in args.runs.split(","):
                for _ in range(args.warm_runs if kind == "warm" else 1):
                    rec = run(kind, cache, n_jobs, args)
                    rec["uptime_start"] = uptime
                    rec.update(info)
                    append_jsonl(args.out, rec)
                    recs.append(rec)
                    print(f"{kind:<5} n_jobs={n_jobs}: fit1 {rec['fit1']:.2f} s, fit2 {rec['fit2']:.2f} s, "
                          f"compile {rec['compile']:.2f} s ({rec['compile_cpu']:.2f} CPU s), first tree "
                          f"{rec['tree1']:.2f} s (steady {rec['tree1_steady']:.2f}), first result "
                          f"{rec['first_result']:.2f} s, {rec['cache_entries']} cache entries, "
                          f"load {rec['load_start']:.1f}-{rec['load_end']:.1f}", flush=True)
        finally:
            shutil.rmtree(cache, ignore_errors=True)
    print()
    print(table(recs))
    print(f"uptime at end: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    print("seconds; compile = fit1 - fit2 (wall), cpu = the same in CPU seconds (all processes), "
          "tree1 d = first tree of fit1 minus first tree of the steady fit, result = process start to "
          "the first predictions")


if __name__ == "__main__":
    main()
