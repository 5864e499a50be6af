"""Bayesian CART mixing: R-hat of ``n_leaves``, ``sigma`` and ``lp`` across chains against run length.

One Friedman (1991) data set (n = 100, p = 10, N(0, 1) noise, the first data set of
``bcart_friedman.py`` for ``--seed 0``), or California housing (``--data california``: fold 0 of
the Taddy et al. folds of ``forest_california.py``, ``--n`` training rows drawn at random, RMSE
in dollars on the fold's test rows), ``--chains`` chains, one fit per entry of ``--steps``
(steps per chain: ``tune = steps / 2`` tuning steps, then ``steps / 2`` steps thinned to
``--draws`` kept draws), optionally with a parallel-tempering ladder per chain
(``--temperatures``: ``--rungs`` inverse temperatures spaced geometrically from 1 down to
``--coldest``).  For each run: the rank-normalised split R-hat (ArviZ) of ``n_leaves``,
``sigma`` and the log posterior ``lp``, the bulk ESS of ``n_leaves`` per second of sampling,
the sampling time (compilation reported apart: the first fit of a shape is run twice when
``--warm`` is given) and the test RMSE of the posterior mean against the true f.

Run from the repository root::

    .venv/bin/python benchmarks/bcart_mixing.py --steps 4000 40000 200000
    .venv/bin/python benchmarks/bcart_mixing.py --steps 40000 --rungs 8 --coldest 0.1
    .venv/bin/python benchmarks/bcart_mixing.py --data california --n 5000 --steps 40000 --rungs 8 --coldest 0.1
    .venv/bin/python benchmarks/bcart_mixing.py --scheme pgibbs --particles 10 --steps 2000

``--scheme pgibbs`` makes every step a particle Gibbs update (``--particles`` particles; a step
costs about ``particles * max_depth`` moves).
"""
from __future__ import annotations

import json
import time

import arviz as az
import jax
import numpy as np

import bayestrees as bt
from bcart_friedman import friedman, rmse
from forest_common import RESULTS, machine, parser


def main():
    p = parser("Bayesian CART mixing against run length")
    p.add_argument("--steps", type=int, nargs="+", default=[4000, 40000])
    p.add_argument("--chains", type=int, default=16)
    p.add_argument("--draws", type=int, default=1000)
    p.add_argument("--rungs", type=int, default=1, help="parallel-tempering replicas per chain (1: none)")
    p.add_argument("--coldest", type=float, default=0.15, help="smallest inverse temperature of the ladder")
    p.add_argument("--scheme", default="moves", choices=["moves", "sweep", "pgibbs"])
    p.add_argument("--particles", type=int, default=10, help="particles of --scheme pgibbs")
    p.add_argument("--data", default="friedman", choices=["friedman", "california"])
    p.add_argument("--n", type=int, default=None, help="training rows (default 100 Friedman, 5000 California)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--warm", action="store_true", help="fit each shape once before timing (compile apart)")
    args = p.parse_args()
    if args.quick:
        args.steps, args.chains, args.draws = [400], 4, 100
    out = args.out or str(RESULTS / "bcart_mixing.jsonl")
    rng = np.random.default_rng(args.seed)
    if args.data == "friedman":
        args.n = args.n or 100
        X, f = friedman(rng, args.n)
        y = f + rng.normal(size=args.n)
        Xt, ft = friedman(rng, 1000)
    else:
        from sklearn.model_selection import KFold

        from forest_california import SEED, load

        args.n = args.n or 5000
        Xa, ya, _ = load(args.data_dir)
        tr, te = next(iter(KFold(10, shuffle=True, random_state=SEED).split(Xa)))
        sub = rng.choice(tr, size=min(args.n, len(tr)), replace=False)
        X, y, Xt, ft = Xa[sub], ya[sub], Xa[te], ya[te]
    temps = tuple(float(b) for b in np.geomspace(1.0, args.coldest, args.rungs)) if args.rungs > 1 else (1.0,)
    print(f"backend {jax.default_backend()}, devices {jax.devices()}; chains {args.chains}, temperatures {temps}")
    print(f"{'steps':>8} {'thin':>5} {'R-hat n_leaves':>15} {'R-hat sigma':>12} {'R-hat lp':>9} "
          f"{'ESS/s':>8} {'sampling s':>11} {'compile s':>10} {'RMSE':>6}")
    rows = []
    for steps in args.steps:
        tune = steps // 2
        # never more steps than asked: with fewer than --draws steps after tuning, every one is kept
        draws = min(args.draws, steps - tune)
        thin = max(1, (steps - tune) // draws)
        kw = dict(chains=args.chains, tune=tune, draws=draws, thin=thin, scheme=args.scheme,
                  particles=args.particles, temperatures=temps, random_state=args.seed)
        compile_s = float("nan")
        if args.warm:  # same shapes, draws and settings, two tuning steps and thin 1: compiles what the timed fit runs
            t0 = time.perf_counter()
            bt.BayesianCARTRegressor(**{**kw, "tune": 2, "thin": 1}).fit(X, y)
            compile_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        bc = bt.BayesianCARTRegressor(**kw).fit(X, y)
        fit_s = time.perf_counter() - t0
        idata = bc.idata_
        rh = az.rhat(idata, var_names=["n_leaves", "sigma"])
        rh_lp = float(az.rhat(az.convert_to_dataset(idata.sample_stats[["lp"]]))["lp"])
        ess = float(az.ess(idata, var_names=["n_leaves"])["n_leaves"])
        row = {"benchmark": "bcart_mixing", "steps": steps, "tune": tune, "draws": draws, "thin": thin,
               "chains": args.chains,
               "temperatures": list(temps), "scheme": args.scheme,
               "particles": args.particles if args.scheme == "pgibbs" else None, "seed": args.seed,
               "data": args.data, "n": args.n,
               "rhat_n_leaves": float(rh["n_leaves"]), "rhat_sigma": float(rh["sigma"]), "rhat_lp": rh_lp,
               "ess_n_leaves": ess, "sampling_s": bc.result_.seconds, "fit_s": fit_s, "compile_s": compile_s,
               "ess_per_s": ess / bc.result_.seconds, "rmse": rmse(bc.predict(Xt), ft),
               "backend": jax.default_backend(), **bc.acceptance_, "machine": machine()}
        rows.append(row)
        print(f"{steps:>8} {thin:>5} {row['rhat_n_leaves']:>15.3f} {row['rhat_sigma']:>12.3f} {rh_lp:>9.3f} "
              f"{row['ess_per_s']:>8.2f} {row['sampling_s']:>11.1f} {compile_s:>10.1f} {row['rmse']:>6.3f}",
              flush=True)
    with open(out, "a") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
