"""Bayesian CART sampler speed: tree-move steps per second against bartz (one tree), and chain scaling.

Both sides run in this process on the same Friedman data (n rows, p = 10), one tree, the same
depth limit (bayestrees ``max_depth=5`` = bartz ``maxdepth=6``: levels 0..5) and about the same
cut points (``max_bins=100`` against ``numcut=100``).  A bayestrees step is one move (grow,
prune, change or swap); a bartz iteration is one grow/prune move of its single tree plus its
leaf and noise updates.  Each side runs once to compile (reported apart) and then ``--repeats``
times; the median is reported.  The chain-scaling part times ``chains`` in 1, 4, 16, 64 chains
of bayestrees for the same number of steps, vmapped (``chain_method="vectorized"``) and in
threads (``"parallel"``); one chain runs the same unbatched program either way.

Run from the repository root (bartz: ``pip install bartz``, a benchmark-only dependency)::

    .venv/bin/python benchmarks/bcart_speed.py
"""
from __future__ import annotations

import json
import time

import jax
import numpy as np

import bayestrees as bt
from forest_common import RESULTS, machine, parser


def friedman(rng, n, p=10):
    X = rng.random((n, p))
    f = 10 * np.sin(np.pi * X[:, 0] * X[:, 1]) + 20 * (X[:, 2] - 0.5) ** 2 + 10 * X[:, 3] + 5 * X[:, 4]
    return X, f + rng.normal(size=n)


def timed(fn, repeats):
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return first, float(np.median(times))


def main():
    p = parser("Bayesian CART speed against bartz")
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--steps", type=int, default=4000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--chain-methods", default="vectorized,parallel")
    p.add_argument("--skip-bartz", action="store_true", help="only the chain scaling")
    args = p.parse_args()
    if args.quick:
        args.n, args.steps, args.repeats = 200, 500, 1
    rng = np.random.default_rng(0)
    X, y = friedman(rng, args.n)
    out = {"benchmark": "bcart_speed", "n": args.n, "steps": args.steps, "machine": machine()}

    def ours(chains, method="vectorized"):
        def run():
            est = bt.BayesianCARTRegressor(draws=args.steps // 2, tune=args.steps // 2, chains=chains, max_depth=5,
                                           max_bins=100, random_state=0, chain_method=method).fit(X, y)
            jax.block_until_ready(est.result_.lp)
        return run

    first, med = timed(ours(1), args.repeats)
    out["bayestrees_compile_and_first_s"], out["bayestrees_s"] = first, med
    out["bayestrees_steps_per_s"] = args.steps / med
    try:
        if args.skip_bartz:
            raise ModuleNotFoundError("skipped (--skip-bartz)")
        from bartz.BART import gbart

        def theirs():
            m = gbart(X, y.astype(np.float32), ntree=1, ndpost=args.steps // 2, nskip=args.steps // 2, numcut=100,
                      printevery=None, seed=0)
            jax.block_until_ready(m.yhat_train_mean if hasattr(m, "yhat_train_mean") else m.sigma)
        first_b, med_b = timed(theirs, args.repeats)
        out["bartz_compile_and_first_s"], out["bartz_s"] = first_b, med_b
        out["bartz_steps_per_s"] = args.steps / med_b
        out["ratio_steps_per_s_ours_over_bartz"] = out["bayestrees_steps_per_s"] / out["bartz_steps_per_s"]
    except ImportError as e:
        out["bartz"] = str(e) if args.skip_bartz else "not installed (pip install bartz)"
    _, one = timed(ours(1), 1)
    for method in args.chain_methods.split(","):
        scaling = {1: one}
        for c in (4, 16, 64):
            _, scaling[c] = timed(ours(c, method), 1)
        key = "" if method == "vectorized" else f"_{method}"
        out[f"chains_seconds{key}"] = scaling
        out[f"chains_ratio_to_one{key}"] = {c: v / one for c, v in scaling.items()}
    print(json.dumps(out, indent=1))
    with open(args.out or RESULTS / "bcart_speed.jsonl", "a") as fh:
        fh.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
