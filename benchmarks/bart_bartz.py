"""BART against bartz (JAX) in the same process: seconds per full step, and accuracy on Friedman's function.

Two parts, every number of one run taken in one process on the same data:

1. **Speed.** Seconds per full step (every one of ``m = 200`` trees moved once, then the noise
   variance drawn), ``p = 100`` features, one chain, at ``n = 1,024`` rows (and ``n = 32,768``
   with ``--large``; any list with ``--n``). The data are Friedman's function of the first five
   features plus 95 noise features, ``sigma = 1``. Each library's single-step function is compiled
   ahead of time (``jit(...).lower(...).compile()``; the time is reported separately, as
   "compile s"), run ``--warmup`` steps, then timed over ``--steps`` steps, ``--repeats`` times,
   the two libraries taking turns; the median of the repeats is reported, and the ratio
   ours / bartz (``--speed-chains C``: C chains on both sides, each library's step under ``jax.vmap``). Both step functions are called from Python once per step with the chain state
   donated (bartz's ``mcmcstep.step`` donates it; ours is jitted with ``donate_argnums``) and
   synchronised at the end of each timed block only.

   * ours: the kernel of :mod:`bayestrees.inference.bart.kernel` and the data exactly as
     ``bt.BARTRegressor(...).fit`` builds them (``fit_bart``'s call of ``run_chains`` is
     intercepted to take its kernel and arguments);
   * bartz: ``bartz.mcmcstep.step`` on the initial state that ``bartz.BART.mc_gbart(..., mc_cores=1)`` builds
     with the settings below (``bartz._interface._run_mcmc`` is intercepted to take it).

2. **Accuracy.** Friedman (1991), ``n = 100``, ``p = 10``, ``sigma = 1``, ``--datasets`` data sets
   (default 20, seeds ``--seed + r``), RMSE of the posterior mean against the true ``f`` at 1,000
   new rows: this library's BART, bartz's BART (``mc_gbart``), and this library's Bayesian forest
   (100 trees, ``min_samples_leaf = 5``) as a reference (the issue's table: BART 1.81, BF 2.67).
   Both BARTs run ``--chains`` chains of ``--tune`` discarded + ``--draws`` kept steps.

Priors: the same on both sides as far as bartz allows.

* Same: ``m = 200``; node split probability ``0.95 (1 + d)^-2``, leaves at depth 5 at most
  (bartz ``maxdepth = 6`` counts levels from 1); leaf values ``N(0, sigma_mu^2)`` with
  ``sigma_mu = (max y - min y) / (2 k sqrt(m))``, ``k = 2``, around the mid-range of ``y`` (bartz's
  default centre is the mean of ``y``: ``offset`` is set to the mid-range here); ``sigma^2 ~ nu
  lambda / chi2_nu``, ``nu = 3``, ``P(sigma < sigma_hat) = 0.9``, with the same ``sigma_hat`` given
  to both (the residual sd of the least-squares linear fit on the raw features, computed here);
  99 cutpoints per feature at the quantiles of the training values (ours ``max_bins = 100``; bartz
  ``usequants=True, numcut=99``); at least 5 training rows in every leaf (bartz's ``mc_gbart``
  default, the R package BART's rule).
* Different (bartz has no option for them):

  - the split rule prior: ours is uniform over the variables that have a valid split among the
    node's rows, then uniform over that variable's valid thresholds among those rows; bartz's
    is uniform over the variables, then over the cutpoints inside the range its ancestors leave
    (``docs/lab-notes/bart.md``, "sigma on Friedman's function", for what this does to ``sigma``);
  - the moves: grow and prune only on both sides (ours by default since 894de73; before, grow 0.25,
    prune 0.25, change 0.4, swap 0.1, BayesTree's), but bartz proposes to grow only leaves of 10
    rows or more;
  - the initial state (ours every tree a root leaf and ``sigma = sigma_hat``; bartz root leaves
    and ``sigma^2`` at the prior's harmonic mean): no effect after tuning.

bartz is not a dependency of this library. Install it for this script only, in a separate
virtual environment, with the same JAX as the project's (the two must share one process), e.g.::

    python3 -m venv .venv-bartz
    .venv-bartz/bin/pip install -q "bartz==0.13.0" "jax==$(.venv/bin/python -c 'import jax; print(jax.__version__)')" -e .

or, as for the figures in ``docs/lab-notes/bart.md``, an environment without pip that reads the project's
``.venv`` for everything but bartz and its three small dependencies::

    python3 -m venv --without-pip .venv-bartz
    echo 'import site; site.addsitedir("'$PWD'/.venv/lib/python3.11/site-packages")' > .venv-bartz/lib/python3.11/site-packages/project_venv.pth
    .venv/bin/python -m pip --python .venv-bartz/bin/python install "bartz==0.13.0"

then::

    .venv-bartz/bin/python benchmarks/bart_bartz.py                    # n = 1,024 and 20 data sets
    .venv-bartz/bin/python benchmarks/bart_bartz.py --large            # and n = 32,768
    .venv-bartz/bin/python benchmarks/bart_bartz.py --datasets 3 --steps 20   # a short check

A table is printed and JSON lines are appended to ``benchmarks/results/bart_bartz.jsonl`` (one
line per timed size, per data set and a summary line for the accuracy part; each with the load
average before and after, the machine and the versions).
"""
from __future__ import annotations

# bartz first: on import it may adjust XLA_FLAGS for the GPU, which XLA reads once per process
import bartz  # noqa: I001
import bartz._interface as bartz_interface
import bartz.mcmcstep as bartz_mcmcstep
from bartz.BART import mc_gbart

import argparse
import json
import os
import statistics
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np

import bayestrees as bt
from bayestrees.convergence import ConvergenceWarning
from bayestrees.inference.bart import fit as bart_fit
from forest_common import RESULTS, machine

M_TREES = 200
MAX_BINS = 100   # ours: bins per feature (99 cutpoints); bartz: numcut = MAX_BINS - 1 with usequants=True


def friedman(rng, n, p):
    X = rng.random((n, p))
    f = 10 * np.sin(np.pi * X[:, 0] * X[:, 1]) + 20 * (X[:, 2] - 0.5) ** 2 + 10 * X[:, 3] + 5 * X[:, 4]
    return X, f


def ols_sigma_hat(X, y) -> float:
    """The residual sd of the least-squares linear fit with an intercept, ``sqrt(RSS / (n - p - 1))``."""
    A = np.column_stack([np.ones(len(y)), X])
    beta, *_ = np.linalg.lstsq(A, y, rcond=None)
    return float(np.sqrt(np.sum((y - A @ beta) ** 2) / (len(y) - A.shape[1])))


def rmse(a, b) -> float:
    return float(np.sqrt(np.mean((np.asarray(a, float) - np.asarray(b, float)) ** 2)))


def load() -> list:
    return [round(v, 2) for v in os.getloadavg()]


# -- the two samplers ---------------------------------------------------------------------------
class _Captured(Exception):
    def __init__(self, payload):
        super().__init__("captured")
        self.payload = payload


def ours_kernel(X, y, sigma_hat, seed=0, chains=1):
    """``(kernel, data args)`` exactly as ``bt.BARTRegressor(m=200).fit(X, y)`` would run them (with
    ``chains > 1``: as it runs that many vectorised chains, ``chain_method="vectorized"``)."""
    original = bart_fit.run_chains

    def capture(key, kernel, *, args, **kw):
        raise _Captured((kernel, args))

    bart_fit.run_chains = capture
    try:
        bt.BARTRegressor(m=M_TREES, max_bins=MAX_BINS, sigma_hat=sigma_hat, chains=chains, draws=1, tune=0,
                         chain_method="vectorized" if chains > 1 else "auto", random_state=seed).fit(X, y)
    except _Captured as c:
        return c.payload
    finally:
        bart_fit.run_chains = original
    raise RuntimeError("fit_bart did not call run_chains")


def bartz_kw(X, y, sigma_hat) -> dict:
    """``mc_gbart``'s settings that make its prior ours as far as it allows (the module docstring)."""
    return dict(ntree=M_TREES, k=2.0, power=2.0, base=0.95, sigdf=3.0, sigquant=0.9, sigest=sigma_hat,
                offset=0.5 * (float(np.min(y)) + float(np.max(y))), usequants=True, numcut=MAX_BINS - 1,
                printevery=None)


def bartz_initial_state(X, y, sigma_hat, seed=0):
    """The initial one-chain state that ``mc_gbart(..., mc_cores=1)`` builds (``_run_mcmc`` intercepted)."""
    original = bartz_interface._run_mcmc

    def capture(state, *a, **kw):
        raise _Captured(state)

    bartz_interface._run_mcmc = capture
    try:
        mc_gbart(X, y, mc_cores=1, ndpost=1, nskip=0, seed=seed, **bartz_kw(X, y, sigma_hat))
    except _Captured as c:
        return c.payload
    finally:
        bartz_interface._run_mcmc = original
    raise RuntimeError("mc_gbart did not call _run_mcmc")


# -- part 1: speed ------------------------------------------------------------------------------
def speed(n, p, args) -> dict:
    rng = np.random.default_rng(args.seed)
    X, f = friedman(rng, n, p)
    y = f + rng.normal(size=n)
    sh = ols_sigma_hat(X, y)
    keys = list(jax.random.split(jax.random.key(args.seed), args.warmup + args.steps * args.repeats + 1))

    C = args.speed_chains
    kernel, kargs = ours_kernel(X, y, sh, args.seed, C)
    if C == 1:
        state0 = jax.jit(kernel.init)(jax.random.key(args.seed), *kargs)
        ours_fn, bz_fn, chain_keys = kernel.step, bartz_mcmcstep.step, (lambda k: k)
    else:  # C chains on each side, vmapped (run_chains's "vectorized" chains; mc_gbart's mc_cores)
        state0 = jax.jit(jax.vmap(kernel.init, in_axes=(0,) + (None,) * len(kargs)))(
            jax.random.split(jax.random.key(args.seed), C), *kargs)
        ours_fn = jax.vmap(kernel.step, in_axes=(0, 0) + (None,) * len(kargs))
        bz_fn = jax.vmap(bartz_mcmcstep.step)
        chain_keys = lambda k: jax.random.split(k, C)  # noqa: E731
    keys = [chain_keys(k) for k in keys]
    t0 = time.perf_counter()
    ours_c = jax.jit(ours_fn, donate_argnums=(1,)).lower(keys[0], state0, *kargs).compile()
    ours_compile = time.perf_counter() - t0

    def ours_step(k, s):
        return ours_c(k, s, *kargs)[0]

    bz_state = bartz_initial_state(X, y, sh, args.seed)
    if C > 1:
        bz_state = jax.tree_util.tree_map(lambda a: jnp.stack([a] * C), bz_state)
    t0 = time.perf_counter()
    bz_c = jax.jit(bz_fn, donate_argnums=(1,)).lower(keys[0], bz_state).compile()
    bz_compile = time.perf_counter() - t0

    def run(step, state, ks):
        for k in ks:
            state = step(k, state)
        return jax.block_until_ready(state)

    ours_state = run(ours_step, state0, keys[:args.warmup])
    bz_state = run(bz_c, bz_state, keys[:args.warmup])
    t_ours, t_bz = [], []
    for r in range(args.repeats):
        ks = keys[args.warmup + r * args.steps: args.warmup + (r + 1) * args.steps]
        t0 = time.perf_counter()
        ours_state = run(ours_step, ours_state, ks)
        t_ours.append((time.perf_counter() - t0) / args.steps)
        t0 = time.perf_counter()
        bz_state = run(bz_c, bz_state, ks)
        t_bz.append((time.perf_counter() - t0) / args.steps)
    ours_s, bz_s = statistics.median(t_ours), statistics.median(t_bz)
    return {"part": "speed", "n": n, "p": p, "m": M_TREES, "chains": C, "steps": args.steps, "repeats": args.repeats,
            "warmup": args.warmup, "ours_s_per_step": ours_s, "bartz_s_per_step": bz_s, "ratio": ours_s / bz_s,
            "ours_s_per_step_repeats": t_ours, "bartz_s_per_step_repeats": t_bz,
            "ours_compile_s": ours_compile, "bartz_compile_s": bz_compile}


# -- part 2: accuracy ---------------------------------------------------------------------------
def accuracy_one(r, args) -> dict:
    rng = np.random.default_rng(args.seed + r)
    X, f = friedman(rng, 100, 10)
    y = f + rng.normal(size=100)
    Xt, ft = friedman(rng, 1000, 10)
    sh = ols_sigma_hat(X, y)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # its R-hat is recorded below
        ours = bt.BARTRegressor(m=M_TREES, max_bins=MAX_BINS, sigma_hat=sh, chains=args.chains, tune=args.tune,
                                draws=args.draws, random_state=r).fit(X, y)
    pred_ours = ours.predict(Xt)
    t_ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    bz = mc_gbart(X, y, x_test=Xt, mc_cores=args.chains, ndpost=args.chains * args.draws, nskip=args.tune,
               keepevery=1, seed=r, **bartz_kw(X, y, sh))
    pred_bz = np.asarray(bz.yhat_test_mean)
    t_bz = time.perf_counter() - t0
    t0 = time.perf_counter()
    bf = bt.BayesianForestRegressor(draws=100, min_samples_leaf=5, random_state=r).fit(X, y)
    pred_bf = bf.predict(Xt)
    t_bf = time.perf_counter() - t0
    return {"part": "accuracy", "dataset": r, "seed": args.seed + r, "chains": args.chains, "tune": args.tune,
            "draws": args.draws, "rmse_bart": rmse(pred_ours, ft), "rmse_bartz": rmse(pred_bz, ft),
            "rmse_bf": rmse(pred_bf, ft), "sigma_bart": float(ours.idata_.posterior["sigma"].mean()),
            "sigma_bartz": float(np.mean(np.asarray(bz.sigma_))), "sigma_hat": sh,
            "rhat_sigma_bart": float(ours.convergence_.table["sigma"]["rhat"]),
            "ess_sigma_bart": float(ours.convergence_.table["sigma"]["ess_bulk"]),
            "fit_s_bart": t_ours, "fit_s_bartz": t_bz, "fit_s_bf": t_bf}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=None, help="rows of the speed part (default 1024; "
                    "1024 32768 with --large)")
    ap.add_argument("--large", action="store_true", help="time n = 32,768 too")
    ap.add_argument("--p", type=int, default=100, help="features of the speed part (default 100)")
    ap.add_argument("--steps", type=int, default=50, help="timed steps per repeat (default 50)")
    ap.add_argument("--repeats", type=int, default=3, help="timed blocks per library, alternating (default 3)")
    ap.add_argument("--warmup", type=int, default=100, help="untimed steps after compilation, from root-only "
                    "trees to trees of their posterior size (default 100)")
    ap.add_argument("--datasets", type=int, default=20, help="Friedman data sets of the accuracy part (default 20; "
                    "0 skips it)")
    ap.add_argument("--chains", type=int, default=2, help="chains of each BART in the accuracy part (default 2)")
    ap.add_argument("--tune", type=int, default=1000, help="discarded steps per chain (default 1000)")
    ap.add_argument("--draws", type=int, default=1000, help="kept steps per chain (default 1000)")
    ap.add_argument("--no-speed", action="store_true", help="skip the speed part")
    ap.add_argument("--speed-chains", type=int, default=1, help="chains of the speed part, vmapped on both sides "
                    "(default 1)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(RESULTS / "bart_bartz.jsonl"))
    args = ap.parse_args()
    sizes = args.n or ([1024, 32768] if args.large else [1024])
    common = {"bartz_version": bartz.__version__, "jax_version": jax.__version__, "backend": jax.default_backend(),
              **machine(), "time": time.strftime("%Y-%m-%d %H:%M:%S")}
    records = []
    if not args.no_speed:
        print(f"speed: seconds per full step (m = {M_TREES} trees, p = {args.p}, {args.speed_chains} chain(s)), median of "
              f"{args.repeats} x {args.steps} steps after {args.warmup} warm-up steps")
        print(f"{'n':>8} {'ours ms':>9} {'bartz ms':>9} {'ours/bartz':>10} {'compile s ours':>15} "
              f"{'compile s bartz':>16} {'load before':>18} {'load after':>18}")
        for n in sizes:
            before = load()
            rec = speed(n, args.p, args)
            rec.update(load_before=before, load_after=load(), **common)
            records.append(rec)
            print(f"{n:>8} {rec['ours_s_per_step'] * 1e3:>9.2f} {rec['bartz_s_per_step'] * 1e3:>9.2f} "
                  f"{rec['ratio']:>10.2f} {rec['ours_compile_s']:>15.1f} {rec['bartz_compile_s']:>16.1f} "
                  f"{str(before):>18} {str(rec['load_after']):>18}", flush=True)
    if args.datasets > 0:
        print(f"\naccuracy: Friedman n = 100, p = 10, sigma = 1; RMSE against f at 1,000 test rows; "
              f"{args.chains} chains x ({args.tune} + {args.draws}) steps per BART")
        print(f"{'data set':>8} {'BART':>7} {'bartz':>7} {'BF':>7} {'sigma':>7} {'sigma bz':>8} {'R-hat':>6} "
              f"{'fit s':>6} {'bz s':>6}")
        before, rows = load(), []
        for r in range(args.datasets):
            rec = accuracy_one(r, args)
            rec.update(**common)
            rows.append(rec)
            records.append(rec)
            print(f"{r:>8} {rec['rmse_bart']:>7.3f} {rec['rmse_bartz']:>7.3f} {rec['rmse_bf']:>7.3f} "
                  f"{rec['sigma_bart']:>7.3f} {rec['sigma_bartz']:>8.3f} {rec['rhat_sigma_bart']:>6.3f} "
                  f"{rec['fit_s_bart']:>6.1f} {rec['fit_s_bartz']:>6.1f}", flush=True)
        summ = {"part": "accuracy_summary", "datasets": len(rows), "chains": args.chains, "tune": args.tune,
                "draws": args.draws, "load_before": before, "load_after": load(), **common}
        for k in ("rmse_bart", "rmse_bartz", "rmse_bf", "sigma_bart", "sigma_bartz"):
            v = np.array([row[k] for row in rows])
            summ[k + "_mean"] = float(v.mean())
            summ[k + "_se"] = float(v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else float("nan")
        d = np.array([row["rmse_bart"] / row["rmse_bartz"] for row in rows])
        summ["rmse_ratio_bart_over_bartz_mean"] = float(d.mean())
        records.append(summ)
        se = lambda k: summ[k + "_se"]  # noqa: E731
        print(f"\nmean RMSE (se) over {len(rows)} data sets: BART {summ['rmse_bart_mean']:.3f} ({se('rmse_bart'):.3f}), "
              f"bartz {summ['rmse_bartz_mean']:.3f} ({se('rmse_bartz'):.3f}), BF {summ['rmse_bf_mean']:.3f} "
              f"({se('rmse_bf'):.3f}); BART / bartz per data set {summ['rmse_ratio_bart_over_bartz_mean']:.3f}; "
              f"sigma BART {summ['sigma_bart_mean']:.3f}, bartz {summ['sigma_bartz_mean']:.3f}; load "
              f"{summ['load_before']} -> {summ['load_after']}")
    with open(args.out, "a") as fh:
        for rec in records:
            fh.write(json.dumps(rec) + "\n")
    print(f"\nappended {len(records)} lines to {args.out}")


if __name__ == "__main__":
    main()
