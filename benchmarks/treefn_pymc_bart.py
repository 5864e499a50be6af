"""Issue 30's figure: a Poisson BART model (m = 50) as a bayestrees tree function against pymc-bart.

The model, on both sides::

    log_rate = c + sum of m = 50 trees over X,   c = log(mean(y)) a fixed offset
    y ~ Poisson(exp(log_rate))

(``--offset none``: ``c = 0``.  The offset centres the trees' prior on the data's overall rate,
as the BART family centres a Normal response; without it bayestrees' tree moves accept nothing
from the all-stump start once n is about 600 or more, see docs/lab-notes/models.md, while pymc-bart starts
its trees at ``mean(Y)``.)

* bayestrees: ``bt.bart_function("f", X, m=50)`` (default prior: depth prior ``0.95 (1 + d)^-2``,
  split rule uniform over the cut points, leaf values ``N(0, leaf_sd^2)`` with ``leaf_sd = 3 / (k
  sqrt(m))``, ``k = 2``, i.e. prior sd 1.5 of the log rate), sampled by ``bt.sample_model`` (one
  reversible-jump move per tree per step with a Laplace proposal for the leaf values, all 50 trees
  every step; the 4 chains vectorised in one process).  ``--leaf-prior loggamma``: the leaf values
  the logs of Gamma variables of the same mean (0) and sd (log-linear BART, Murray 2021), which a
  Poisson likelihood makes conjugate: one grow or prune per tree per step with the leaf values
  integrated out, then drawn from their Gamma conditional.
* pymc-bart: ``pmb.BART("mu", X, Y=log(y + 1) - c, m=50)``, ``log_rate = c + mu``, with its defaults (``alpha=0.95, beta=2``:
  the same depth prior; split values drawn among the observed values of the feature; the leaf
  values are proposed around ``mean(current sum) / m`` with an sd that starts at ``std(Y) /
  sqrt(m)`` and is adapted during tuning to the running sd of the trees' outputs, so there is no
  fixed Normal leaf prior to match; ``Y`` is only used for that start and for the starting value
  ``mean(Y)``), sampled by ``pm.sample`` with its defaults (PGBART: 10 particles, 10% of the trees,
  i.e. 5 of 50, per step; ``cores`` = pymc's default ``min(4, CPUs)``).

Both sides run 4 chains of 1,000 tuning + 1,000 kept draws (pymc's default ``tune`` is 1,000 too).
The two libraries live in different virtual environments, so one driver run writes the data once
(``.npz`` in a temporary folder) and runs each side in its own subprocess, the sides interleaved
(for each ``n``: bayestrees, then pymc-bart).

Timings (``time.perf_counter``):

* bayestrees: the sampling call is run twice at full size in one process (different seeds; JAX
  compiles for each ``(tune, draws)``): ``compile_s`` = the first ``MCMC.run`` minus the second,
  ``sampling_s`` = the second ``MCMC.run`` (``ModelFit.seconds``; the worker makes ``MCMC.run``
  wait for the draws, which it otherwise returns before they are computed), ``call_s`` = the
  second ``bt.sample_model`` call (set-up traces, sampling, InferenceData, convergence table).
* pymc-bart: a warm-up ``pm.sample`` (1 chain, 5 + 5 draws) in the same process compiles the
  PyTensor graph and the numba functions (the chains' processes are forked from it); ``compile_s``
  = its wall time (a bound: it includes those 10 steps), ``sampling_s`` = pymc's
  ``sampling_time`` of the timed ``pm.sample``, ``call_s`` = the model's construction and the
  timed ``pm.sample`` call.

``total_s = compile_s + call_s``.  ``call_cpu_s``: the CPU seconds (user + system) of the timed
call, pymc's chain processes included; on a shared machine with other work at a higher priority
it is steadier than wall time.  The log rate at 10 fixed test points (and 1,000 more for the
RMSE) is the tree sum at new rows: ``ModelFit.function`` for bayestrees; for pymc-bart the kept
trees (``mu.owner.op.all_trees``) evaluated with pymc-bart's ``Tree.predict`` draw by draw, each
draw assigned to its chain and position by matching its sum at 20 training rows against
``idata.posterior["mu"]`` (pymc-bart's own ``sample_posterior_predictive`` for new ``X`` draws the
tree sets at random, which loses the chain order that ESS needs).  Bulk ESS and R-hat by ArviZ
(the same version in both environments); RMSE of the posterior-mean rate ``E[exp(log_rate)]``
against the true rate.

Usage (from the repository root, in the library's environment; pymc and pymc-bart installed in
``.venv-pymc``, see docs/lab-notes/models.md)::

    nice -n 10 python benchmarks/treefn_pymc_bart.py --n 1000
    nice -n 10 python benchmarks/treefn_pymc_bart.py --n 10000 --pymc-draws 250 --pymc-chains 2

Writes one JSON line per side and ``n`` and one comparison line to
``benchmarks/results/treefn_pymc_bart.jsonl`` (``--out``).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
N_FEATURES = 5
M_TREES = 50
MATCH_ROWS = 20


def true_log_rate(X):
    """Friedman's function of the first 5 features (range [0, 30]) scaled to log rates in [-1, 2]."""
    f = (10 * np.sin(np.pi * X[:, 0] * X[:, 1]) + 20 * (X[:, 2] - 0.5) ** 2 + 10 * X[:, 3] + 5 * X[:, 4])
    return -1.0 + f / 10.0


def make_data(n: int, seed: int, path: Path) -> None:
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, N_FEATURES))
    y = rng.poisson(np.exp(true_log_rate(X))).astype(np.float64)
    trng = np.random.default_rng(20240530)          # the test rows are the same for every n
    X10 = trng.uniform(size=(10, N_FEATURES))
    X1000 = trng.uniform(size=(1000, N_FEATURES))
    np.savez(path, X=X, y=y, X10=X10, X1000=X1000)


def offset_of(y, offset: str) -> float:
    """The model's fixed offset of the log rate: ``log(mean(y))`` (``"logmean"``) or 0 (``"none"``)."""
    return float(np.log(np.mean(y))) if offset == "logmean" else 0.0


def model_of(offset: str) -> str:
    return ("log_rate = log(mean(y)) + sum of 50 trees" if offset == "logmean" else "log_rate = sum of 50 trees")


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and of its children that have been waited for
    (pymc's chain processes; XLA's threads are this process's)."""
    import resource
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def load_average() -> list:
    return [round(x, 2) for x in os.getloadavg()]


def summarise(f10, f1000, X10, X1000) -> dict:
    """ESS, R-hat and RMSE of draws ``(chain, draw, rows)`` of the log rate at the test rows."""
    import arviz as az
    ds = az.convert_to_dataset({"f": np.asarray(f10, np.float64)})
    ess = np.asarray(az.ess(ds, method="bulk")["f"].values, float)
    ess_tail = np.asarray(az.ess(ds, method="tail")["f"].values, float)
    rhat = np.asarray(az.rhat(ds)["f"].values, float)
    # a chain that never moves has no effective samples (ArviZ reports the number of draws there)
    frozen = np.asarray(f10).reshape(-1, np.shape(f10)[-1]).std(axis=0) == 0
    ess[frozen], ess_tail[frozen] = 0.0, 0.0
    out = {"frozen_points": int(frozen.sum()),"ess_bulk": [round(float(e), 1) for e in ess], "ess_bulk_min": float(ess.min()),
           "ess_bulk_median": float(np.median(ess)), "ess_tail_min": float(ess_tail.min()),
           "rhat": [round(float(r), 4) for r in rhat], "rhat_max": float(rhat.max())}
    for name, f, Xt in (("10", f10, X10), ("1000", f1000, X1000)):
        f = np.asarray(f, np.float64)
        lr = true_log_rate(Xt)
        rate_hat = np.exp(f).mean(axis=(0, 1))
        out[f"rmse_rate_{name}"] = float(np.sqrt(np.mean((rate_hat - np.exp(lr)) ** 2)))
        out[f"rmse_log_rate_{name}"] = float(np.sqrt(np.mean((f.mean(axis=(0, 1)) - lr) ** 2)))
    return out


# --------------------------------------------------------------------------------------- workers

def worker_bayestrees(a) -> dict:
    import warnings
    import jax
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    import arviz
    import bayestrees as bt
    from numpyro.infer import MCMC

    # ModelFit.seconds times NumPyro's MCMC.run, which returns once XLA has been handed the work
    # (asynchronous dispatch), before the chains have run: block on the draws there, so that the
    # seconds are the chains' wall time
    run = MCMC.run

    def run_blocking(self, *args, **kwargs):
        run(self, *args, **kwargs)
        jax.block_until_ready(self._states)

    MCMC.run = run_blocking

    d = np.load(a.data)
    X, y = d["X"], d["y"]

    c = offset_of(y, a.offset)

    def model(X, y=None):
        f = bt.bart_function("f", X, m=M_TREES, leaf_prior=a.leaf_prior)
        numpyro.sample("y", dist.Poisson(jnp.exp(c + f)), obs=y)

    kw = dict(draws=a.draws, tune=a.tune, chains=a.chains, chain_method="vectorized", log_likelihood=False)
    if a.leaf_refresh:
        kw["leaf_refresh"] = a.leaf_refresh
    if a.slide is not None:
        kw["slide"] = a.slide
    if a.local_moves is not None:
        kw["local_moves"] = a.local_moves
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        first = bt.sample_model(model, X, y=y, random_seed=a.seed + 1, **kw)
        first_call = time.perf_counter() - t0
        load = load_average()
        cpu0, t0 = cpu_seconds(), time.perf_counter()
        fit = bt.sample_model(model, X, y=y, random_seed=a.seed, **kw)
        call = time.perf_counter() - t0
        cpu = cpu_seconds() - cpu0
    compile_s = max(first.seconds - fit.seconds, 0.0)
    f10 = c + fit.function("f", d["X10"])
    f1000 = c + fit.function("f", d["X1000"])
    acc = fit.idata.sample_stats["f_accepted"].values if "f_accepted" in fit.idata.sample_stats else None
    res = {"side": "bayestrees", "imported_from_worktree": Path(bt.__file__).resolve().parent == ROOT / "bayestrees",
           "versions": {"bayestrees": bt.__version__, "jax": jax.__version__,
                                              "numpyro": numpyro.__version__, "arviz": arviz.__version__},
           "leaf_refresh": a.leaf_refresh, "leaf_prior": a.leaf_prior, "slide": a.slide,
           "local_moves": a.local_moves,
           "sampler": ("bt.sample_model: one RJ move per tree per step (all 50 trees), Laplace leaf proposal; "
                       if a.leaf_prior == "normal" else
                       "bt.sample_model: one grow/prune per tree per step (all 50 trees), log-gamma leaves "
                       "integrated out (conjugate path); ") + ("" if not a.slide else f"moves grow/prune/slide, "
                                                              f"slides of 1-{a.slide} codes; ") + "chain_method=vectorized",
           "chains": a.chains, "tune": a.tune, "draws": a.draws, "compile_s": compile_s,
           "sampling_s": fit.seconds, "call_s": call, "first_call_s": first_call, "total_s": compile_s + call,
           "load_during": load, "call_cpu_s": cpu,
           "timing": "MCMC.run blocked until the draws are computed"}
    if acc is not None:
        res["accepted_per_step_mean"] = float(np.mean(acc))
    res.update(summarise(f10, f1000, d["X10"], d["X1000"]))
    return res


def _pymc_model(pm, pmb, X, y, c):
    with pm.Model() as model:
        mu = pmb.BART("mu", X, np.log1p(y) - c, m=M_TREES)
        pm.Poisson("y", mu=pm.math.exp(c + mu), observed=y)
    return model, mu


def _tree_sum(entry, Xall):
    out = np.zeros(Xall.shape[0])
    for odim in entry:
        for tree in odim:
            out += np.asarray(tree.predict(x=Xall)).reshape(-1)
    return out


def worker_pymc(a) -> dict:
    import logging
    import warnings
    import arviz
    import numba
    import pymc as pm
    import pymc_bart as pmb
    import pytensor

    logging.getLogger("pymc").setLevel(logging.ERROR)
    d = np.load(a.data)
    X, y = d["X"], d["y"]
    warnings.simplefilter("ignore")
    t0 = time.perf_counter()
    c = offset_of(y, a.offset)
    model, _ = _pymc_model(pm, pmb, X, y, c)
    with model:
        pm.sample(draws=5, tune=5, chains=1, cores=1, random_seed=a.seed + 1, progressbar=False,
                  compute_convergence_checks=False)
    compile_s = time.perf_counter() - t0
    load = load_average()
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    model, mu = _pymc_model(pm, pmb, X, y, c)
    with model:
        idata = pm.sample(draws=a.draws, tune=a.tune, chains=a.chains, random_seed=a.seed, progressbar=False,
                          compute_convergence_checks=False)
    call = time.perf_counter() - t0
    cpu = cpu_seconds() - cpu0
    sampling = float(idata.posterior.attrs.get("sampling_time", call))
    cores = min(4, os.cpu_count() or 1)   # pm.sample's default cores

    # the kept trees, in the order the chains' processes appended them: assign each to its chain and
    # draw by its sum at MATCH_ROWS training rows against the trace of mu (exact up to rounding)
    t1 = time.perf_counter()
    entries = list(mu.owner.op.all_trees)
    trace = idata.posterior["mu"].values[:, :, :MATCH_ROWS]          # (chain, draw, k)
    C, D = trace.shape[:2]
    if len(entries) != C * D:
        raise RuntimeError(f"pymc-bart kept {len(entries)} tree sets for {C} x {D} draws")
    flat = trace.reshape(C * D, -1)
    Xall = np.vstack([X[:MATCH_ROWS], d["X10"], d["X1000"]])
    f_all = np.full((C * D, Xall.shape[0] - MATCH_ROWS), np.nan)
    taken = np.zeros(C * D, bool)
    worst = 0.0
    for e in entries:
        v = _tree_sum(e, Xall)
        err = np.max(np.abs(flat - v[:MATCH_ROWS]), axis=1)
        err[taken] = np.inf
        i = int(np.argmin(err))
        worst = max(worst, float(err[i]))
        taken[i] = True
        f_all[i] = v[MATCH_ROWS:]
    if worst > 1e-6 or not taken.all():
        raise RuntimeError(f"could not match pymc-bart's kept trees to the trace (worst {worst})")
    f_all = c + f_all.reshape(C, D, -1)
    res = {"side": "pymc-bart", "versions": {"pymc": pm.__version__, "pymc_bart": pmb.__version__,
                                             "pytensor": pytensor.__version__, "numba": numba.__version__,
                                             "arviz": arviz.__version__},
           "sampler": "pm.sample defaults: PGBART, 10 particles, batch (0.1, 0.1) = 5 of 50 trees per step",
           "cores": cores, "chains": a.chains, "tune": a.tune, "draws": a.draws, "compile_s": compile_s,
           "sampling_s": sampling, "call_s": call, "total_s": compile_s + call, "load_during": load,
           "call_cpu_s": cpu, "match_worst_abs": worst, "tree_eval_s": time.perf_counter() - t1}
    res.update(summarise(f_all[:, :, :10], f_all[:, :, 10:], d["X10"], d["X1000"]))
    return res


# ---------------------------------------------------------------------------------------- driver

def library_snapshot(tmp, which: str) -> tuple[dict, str | None]:
    """The bayestrees the bayestrees side imports: the committed HEAD exported to ``tmp`` (others
    may be editing the working tree while this runs) or the working tree itself."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "bayestrees"], cwd=ROOT, capture_output=True,
                           text=True).stdout.strip()
    if which == "worktree":
        return {"library": "worktree", "commit": head, "worktree_dirty": bool(dirty)}, None
    lib = Path(tmp) / "lib"
    lib.mkdir()
    archive = subprocess.run(["git", "archive", "HEAD", "bayestrees"], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(lib)], input=archive, check=True)
    return {"library": "HEAD", "commit": head}, str(lib)


def run_side(side, python, data, a, draws, tune, chains, tmp, libpath=None) -> dict:
    result = Path(tmp) / f"{side}.json"
    cmd = [python, str(Path(__file__).resolve()), "--worker", side, "--data", str(data), "--result", str(result),
           "--draws", str(draws), "--tune", str(tune), "--chains", str(chains), "--seed", str(a.seed),
           "--offset", a.offset, "--leaf-refresh", str(a.leaf_refresh), "--leaf-prior", a.leaf_prior] + (
               [] if a.slide is None else ["--slide", str(a.slide)]) + (
               [] if a.local_moves is None else ["--local-moves", str(a.local_moves)])
    before = load_average()
    t0 = time.perf_counter()
    env = dict(os.environ)
    if libpath:
        env["PYTHONPATH"] = libpath + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    p = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.stderr.write(p.stdout[-4000:] + p.stderr[-8000:])
        raise SystemExit(f"{side} failed (exit {p.returncode})")
    res = json.loads(result.read_text())
    res.update({"process_wall_s": wall, "load_before": before, "load_after": load_average()})
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[1000])
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--tune", type=int, default=1000)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--pymc-draws", type=int, default=None, help="pymc-bart's kept draws (default --draws)")
    ap.add_argument("--pymc-tune", type=int, default=None, help="pymc-bart's tuning steps (default --tune)")
    ap.add_argument("--pymc-chains", type=int, default=None, help="pymc-bart's chains (default --chains)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--offset", choices=["logmean", "none"], default="logmean",
                    help="the log rate's fixed offset: log(mean(y)) (default) or none")
    ap.add_argument("--pymc-python", default=str(ROOT / ".venv-pymc" / "bin" / "python"))
    ap.add_argument("--library", choices=["head", "worktree"], default="head",
                    help="bayestrees as committed (HEAD, exported to a temporary folder) or the working tree")
    ap.add_argument("--only", choices=["bayestrees", "pymc-bart"], default=None)
    ap.add_argument("--leaf-refresh", type=int, default=0, help="bt.sample_model's leaf_refresh")
    ap.add_argument("--slide", type=int, default=None,
                    help="bt.sample_model's slide (default: its own, 'auto'); log-gamma leaves or a Normal path only")
    ap.add_argument("--local-moves", type=int, default=None, help="bt.sample_model's local_moves (moves of every "
                    "tree a step; default its own)")
    ap.add_argument("--leaf-prior", choices=["normal", "loggamma"], default="normal",
                    help="bt.bart_function's leaf_prior (loggamma: the conjugate path of log-linear BART)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "treefn_pymc_bart.jsonl"))
    ap.add_argument("--worker", choices=["bayestrees", "pymc-bart"], default=None, help=argparse.SUPPRESS)
    ap.add_argument("--data", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--result", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()

    if a.worker:
        res = (worker_bayestrees if a.worker == "bayestrees" else worker_pymc)(a)
        Path(a.result).write_text(json.dumps(res))
        return

    sides = [s for s in ("bayestrees", "pymc-bart") if a.only in (None, s)]
    with tempfile.TemporaryDirectory() as tmp, open(a.out, "a") as out:
        lib_info, libpath = library_snapshot(tmp, a.library)
        for n in a.n:
            data = Path(tmp) / f"poisson_{n}.npz"
            make_data(n, a.seed, data)
            got = {}
            for side in sides:
                if side == "bayestrees":
                    r = run_side(side, sys.executable, data, a, a.draws, a.tune, a.chains, tmp, libpath)
                    r.update(lib_info)
                else:
                    r = run_side(side, a.pymc_python, data, a, a.pymc_draws or a.draws, a.pymc_tune or a.tune,
                                 a.pymc_chains or a.chains, tmp)
                r.update({"benchmark": "treefn_pymc_bart", "model": model_of(a.offset), "n": n, "m": M_TREES, "seed": a.seed,
                          "machine": f"{os.cpu_count()}-core CPU", "time": time.strftime("%Y-%m-%dT%H:%M:%S")})
                got[side] = r
                out.write(json.dumps(r) + "\n")
                out.flush()
                print(f"n={n} {side}: sampling {r['sampling_s']:.1f} s, compile {r['compile_s']:.1f} s, "
                      f"total {r['total_s']:.1f} s, ESS bulk min {r['ess_bulk_min']:.0f} median "
                      f"{r['ess_bulk_median']:.0f}, R-hat max {r['rhat_max']:.3f}, RMSE rate (10) "
                      f"{r['rmse_rate_10']:.3f} (1000) {r['rmse_rate_1000']:.3f}, load {r['load_before']}",
                      flush=True)
            if len(got) == 2:
                b, p = got["bayestrees"], got["pymc-bart"]
                cmp = {"benchmark": "treefn_pymc_bart", "comparison": True, "model": model_of(a.offset), "n": n,
                       "ess_per_s_ratio_min": (b["ess_bulk_min"] / b["sampling_s"]) / (p["ess_bulk_min"] / p["sampling_s"]),
                       "ess_per_s_ratio_median": (b["ess_bulk_median"] / b["sampling_s"])
                       / (p["ess_bulk_median"] / p["sampling_s"]),
                       "ess_per_total_s_ratio_min": (b["ess_bulk_min"] / b["total_s"]) / (p["ess_bulk_min"] / p["total_s"]),
                       "ess_per_cpu_s_ratio_min": (b["ess_bulk_min"] / b["call_cpu_s"]) / (p["ess_bulk_min"] / p["call_cpu_s"]),
                       "ess_per_cpu_s_ratio_median": (b["ess_bulk_median"] / b["call_cpu_s"])
                       / (p["ess_bulk_median"] / p["call_cpu_s"]),
                       "rmse_rate_10_ratio": b["rmse_rate_10"] / p["rmse_rate_10"],
                       "rmse_rate_1000_ratio": b["rmse_rate_1000"] / p["rmse_rate_1000"],
                       "pymc_reduced": {"draws": p["draws"], "tune": p["tune"], "chains": p["chains"]}}
                cmp["goal_met"] = bool(cmp["ess_per_s_ratio_min"] >= 10 and b["rmse_rate_10"] <= p["rmse_rate_10"]
                                       and b["rmse_rate_1000"] <= p["rmse_rate_1000"])
                out.write(json.dumps(cmp) + "\n")
                out.flush()
                print(json.dumps(cmp), flush=True)


if __name__ == "__main__":
    main()
