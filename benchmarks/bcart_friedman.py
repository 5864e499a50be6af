"""Bayesian CART by MCMC on the Friedman (1991) function, against CART, BF and RF in the same run.

Friedman's function f(x) = 10 sin(pi x1 x2) + 20 (x3 - 1/2)^2 + 10 x4 + 5 x5 with 5 spurious
inputs (p = 10), n = 100 training rows with N(0, 1) noise, RMSE against the true f on 1000 test
points, ``--repeats`` independent data sets.  For each repeat: Bayesian CART (posterior mean of
the function, ``--chains`` vmapped chains), CART (one unweighted tree), a Bayesian forest and a
random forest of 100 trees (the forests family), all on the same data.  Mixing: R-hat of
``n_leaves`` and ``lp`` across the chains, and the effective sample size of ``n_leaves`` per
second of sampling.

Run from the repository root::

    .venv/bin/python benchmarks/bcart_friedman.py --repeats 100
    .venv/bin/python benchmarks/bcart_friedman.py --quick
"""
from __future__ import annotations

import json
import time

import arviz as az
import numpy as np

import bayestrees as bt
from forest_common import RESULTS, machine, parser


def friedman(rng, n, p=10):
    X = rng.random((n, p))
    f = 10 * np.sin(np.pi * X[:, 0] * X[:, 1]) + 20 * (X[:, 2] - 0.5) ** 2 + 10 * X[:, 3] + 5 * X[:, 4]
    return X, f


def rmse(a, b):
    return float(np.sqrt(np.mean((np.asarray(a) - np.asarray(b)) ** 2)))


def main():
    p = parser("Bayesian CART on the Friedman function")
    p.add_argument("--repeats", type=int, default=100)
    p.add_argument("--chains", type=int, default=16)
    p.add_argument("--tune", type=int, default=2000)
    p.add_argument("--draws", type=int, default=1000)
    p.add_argument("--thin", type=int, default=2)
    p.add_argument("--scheme", default="moves", choices=["moves", "sweep"])
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if args.quick:
        args.repeats, args.chains, args.tune, args.draws = 2, 4, 200, 100
    out = args.out or str(RESULTS / "bcart_friedman.jsonl")
    rows = []
    for r in range(args.repeats):
        rng = np.random.default_rng(args.seed + r)
        X, f = friedman(rng, 100)
        y = f + rng.normal(size=100)
        Xt, ft = friedman(rng, 1000)
        t0 = time.perf_counter()
        bc = bt.BayesianCARTRegressor(chains=args.chains, tune=args.tune, draws=args.draws, thin=args.thin,
                                      scheme=args.scheme, random_state=r).fit(X, y)
        t_bc = time.perf_counter() - t0
        idata = bc.idata_
        rh = az.rhat(idata, var_names=["n_leaves", "sigma"])
        rh_lp = az.rhat(az.convert_to_dataset(idata.sample_stats[["lp"]]))
        ess = float(az.ess(idata, var_names=["n_leaves"])["n_leaves"])
        cart = bt.BayesianForestRegressor(draws=1, weights="none", min_samples_leaf=5).fit(X, y)
        bf = bt.BayesianForestRegressor(draws=100, min_samples_leaf=5, random_state=r).fit(X, y)
        rf = bt.BayesianForestRegressor(draws=100, weights="multinomial", min_samples_leaf=5,
                                        max_features=0.33, random_state=r).fit(X, y)
        row = {"repeat": r, "rmse_bcart": rmse(bc.predict(Xt), ft), "rmse_cart": rmse(cart.predict(Xt), ft),
               "rmse_bf": rmse(bf.predict(Xt), ft), "rmse_rf": rmse(rf.predict(Xt), ft),
               "rhat_n_leaves": float(rh["n_leaves"]), "rhat_sigma": float(rh["sigma"]),
               "rhat_lp": float(rh_lp["lp"]), "ess_n_leaves": ess, "bcart_fit_s": t_bc,
               "bcart_sampling_s": bc.result_.seconds, "ess_per_s": ess / bc.result_.seconds,
               "n_leaves_mean": float(idata.posterior["n_leaves"].mean()), **bc.acceptance_}
        rows.append(row)
        print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}), flush=True)
    keys = ["rmse_bcart", "rmse_cart", "rmse_bf", "rmse_rf"]
    print("\nmethod       RMSE mean   (se)   over", len(rows), "repeats")
    for k in keys:
        v = np.array([r[k] for r in rows])
        print(f"{k[5:]:<10} {v.mean():9.3f} ({v.std(ddof=1) / np.sqrt(len(v)) if len(v) > 1 else 0:.3f})")
    for k in ("rhat_n_leaves", "rhat_lp", "rhat_sigma", "ess_per_s"):
        v = np.array([r[k] for r in rows])
        print(f"{k:<14} median {np.median(v):.3f}  max {v.max():.3f}  share < 1.05: {np.mean(v < 1.05):.2f}")
    saved = {**vars(args), "data_dir": "unused (synthetic data)"}
    summary = {"benchmark": "bcart_friedman", "args": saved, "machine": machine(),
               **{f"{k}_mean": float(np.mean([r[k] for r in rows])) for k in keys}}
    with open(out, "a") as fh:
        for row in rows:
            fh.write(json.dumps({"benchmark": "bcart_friedman", **row}) + "\n")
        fh.write(json.dumps(summary) + "\n")


if __name__ == "__main__":
    main()
