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
| bart_rows | the same at ``n = 65,536`` rows (where a GPU's width counts) | the same | the same |
| treefn | a sum of 50 trees in a NumPyro model (``bt.bart_function``, Normal likelihood, ``sigma`` by NUTS), 4 chains, Friedman ``n = 2,000``; the timed call a refit (programs loaded from a cache of the process's own) | ``bt.sample_model`` | bartz ``mc_gbart(ntree=50, mc_cores=4)``, the same steps per chain |

Sizes come in suites (``--suite``, table ``SIZES``): ``full`` (the records' sizes, above),
``accelerator`` (every workload and its peer within ``--budget``, 450 s by default: the device
check that runs first whenever a GPU machine is at hand), ``quick`` (a smoke version) and ``tiny``
(the test suite's check of this script, ``tests/test_devices_script.py``).  The accelerator suite
runs the families never measured on a GPU first, gives each workload what is left of the budget as
its timeout, and starts none with under 20 s left (its line then says "not run").

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
    .venv/bin/python benchmarks/devices.py --suite accelerator   # every family within 8 minutes
    .venv/bin/python benchmarks/devices.py --quick               # small smoke version
    .venv/bin/python benchmarks/devices.py --only forest,pcfg    # families (or workloads: bf, ebf)

On a GPU machine with JAX, scikit-learn and pandas but none of this project's other needs,
``benchmarks/device_prep.sh`` (run here first) downloads the missing wheels to ``.whl/`` and copies
the data files to ``.device-data/``, and prints the one command that installs them there and runs
the accelerator suite.

The device is whatever JAX picks (``jax.devices()[0]``), so the same command measures a GPU where
one is installed. Prints a Markdown table, writes it beside ``--out`` (``.md``) and appends one JSON line per workload
to ``--out`` (default ``benchmarks/results/devices.jsonl``, ``devices_<suite>.jsonl`` for the other
suites), each with the load average before and after.
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
             "bart": ("bart", True), "bart_rows": ("bart", True), "treefn": ("treefn", True)}

#: sizes per suite and workload.  "full": the records' sizes; "accelerator": every family and its
#: peer within ``--budget`` (8 minutes of the device, process starts and compilation included) on
#: a GPU machine; "quick": a smoke version; "tiny": the suite's own test of the plumbing (seconds)
SIZES = {
    "full": {"bf": dict(trees=100, rows=None), "ebf": dict(trees=100, rows=None), "pcfg": dict(bins=10, draws=1000),
             "safebayes": dict(trees=100_000), "bcart": dict(n=1000, steps=4000, chains=16),
             "bet": dict(sweeps=10_000), "bart": dict(n=1024, steps=50, warmup=100, repeats=3),
             "bart_rows": dict(n=65_536, steps=20, warmup=20, repeats=3),
             "treefn": dict(n=2000, m=50, tune=500, draws=500, chains=4)},
    "accelerator": {"bf": dict(trees=100, rows=None), "ebf": dict(trees=100, rows=None),
                    "pcfg": dict(bins=10, draws=1000), "safebayes": dict(trees=100_000),
                    "bcart": dict(n=1000, steps=2000, chains=16), "bet": dict(sweeps=2000),
                    "bart": dict(n=1024, steps=50, warmup=50, repeats=2),
                    "bart_rows": dict(n=65_536, steps=10, warmup=10, repeats=2),
                    "treefn": dict(n=2000, m=50, tune=200, draws=200, chains=4)},
    "quick": {"bf": dict(trees=10, rows=2000), "ebf": dict(trees=10, rows=2000), "pcfg": dict(bins=5, draws=100),
              "safebayes": dict(trees=1000), "bcart": dict(n=200, steps=400, chains=16), "bet": dict(sweeps=200),
              "bart": dict(n=256, steps=5, warmup=5, repeats=1), "bart_rows": dict(n=4096, steps=5, warmup=5, repeats=1),
              "treefn": dict(n=200, m=10, tune=50, draws=50, chains=2)},
    "tiny": {"bf": dict(trees=2, rows=400), "ebf": dict(trees=2, rows=400), "pcfg": dict(bins=3, draws=10),
             "safebayes": dict(trees=100), "bcart": dict(n=50, steps=20, chains=2), "bet": dict(sweeps=10),
             "bart": dict(n=128, steps=2, warmup=1, repeats=1), "bart_rows": dict(n=256, steps=2, warmup=1, repeats=1),
             "treefn": dict(n=40, m=2, tune=5, draws=5, chains=1)},
}
#: timed calls per side after the first (compiling) call, per suite
REPEATS = {"full": 2, "accelerator": 1, "quick": 1, "tiny": 1}


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
def _california_fold0(data_dir, rows=None):
    from sklearn.model_selection import KFold

    from forest_california import SEED, load

    if (Path(data_dir) / "california_housing.csv").exists():
        X, y, _ = load(data_dir)
    else:   # the copy shipped with the package: the same rows (medianIncome scaled as load() does)
        from bayestrees.datasets import CALIFORNIA_FEATURES, load_california_housing

        X, y, _ = load_california_housing()
        X = X.copy()
        X[:, CALIFORNIA_FEATURES.index("medianIncome")] *= 1e4
    if rows:
        keep = np.random.default_rng(0).choice(len(y), rows, replace=False)
        X, y = X[keep], y[keep]
    tr, te = next(iter(KFold(10, shuffle=True, random_state=SEED).split(X)))
    return X[tr], y[tr], X[te], y[te]


def _forest(kind, a):
    import bayestrees as bt
    from bayestrees.inference.forest import workers
    from forest_common import rmse
    from sklearn.ensemble import RandomForestRegressor

    size = SIZES[a.suite][kind]
    Xtr, ytr, Xte, yte = _california_fold0(a.data_dir, size["rows"])
    n_trees = size["trees"]
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
    bins, draws = SIZES[a.suite]["pcfg"]["bins"], SIZES[a.suite]["pcfg"]["draws"]

    def ours():
        m = bt.PCFGTreeClassifier(max_bins=bins, draws=draws, random_state=0).fit(X, y)
        return float(m.log_evidence_)

    codes = Binner(max_bins=bins).fit(X).transform(X).astype(np.int64)

    def peer():  # the same boxes (the library's binning), log evidence and MAP value; no draws
        (log_q, _), _ = python_recursion(codes, y, 3, 1.0, 2.0)
        return log_q

    return {"ours": measure(ours, a.repeats), "peer": measure(peer, 0 if a.suite in ("full", "accelerator") else 1, jit=False),
            "bins": bins, "draws": draws, "value_name": "log evidence"}


def safebayes(a):
    from sklearn.model_selection import train_test_split

    import bayestrees as bt
    import safebayes_reference as ref
    from bet_paper import load_cancer

    X, y = load_cancer(a.data_dir)
    Xa, Xb, ya, yb = train_test_split(X, y, test_size=0.2, random_state=0, stratify=y)
    K = SIZES[a.suite]["safebayes"]["trees"]

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


def _bartz_gbart(r: dict):
    """bartz's ``mc_gbart``, or None with ``r["peer_missing"]`` said (bartz is a benchmark-only install)."""
    try:
        from bartz.BART import mc_gbart
    except ImportError:
        r["peer_missing"] = "bartz not installed (see benchmarks/bart_bartz.py)"
        return None
    return mc_gbart


def bcart(a):
    import jax

    import bayestrees as bt
    from bcart_speed import friedman

    n, steps, chains = (SIZES[a.suite]["bcart"][k] for k in ("n", "steps", "chains"))
    X, y = friedman(np.random.default_rng(0), n)

    def ours():
        est = bt.BayesianCARTRegressor(scheme="moves", draws=steps // 2, tune=steps // 2, chains=chains,
                                       max_depth=5, max_bins=100, random_state=0).fit(X, y)
        jax.block_until_ready(est.result_.lp)
        return est.chain_method if hasattr(est, "chain_method") else None

    r = {"ours": measure(ours, a.repeats), "n": n, "steps_per_chain": steps, "chains": chains}
    mc_gbart = _bartz_gbart(r)
    if mc_gbart is None:
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
    sweeps = SIZES[a.suite]["bet"]["sweeps"]
    kw = {k: v for k, v in BET_BC.items() if k != "max_bins"}

    def run(chains):
        def fn():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                res = fit_bet(jax.random.key(1), data, BETConfig(**kw, draws=1, tune=sweeps, chains=chains))
                jax.block_until_ready(res.draws.n_trees)
            return None
        return fn

    reps = 1 if a.suite == "full" else a.repeats  # 10,000 sweeps of 4 chains: about a minute on 2 CPU cores
    return {"ours": measure(run(4), reps), "peer": measure(run(1), reps), "sweeps": sweeps, "chains": 4,
            "peer_name": "BET, 1 chain"}


def bart(a, name="bart"):
    import types

    try:
        import bart_bartz
    except ImportError:
        return {"peer_missing": "bartz not installed (see benchmarks/bart_bartz.py)", "error": "no bartz"}
    import jax

    size = SIZES[a.suite][name]
    n, steps, warmup, repeats = size["n"], size["steps"], size["warmup"], size["repeats"]
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


def bart_rows(a):
    return bart(a, "bart_rows")


def treefn(a):
    """A sum of trees inside a NumPyro model (``bt.bart_function``, Normal likelihood, the noise scale
    by NUTS) against bartz's BART on the same rows, the same trees and the same steps per chain;
    the value is each side's RMSE of the posterior mean against the true function.

    ``sample_model`` builds its programs anew at every call; with ``jit_data=True`` and a
    compilation cache of this process's own, the timed call is a refit that loads them (as a
    user's second fit does), so its time is the sampling, the tracing and the loading."""
    import tempfile
    import warnings

    import jax
    import numpyro
    import numpyro.distributions as dist

    import bayestrees as bt
    from bcart_speed import friedman

    jax.config.update("jax_compilation_cache_dir", tempfile.mkdtemp(prefix="devices-treefn-"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    size = SIZES[a.suite]["treefn"]
    n, m, tune, draws, chains = (size[k] for k in ("n", "m", "tune", "draws", "chains"))
    rng = np.random.default_rng(0)
    X, y = friedman(rng, n)
    f_true = 10 * np.sin(np.pi * X[:, 0] * X[:, 1]) + 20 * (X[:, 2] - 0.5) ** 2 + 10 * X[:, 3] + 5 * X[:, 4]
    mu, sd = y.mean(), y.std()

    def model(X, y=None):
        f = bt.bart_function("f", X, m=m)
        sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
        numpyro.sample("y", dist.Normal(f, sigma), obs=y)

    def ours():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = bt.sample_model(model, X, y=((y - mu) / sd).astype(np.float32), draws=draws, tune=tune,
                                  chains=chains, random_seed=0, log_likelihood=False, jit_data=True)
        f = np.asarray(fit.idata.posterior["f"]).reshape(-1, n).mean(0) * sd + mu
        return float(np.sqrt(np.mean((f - f_true) ** 2)))

    r = {"ours": measure(ours, a.repeats), "n": n, "m": m, "steps_per_chain": tune + draws, "chains": chains,
         "value_name": "RMSE of the posterior mean against the true function"}
    mc_gbart = _bartz_gbart(r)
    if mc_gbart is None:
        return r

    def peer():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            b = mc_gbart(X, y.astype(np.float32), ntree=m, ndpost=chains * draws, nskip=tune, printevery=None,
                         seed=0, mc_cores=chains)
            f = np.asarray(jax.block_until_ready(b.yhat_train_mean))
        return float(np.sqrt(np.mean((f - f_true) ** 2)))

    r["peer"] = measure(peer, a.repeats)
    return r


RUN = {"bf": forest_bf, "ebf": forest_ebf, "pcfg": pcfg, "safebayes": safebayes, "bcart": bcart, "bet": bet,
       "bart": bart, "bart_rows": bart_rows, "treefn": treefn}
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
    "bart_rows": ("BART, 200 trees, 1 chain, per step (Friedman n={n:,}, p=100)", "bartz, same device"),
    "treefn": ("bart_function, {m} trees, in a NumPyro Normal model, {chains} chains x {steps_per_chain:,} steps "
               "(Friedman n={n:,})", "bartz mc_gbart, {m} trees, {chains} chains, same steps"),
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
        from bartz import __version__ as bartz_version
        rec["bartz_version"] = bartz_version
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


#: the accelerator suite's order: the families never measured on a GPU before first, so that a cut
#: budget leaves out those measured there already
ACCELERATOR_ORDER = ("bart", "treefn", "pcfg", "safebayes", "bf", "ebf", "bart_rows", "bcart", "bet")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", choices=tuple(SIZES), default=None,
                    help="sizes: full (the records'), accelerator (every family and its peer within --budget), "
                         "quick (smoke), tiny (the test suite's check of this script)")
    ap.add_argument("--quick", action="store_true", help="the same as --suite quick")
    ap.add_argument("--only", default=None,
                    help="comma-separated families (forest, pcfg, safebayes, bcart, bet, bart, treefn) or workloads "
                         "(bf, ebf, bart_rows)")
    ap.add_argument("--out", default=None, help="JSON-lines file (default benchmarks/results/devices[_SUITE].jsonl); "
                                                "the Markdown table is written beside it (.md)")
    ap.add_argument("--repeats", type=int, default=None, help="timed calls per side after the first "
                                                              "(default 2 for full, else 1)")
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds for the whole run (default 450 for the accelerator suite, else none): a workload "
                         "gets what is left as its timeout, and none starts with under 20 s left")
    ap.add_argument("--data-dir", default=None, help="folder of the public data files (default: $BAYESTREES_DATA, "
                                                     "else ../shared/data relative to the repository root; "
                                                     "California housing is read from the package where absent)")
    ap.add_argument("--bartz-python", default=None,
                    help="interpreter with bartz for bcart, bart and treefn (default .venv-bartz/bin/python if "
                         "present, else this one)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per workload before it is stopped")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.suite is None:
        a.suite = "quick" if a.quick else "full"
    a.quick = a.suite in ("quick", "tiny")
    if a.repeats is None:
        a.repeats = REPEATS[a.suite]
    if a.budget is None and a.suite == "accelerator":
        a.budget = 450.0
    if a.data_dir is None:
        sys.path.insert(0, str(HERE))
        from forest_common import data_dir
        a.data_dir = str(data_dir())
    if a.child:
        return child(a.child, a)

    order = ACCELERATOR_ORDER if a.suite == "accelerator" else tuple(WORKLOADS)
    wanted = [w for w in order if a.only is None or {WORKLOADS[w][0], w} & set(a.only.split(","))]
    if not wanted:
        ap.error(f"--only {a.only!r} names none of {sorted(set(f for f, _ in WORKLOADS.values()) | set(WORKLOADS))}")
    default_name = "devices.jsonl" if a.suite == "full" else f"devices_{a.suite}.jsonl"
    out = Path(a.out) if a.out else RESULTS / default_name
    out.parent.mkdir(parents=True, exist_ok=True)
    bartz_py = a.bartz_python or (str(BARTZ_PYTHON) if BARTZ_PYTHON.exists() else sys.executable)
    env = {**os.environ, "BAYESTREES_COMPILATION_CACHE": "0"}
    records = []
    start = time.perf_counter()
    for w in wanted:
        py = bartz_py if WORKLOADS[w][1] else sys.executable
        cmd = [py, str(Path(__file__).resolve()), "--child", w, "--repeats", str(a.repeats),
               "--data-dir", a.data_dir, "--suite", a.suite]
        before = [round(v, 2) for v in os.getloadavg()]
        started = time.strftime("%Y-%m-%d %H:%M:%S")
        left = None if a.budget is None else a.budget - (time.perf_counter() - start)
        timeout = a.timeout if left is None else min(a.timeout, left)
        t0 = time.perf_counter()
        if left is not None and left < 20:
            rec = {"workload": w, "family": WORKLOADS[w][0], "error": f"not run: {a.budget:.0f} s budget spent"}
        else:
            try:
                p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
                lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
                if lines:
                    rec = json.loads(lines[-1][len("RESULT "):])
                else:
                    rec = {"workload": w, "family": WORKLOADS[w][0],
                           "error": (p.stderr.strip().splitlines() or ["?"])[-1]}
            except subprocess.TimeoutExpired:
                rec = {"workload": w, "family": WORKLOADS[w][0], "error": f"stopped after {timeout:.0f} s"}
        rec.update(load_before=before, load_after=[round(v, 2) for v in os.getloadavg()], started=started,
                   wall_s=time.perf_counter() - t0, suite=a.suite, quick=a.quick, repeats=a.repeats,
                   budget_s=a.budget,
                   command=" ".join(["benchmarks/devices.py"] + (argv if argv is not None else sys.argv[1:])),
                   python_machine=platform.machine())
        records.append(rec)
        with open(out, "a") as fh:
            fh.write(json.dumps(rec, default=float) + "\n")
        print(f"{w}: {rec.get('ours', {}).get('s', rec.get('error'))} (peer {rec.get('peer', {}).get('s')}) "
              f"in {rec['wall_s']:.0f} s", flush=True)
    out.with_suffix(".md").write_text(f"{' '.join(['benchmarks/devices.py'] + (argv if argv is not None else sys.argv[1:]))}"
                                      f" ({time.perf_counter() - start:.0f} s)\n\n" + table(records) + "\n")
    print()
    print(table(records))
    try:
        shown = out.resolve().relative_to(REPO)
    except ValueError:
        shown = out
    print(f"\nappended {len(records)} lines to {shown}")


if __name__ == "__main__":
    main()
