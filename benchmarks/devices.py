"""Every family on whatever device JAX sees: one table, each workload beside its peer in the same run.

Each workload runs in a fresh Python process of its own (``BAYESTREES_COMPILATION_CACHE=0``, so
compilation is measured, never loaded from an earlier run). In that process our side runs first,
then the peer's, each as a first call (compilation and one run) followed by ``repeats`` timed
calls; "s" is the median of the timed calls and "compile s" the first call minus that median.

| family | workload | ours | peer |
|---|---|---|---|
| forest | Bayesian forest, 100 trees, ``min_samples_leaf=2``, fit + predict, California fold 0 | ``bt.BayesianForestRegressor(100, n_jobs=-1)`` | ``sklearn.ensemble.RandomForestRegressor(100, min_samples_leaf=2, n_jobs=-1)`` |
| forest | EBF, 100 trees, ``trunk_min_samples_leaf=3000``, the same | ``bt.EmpiricalBayesianForestRegressor`` | the same scikit-learn forest |
| pcfg | BCART-PCFG, Iris at 10 bins: log evidence, MAP tree, 1,000 exact draws | ``bt.PCFGTreeClassifier(max_bins=10, draws=1000).fit`` | a plain-Python memoised recursion over the same boxes computing log evidence and the MAP value (``pcfg_speed.python_recursion``; no draws) |
| safebayes | safe-Bayes RF: weigh 100,000 prior trees, predict the test rows (breast cancer, 80/20 split 0, ``m = 5``) | ``bt.SafeBayesForestClassifier(100_000)``, fit + ``predict_proba`` with its prior trees drawn (and cached) by the first call | the plain-NumPy reference (``safebayes_reference``): ECDF transform, routing, weights and predictive for 100,000 trees of its own (drawn before timing) |
| bcart | Bayesian CART, 16 chains of 2,000 + 2,000 one-move steps, Friedman ``n = 1,000``, ``p = 10`` | ``bt.BayesianCARTRegressor(scheme="moves", chains=16, max_depth=5, max_bins=100)`` (``chain_method="auto"``) | bartz ``mc_gbart(ntree=1, mc_cores=16, numcut=100)``, the same steps per chain |
| bet | BET, 4 chains of 10,000 sweeps, breast cancer (683 rows) | ``fit_bet`` with 4 chains (``chain_method="auto"``), the settings of ``bet_paper.py`` | no other implementation of BET is known to us: the same fit with 1 chain is shown instead |
| bart | BART, 200 trees, one chain: seconds per full step, Friedman ``n = 1,024``, ``p = 100`` | the kernel of ``bt.BARTRegressor`` (``bart_bartz.speed``) | bartz's ``mcmcstep.step`` in the same process (``bart_bartz.speed``) |

Peak memory: the growth of the process's peak resident set (``VmHWM``) over its resident set just
before that side started (the peak is reset between the two sides through
``/proc/self/clear_refs``; Linux only, else the whole process's ``ru_maxrss``), plus for the
forests the peaks of the worker processes. On an accelerator, JAX's ``peak_bytes_in_use`` of the
device is recorded too (after our side, and after the peer's). BART's two sides share one process
(``bart_bartz.speed`` interleaves them), so its memory is the two together.

bartz is a benchmark-only install: the ``bcart`` and ``bart`` workloads run under
``--bartz-python`` (default ``.venv-bartz/bin/python`` when it exists; see ``bart_bartz.py`` for
setting it up), else under this interpreter without the peer.

Usage::

    .venv/bin/python benchmarks/devices.py                       # every workload, full size
    .venv/bin/python benchmarks/devices.py --quick               # small smoke version
    .venv/bin/python benchmarks/devices.py --only forest,pcfg    # families (or workloads: bf, ebf)

The device is whatever JAX picks (``jax.devices()[0]``), so the same command measures a GPU where
one is installed. Prints a Markdown table and appends one JSON line per workload to ``--out``
(default ``benchmarks/results/devices.jsonl``, ``devices_quick.jsonl`` with ``--quick``), each with
the load average before and after.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = HERE / "results"
BARTZ_PYTHON = REPO / ".venv-bartz" / "bin" / "python"

# name: (family, needs bartz)
WORKLOADS = {"bf": ("forest", False), "ebf": ("forest", False), "pcfg": ("pcfg", False),
             "safebayes": ("safebayes", False), "bcart": ("bcart", True), "bet": ("bet", False),
             "bart": ("bart", True)}


# -- measuring, in the child ----------------------------------------------------------------------
def _status_kb(field: str, pid="self") -> int | None:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_peak() -> bool:
    """Reset this process's peak RSS (``VmHWM``) to its RSS now; False where the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _device_peak_mb():
    import jax

    try:
        stats = jax.devices()[0].memory_stats()
    except Exception:  # noqa: BLE001 - CPU devices may not implement it
        return None
    if not stats or "peak_bytes_in_use" not in stats:
        return None
    return stats["peak_bytes_in_use"] / 2**20


def measure(fn, repeats: int, extra_peak_mb=None, jit: bool = True) -> dict:
    """Run ``fn`` once (compilation and one run), then ``repeats`` times; time and peak memory of it.

    ``extra_peak_mb()``, if given, adds the peak of helper processes (the forest's workers).
    ``jit=False`` for a peer that compiles nothing (its compile time is then None); with
    ``repeats=0`` the first call is the time.
    """
    rss0 = _status_kb("VmRSS")
    exact = _reset_peak() and rss0 is not None
    t0 = time.perf_counter()
    out = fn()
    first = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    s = statistics.median(times) if times else first
    if exact:
        peak = (_status_kb("VmHWM") - rss0) / 1024
    else:  # the whole process's peak (KiB on Linux)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rec = {"s": s, "times_s": times, "first_s": first, "compile_s": max(first - s, 0.0) if jit and times else None, "peak_mb": peak,
           "peak_is_growth": exact, "device_peak_mb": _device_peak_mb(), "value": out}
    if extra_peak_mb is not None:
        rec["workers_peak_mb"] = extra_peak_mb()
        rec["peak_mb"] += rec["workers_peak_mb"]
    return rec


# -- the workloads (each returns {"ours": ..., "peer": ..., ...}) ----------------------------------
def _california_fold0(data_dir, quick):
    from sklearn.model_selection import KFold

    from forest_california import SEED, load

    X, y, _ = load(data_dir)
    if quick:
        keep = np.random.default_rng(0).choice(len(y), 2000, replace=False)
        X, y = X[keep], y[keep]
    tr, te = next(iter(KFold(10, shuffle=True, random_state=SEED).split(X)))
    return X[tr], y[tr], X[te], y[te]


def _forest(kind, a):
    import bayestrees as bt
    from bayestrees.inference.forest import workers
    from forest_common import rmse
    from sklearn.ensemble import RandomForestRegressor

    Xtr, ytr, Xte, yte = _california_fold0(a.data_dir, a.quick)
    n_trees = 10 if a.quick else 100
    make = {"bf": lambda: bt.BayesianForestRegressor(n_trees, min_samples_leaf=2, n_jobs=-1, random_state=0),
            "ebf": lambda: bt.EmpiricalBayesianForestRegressor(n_trees, trunk_min_samples_leaf=3000,
                                                               min_samples_leaf=2, n_jobs=-1, random_state=0)}[kind]

    def ours():
        return rmse(make().fit(Xtr, ytr).predict(Xte), yte)

    def workers_peak():
        return sum((_status_kb("VmHWM", w.proc.pid) or 0) / 1024
                   for w in workers.default_pool().workers if w.proc.poll() is None)

    def peer():
        rf = RandomForestRegressor(n_trees, min_samples_leaf=2, n_jobs=-1, random_state=0)
        return rmse(rf.fit(Xtr, ytr).predict(Xte), yte)

    r = {"ours": measure(ours, a.repeats, workers_peak)}
    workers.shutdown()
    r["peer"] = measure(peer, a.repeats, jit=False)
    r.update(n_train=len(ytr), n_test=len(yte), n_trees=n_trees, value_name="test RMSE")
    return r


def forest_bf(a):
    return _forest("bf", a)


def forest_ebf(a):
    return _forest("ebf", a)


def pcfg(a):
    from sklearn.datasets import load_iris

    import bayestrees as bt
    from bayestrees.data import Binner
    from pcfg_speed import python_recursion

    X, y = load_iris(return_X_y=True)
    bins, draws = (5, 100) if a.quick else (10, 1000)

    def ours():
        m = bt.PCFGTreeClassifier(max_bins=bins, draws=draws, random_state=0).fit(X, y)
        return float(m.log_evidence_)

    codes = Binner(max_bins=bins).fit(X).transform(X).astype(np.int64)

    def peer():  # the same boxes (the library's binning), log evidence and MAP value; no draws
        (log_q, _), _ = python_recursion(codes, y, 3, 1.0, 2.0)
        return log_q

    return {"ours": measure(ours, a.repeats), "peer": measure(peer, 0 if not a.quick else 1, jit=False),
            "bins": bins, "draws": draws, "value_name": "log evidence"}


def safebayes(a):
    from sklearn.model_selection import train_test_split

    import bayestrees as bt
    import safebayes_reference as ref
    from bet_paper import load_cancer

    X, y = load_cancer(a.data_dir)
    Xa, Xb, ya, yb = train_test_split(X, y, test_size=0.2, random_state=0, stratify=y)
    K = 1000 if a.quick else 100_000

    def ours():
        clf = bt.SafeBayesForestClassifier(K, split_prob=0.475, effective_sample_size=5, leaf_concentration=1.0,
                                           random_state=0).fit(Xa, ya)
        p = clf.predict_proba(Xb)
        return float(np.mean(clf.classes_[np.argmax(p, 1)] == yb))

    r = {"ours": measure(ours, a.repeats)}
    t0 = time.perf_counter()
    forest = ref.sample_forest(K, X.shape[1], seed=12345, max_internal=511)
    r["peer_prior_draw_s"] = time.perf_counter() - t0
    classes, ya_i = np.unique(ya, return_inverse=True)

    def peer():
        Ftr, Fte = ref.ecdf_transform(Xa, Xb)
        logw, P = ref.fit_predict(forest, Ftr, ya_i, Fte, len(classes))
        p = ref.forest_proba(logw, P, 5 / len(ya))
        return float(np.mean(classes[np.argmax(p, 1)] == yb))

    r["peer"] = measure(peer, a.repeats, jit=False)
    r.update(trees=K, n_train=len(ya), n_test=len(yb), value_name="test accuracy")
    return r


def bcart(a):
    import jax

    import bayestrees as bt
    from bcart_speed import friedman

    n, steps, chains = (200, 400, 16) if a.quick else (1000, 4000, 16)
    X, y = friedman(np.random.default_rng(0), n)

    def ours():
        est = bt.BayesianCARTRegressor(scheme="moves", draws=steps // 2, tune=steps // 2, chains=chains,
                                       max_depth=5, max_bins=100, random_state=0).fit(X, y)
        jax.block_until_ready(est.result_.lp)
        return est.chain_method if hasattr(est, "chain_method") else None

    r = {"ours": measure(ours, a.repeats), "n": n, "steps_per_chain": steps, "chains": chains}
    try:
        from bartz.BART import mc_gbart
    except ImportError:
        r["peer_missing"] = "bartz not installed (see benchmarks/bart_bartz.py)"
        return r
    import warnings

    def peer():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "would like to shard the chains across 2 devices"
            m = mc_gbart(X, y.astype(np.float32), ntree=1, ndpost=chains * (steps // 2), nskip=steps // 2,
                         numcut=100, printevery=None, seed=0, mc_cores=chains)
            jax.block_until_ready(m.yhat_train_mean)
        return None

    r["peer"] = measure(peer, a.repeats)
    return r


def bet(a):
    import warnings

    import jax

    from bayestrees.data import prepare_data
    from bayestrees.inference.bet.fit import BETConfig, fit_bet
    from bet_paper import BET_BC, load_cancer

    X, y = load_cancer(a.data_dir)
    data = prepare_data(X, y, task="classification", max_bins=BET_BC["max_bins"], allow_nan=False)
    sweeps = 200 if a.quick else 10_000
    kw = {k: v for k, v in BET_BC.items() if k != "max_bins"}

    def run(chains):
        def fn():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                res = fit_bet(jax.random.key(1), data, BETConfig(**kw, draws=1, tune=sweeps, chains=chains))
                jax.block_until_ready(res.draws.n_trees)
            return None
        return fn

    reps = a.repeats if a.quick else 1  # 10,000 sweeps of 4 chains: about a minute on 2 CPU cores
    return {"ours": measure(run(4), reps), "peer": measure(run(1), reps), "sweeps": sweeps, "chains": 4,
            "peer_name": "BET, 1 chain"}


def bart(a):
    import types

    try:
        import bart_bartz
    except ImportError:
        return {"peer_missing": "bartz not installed (see benchmarks/bart_bartz.py)", "error": "no bartz"}
    import jax

    n, steps, warmup, repeats = (256, 5, 5, 1) if a.quick else (1024, 50, 100, 3)
    args = types.SimpleNamespace(seed=0, warmup=warmup, steps=steps, repeats=repeats, speed_chains=1)
    rss0 = _status_kb("VmRSS")
    exact = _reset_peak() and rss0 is not None
    rec = bart_bartz.speed(n, 100, args)
    peak = ((_status_kb("VmHWM") - rss0) / 1024 if exact
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    dev = _device_peak_mb()
    jax.clear_caches()
    side = dict(peak_mb=peak, peak_is_growth=exact, device_peak_mb=dev, peak_shared=True)
    return {"ours": dict(s=rec["ours_s_per_step"], times_s=rec["ours_s_per_step_repeats"],
                         compile_s=rec["ours_compile_s"], **side),
            "peer": dict(s=rec["bartz_s_per_step"], times_s=rec["bartz_s_per_step_repeats"],
                         compile_s=rec["bartz_compile_s"], **side),
            "n": n, "p": 100, "m": 200, "steps": steps, "warmup": warmup, "unit": "s per step"}


RUN = {"bf": forest_bf, "ebf": forest_ebf, "pcfg": pcfg, "safebayes": safebayes, "bcart": bcart, "bet": bet,
       "bart": bart}
DESCRIBE = {
    "bf": ("Bayesian forest, {n_trees} trees, California fold 0 ({n_train:,} rows): fit + predict",
           "scikit-learn RF, n_jobs=-1"),
    "ebf": ("EBF, {n_trees} trees, California fold 0 ({n_train:,} rows): fit + predict",
            "scikit-learn RF, n_jobs=-1"),
    "pcfg": ("BCART-PCFG, Iris at {bins} bins: log evidence, MAP tree, {draws:,} exact draws",
             "plain-Python recursion (evidence, MAP value)"),
    "safebayes": ("safe-Bayes, {trees:,} prior trees: weigh + predict (breast cancer)", "plain-NumPy reference"),
    "bcart": ("Bayesian CART, {chains} chains x {steps_per_chain:,} moves (Friedman n={n:,})",
              "bartz mc_gbart, 1 tree, {chains} chains"),
    "bet": ("BET, {chains} chains x {sweeps:,} sweeps (breast cancer)", "BET, 1 chain (no other implementation)"),
    "bart": ("BART, 200 trees, 1 chain, per step (Friedman n={n:,}, p=100)", "bartz, same device"),
}


def child(name, a):
    if WORKLOADS[name][1]:
        try:  # bartz first: on import it may set XLA_FLAGS for the GPU, read once per process
            import bartz  # noqa: F401
        except ImportError:
            pass
    sys.path.insert(0, str(HERE))
    import jax

    rec = {"workload": name, "family": WORKLOADS[name][0]}
    rec.update(RUN[name](a))
    d = jax.devices()[0]
    rec.update(device=f"{d.platform}:{d.id} {getattr(d, 'device_kind', '')}".strip(), backend=jax.default_backend(),
               n_devices=jax.device_count(), jax_version=jax.__version__)
    try:
        import bartz
        rec["bartz_version"] = bartz.__version__
    except ImportError:
        pass
    from forest_common import machine

    rec.update(machine())
    print("RESULT " + json.dumps(rec, default=float), flush=True)


# -- the parent ------------------------------------------------------------------------------------
def _fmt(v, unit=""):
    if v is None:
        return "-"
    if v >= 100:
        return f"{v:,.0f}{unit}"
    if v >= 1:
        return f"{v:.2f}{unit}"
    return f"{v:.3g}{unit}"


def table(records) -> str:
    lines = ["| family | workload | device | ours s | ours compile s | ours peak MB | peer | peer s | "
             "peer compile s | peer peak MB | ours / peer | load before / after |",
             "|---|---|---|---:|---:|---:|---|---:|---:|---:|---:|---|"]
    for r in records:
        name = r["workload"]
        if "error" in r and "ours" not in r:
            lines.append(f"| {r['family']} | {name} | {r.get('device', '-')} | failed: {r['error'][:80]} "
                         "| | | | | | | | |")
            continue
        work, peer = DESCRIBE[name]
        work, peer = work.format(**r), r.get("peer_missing") or peer.format(**r)
        o, p = r["ours"], r.get("peer")

        def mem(side):
            if side is None:
                return "-"
            m = _fmt(side["peak_mb"])
            if side.get("device_peak_mb") is not None:
                m += f" (device {_fmt(side['device_peak_mb'])})"
            return m + (" (both)" if side.get("peak_shared") else "")
        ratio = f"{o['s'] / p['s']:.2f}" if p else "-"
        lines.append(f"| {r['family']} | {work} | {r['device']} | {_fmt(o['s'])} | {_fmt(o['compile_s'])} | "
                     f"{mem(o)} | {peer} | {_fmt(p['s']) if p else '-'} | "
                     f"{_fmt(p['compile_s']) if p else '-'} | {mem(p)} | {ratio} | "
                     f"{' '.join(map(str, r['load_before']))} / {' '.join(map(str, r['load_after']))} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small smoke version of every workload")
    ap.add_argument("--only", default=None,
                    help="comma-separated families (forest, pcfg, safebayes, bcart, bet, bart) or workloads "
                         "(bf, ebf)")
    ap.add_argument("--out", default=None, help="JSON-lines file (default benchmarks/results/devices[_quick].jsonl)")
    ap.add_argument("--repeats", type=int, default=None, help="timed calls per side (default 2; 1 with --quick)")
    ap.add_argument("--data-dir", default=None, help="folder of the public data files (default: $BAYESTREES_DATA, "
                                                     "else ../shared/data relative to the repository root)")
    ap.add_argument("--bartz-python", default=None,
                    help="interpreter with bartz for bcart and bart (default .venv-bartz/bin/python if present)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per workload before it is stopped")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.repeats is None:
        a.repeats = 1 if a.quick else 2
    if a.data_dir is None:
        sys.path.insert(0, str(HERE))
        from forest_common import data_dir
        a.data_dir = str(data_dir())
    if a.child:
        return child(a.child, a)

    wanted = [w for w in WORKLOADS if a.only is None or
              {WORKLOADS[w][0], w} & set(a.only.split(","))]
    if not wanted:
        ap.error(f"--only {a.only!r} names none of {sorted(set(f for f, _ in WORKLOADS.values()) | set(WORKLOADS))}")
    out = Path(a.out) if a.out else RESULTS / ("devices_quick.jsonl" if a.quick else "devices.jsonl")
    out.parent.mkdir(parents=True, exist_ok=True)
    bartz_py = a.bartz_python or (str(BARTZ_PYTHON) if BARTZ_PYTHON.exists() else sys.executable)
    env = {**os.environ, "BAYESTREES_COMPILATION_CACHE": "0"}
    records = []
    for w in wanted:
        py = bartz_py if WORKLOADS[w][1] else sys.executable
        cmd = [py, str(Path(__file__).resolve()), "--child", w, "--repeats", str(a.repeats),
               "--data-dir", a.data_dir] + (["--quick"] if a.quick else [])
        before = [round(v, 2) for v in os.getloadavg()]
        started = time.strftime("%Y-%m-%d %H:%M:%S")
        t0 = time.perf_counter()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=a.timeout)
            lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
            if lines:
                rec = json.loads(lines[-1][len("RESULT "):])
            else:
                rec = {"workload": w, "family": WORKLOADS[w][0], "error": (p.stderr.strip().splitlines() or ["?"])[-1]}
        except subprocess.TimeoutExpired:
            rec = {"workload": w, "family": WORKLOADS[w][0], "error": f"stopped after {a.timeout:.0f} s"}
        rec.update(load_before=before, load_after=[round(v, 2) for v in os.getloadavg()], started=started,
                   wall_s=time.perf_counter() - t0, quick=a.quick, repeats=a.repeats,
                   command=" ".join(["benchmarks/devices.py"] + (argv if argv is not None else sys.argv[1:])),
                   python_machine=platform.machine())
        records.append(rec)
        with open(out, "a") as fh:
            fh.write(json.dumps(rec, default=float) + "\n")
        print(f"{w}: {rec.get('ours', {}).get('s', rec.get('error'))} (peer {rec.get('peer', {}).get('s')}) "
              f"in {rec['wall_s']:.0f} s", flush=True)
    print()
    print(table(records))
    try:
        shown = out.resolve().relative_to(REPO)
    except ValueError:
        shown = out
    print(f"\nappended {len(records)} lines to {shown}")


if __name__ == "__main__":
    main()
