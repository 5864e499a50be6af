"""Bayesian CART update schemes on the mixing panel: R-hat, ESS, ESS per second, time, test error.

The panel (issue "Tree MCMC a user can trust at its defaults"), every data set fitted with 4
chains by each update scheme:

* ``step``: 200 rows of ``y = 2 (x2 > 0.3) + 4 (x0 - 0.5)^2 + N(0, 0.3^2)``, x uniform on
  [0, 1]^4, for two seeds of our own (``--case-seeds``); test error against the true f at
  1,000 new rows;
* ``friedman``: Friedman (1991), n = 100, p = 10, N(0, 1) noise; RMSE against the true f;
* ``haberman`` and ``iris`` (classification): a shuffled 70/30 split, test error rate;
* ``california``: 300 training rows of California housing (fold 0 of the forest benchmark's
  10 folds), RMSE in dollars on 2,000 of the fold's test rows.

Schemes (``--schemes``): ``default`` (the estimators' defaults, 300 + 700 steps: 25 rounds of local
moves on a ladder of 8 temperatures, then a particle Gibbs regrowth of the cold tree, per step;
records before 2026-12-06 name particle Gibbs alone ``default``, and each record's ``kernel`` says
which), ``moves`` (one random local move per step), ``sweep`` (a systematic sweep), ``tempered``
(local moves on an 8-rung ladder from 1 down to 0.1, 2,000 steps), ``tempered_long`` (the same,
25,000 steps, every 10th kept), ``mixed`` (``local_moves`` local moves, then a regrowth, per step),
``tempered_pg`` and ``tempered_mixed`` (those on a 4-rung ladder, every replica regrown),
``ladder_mixed`` (25 steps of the tempered local moves, then a regrowth of the cold replica;
``ladder_mixed_5``: 5 such steps per regrowth, at the default's lengths; ``ladder_mixed_100``: 100;
``ladder_mixed_1000``: 25, at the default's lengths; ``ladder_mixed_ref``: a run 7 times the
default's length, the reference for the posterior's mean ``lp``), ``default_rotate`` (the defaults
with rotations among the local moves).  Each scheme has its own chain
lengths (``LENGTHS``).

For each fit: the rank-normalised split R-hat (ArviZ) of ``n_leaves``, ``sigma`` (regression)
and ``lp``, the smallest bulk ESS of the three, that ESS per second of sampling, the sampling
time after compilation (a first fit with ``tune=0`` compiles the same program and is not
timed; its time is reported as compile time), the test error, and each chain's mean and largest
``lp`` (chains that agree can still agree below the posterior's bulk: compare with the
reference).  A variable that never moved within some chain is reported as ``stuck`` (its R-hat is
not finite).

Run from the repository root::

    .venv/bin/python benchmarks/bcart_panel.py
    .venv/bin/python benchmarks/bcart_panel.py --data step friedman --schemes default moves

Writes one JSON line per fit to ``benchmarks/results/bcart_panel.jsonl``.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import arviz as az
import jax
import numpy as np

from bayestrees.families import get_family
from bayestrees.inference.bcart.fit import DEFAULT_LADDER

RESULTS = Path(__file__).resolve().parent / "results"
DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"

#: the 8-rung ladder of the tempered schemes (1 down to 0.1): the estimators' own default ladder
LADDER = DEFAULT_LADDER

#: (tune, draws, extra config) per scheme: "default" is the estimators' defaults (300 + 700 steps of
#: their default scheme); the others at lengths of about its cost or more
LENGTHS = {
    "default": (300, 700, {}),   # what the estimators do when given nothing
    # the defaults with rotations among the local moves (grow, prune, change, swap, rotate)
    "default_rotate": (300, 700, {"move_probs": (0.25, 0.25, 0.3, 0.1, 0.1)}),
    "moves": (1000, 1000, {"scheme": "moves"}),
    "sweep": (500, 500, {"scheme": "sweep"}),
    "tempered": (1000, 1000, {"scheme": "moves",
                              "temperatures": LADDER}),
    "mixed": (200, 300, {"scheme": "mixed"}),
    # the same ladder, 25,000 steps per chain (every 10th kept): about the default's time
    "tempered_long": (5000, 2000, {"scheme": "moves", "thin": 10,
                                   "temperatures": LADDER}),
    # compositions: particle Gibbs regrowth tempered on a 4-rung ladder (1 to 0.3), and 10 local moves
    # then a regrowth, tempered on the same ladder (every replica makes both)
    "tempered_pg": (100, 300, {"scheme": "pgibbs",
                               "temperatures": tuple(float(b) for b in np.geomspace(1.0, 0.3, 4))}),
    "tempered_mixed": (100, 300, {"scheme": "mixed", "local_moves": 10,
                                  "temperatures": tuple(float(b) for b in np.geomspace(1.0, 0.3, 4))}),
    # the mixed scheme on a ladder (pgibbs.LadderMixedStep): 25 steps of the tempered local moves
    # (8 rungs, 1 to 0.1), then a regrowth of the cold replica, per step
    "ladder_mixed": (200, 600, {"scheme": "mixed", "local_moves": 25,
                                "temperatures": LADDER}),
    "ladder_mixed_long": (400, 1600, {"scheme": "mixed", "local_moves": 25,
                                      "temperatures": LADDER}),
    # ladder_mixed at 300 + 700 steps: the defaults of 2026-12-06 named explicitly, so that its records
    # keep their meaning if the defaults change
    "ladder_mixed_1000": (300, 700, {"scheme": "mixed", "local_moves": 25,
                                     "temperatures": LADDER}),
    # 100 ladder rounds per regrowth, 200 + 600 steps
    "ladder_mixed_100": (200, 600, {"scheme": "mixed", "local_moves": 100,
                                    "temperatures": LADDER}),
    # a reference for the posterior's mean lp: the same ladder, 7,000 steps per chain (every 2nd kept)
    "ladder_mixed_ref": (1000, 3000, {"scheme": "mixed", "local_moves": 25, "thin": 2,
                                      "temperatures": LADDER}),
    # the same ladder at the default's lengths with a regrowth of the cold replica every 5 ladder steps
    "ladder_mixed_5": (300, 700, {"scheme": "mixed", "local_moves": 5,
                                  "temperatures": LADDER}),
}


def step_case(seed: int, n: int = 200):
    rng = np.random.default_rng(seed)

    def f(X):
        return 2.0 * (X[:, 2] > 0.3) + 4.0 * (X[:, 0] - 0.5) ** 2

    X, Xt = rng.uniform(size=(n, 4)), rng.uniform(size=(1000, 4))
    return "regression", X, f(X) + 0.3 * rng.normal(size=n), Xt, f(Xt)


def friedman_case(seed: int = 0, n: int = 100):
    rng = np.random.default_rng(seed)

    def draw(m):
        X = rng.uniform(size=(m, 10))
        return X, 10 * np.sin(np.pi * X[:, 0] * X[:, 1]) + 20 * (X[:, 2] - 0.5) ** 2 + 10 * X[:, 3] + 5 * X[:, 4]

    X, f = draw(n)
    Xt, ft = draw(1000)
    return "regression", X, f + rng.normal(size=n), Xt, ft


def split(X, y, seed: int = 0, frac: float = 0.7):
    idx = np.random.default_rng(seed).permutation(len(y))
    k = int(frac * len(y))
    return X[idx[:k]], y[idx[:k]], X[idx[k:]], y[idx[k:]]


def haberman_case():
    a = np.loadtxt(DATA / "haberman.csv", delimiter=",")
    X, y, Xt, yt = split(a[:, :3], a[:, 3].astype(int))
    return "classification", X, y, Xt, yt


def iris_case():
    from sklearn.datasets import load_iris

    d = load_iris()
    X, y, Xt, yt = split(d.data, d.target)
    return "classification", X, y, Xt, yt


def california_case(n: int = 300, seed: int = 0):
    import pandas as pd

    df = pd.read_csv(DATA / "california_housing.csv")
    y = df.pop("medianHouseValue").to_numpy(float)
    X = df.to_numpy(float)
    rng = np.random.default_rng(seed)
    idx = rng.permutation(len(y))
    return "regression", X[idx[:n]], y[idx[:n]], X[idx[n:n + 2000]], y[idx[n:n + 2000]]


def cases(names, case_seeds):
    for name in names:
        if name == "step":
            for s in case_seeds:
                yield f"step{s}", step_case(s)
        elif name == "friedman":
            yield "friedman", friedman_case()
        elif name == "haberman":
            yield "haberman", haberman_case()
        elif name == "iris":
            yield "iris", iris_case()
        elif name == "california":
            yield "california", california_case()


def convergence(idata, names):
    """``{name: (rhat, ess_bulk)}``; rhat ``inf`` when the variable never moved within a chain."""
    out = {}
    for v in names:
        group = idata.sample_stats if v == "lp" else idata.posterior
        if v not in group:
            continue
        x = np.asarray(group[v], float)
        stuck = bool(np.any(np.ptp(x, axis=1) == 0))
        da = az.convert_to_dataset({v: x})
        r = float(az.rhat(da)[v]) if not stuck else float("inf")
        e = float(az.ess(da, method="bulk")[v]) if not stuck else 0.0
        out[v] = (r, e)
    return out


def fit_one(task, X, y, Xt, truth, scheme, chains, seed):
    fam = get_family("bayesian_cart")
    tune, draws, extra = LENGTHS[scheme]
    data = fam.prepare_data(X, y, task=task, max_bins=32, categorical=None)
    key = jax.random.key(seed)
    t0 = time.perf_counter()
    fam.fit(key, data, fam.make_config(tune=0, draws=draws, chains=chains, **extra))  # compiles the program
    compile_s = time.perf_counter() - t0
    cfg = fam.make_config(tune=tune, draws=draws, chains=chains, **extra)
    t0 = time.perf_counter()
    res = fam.fit(key, data, cfg)
    seconds = time.perf_counter() - t0
    idata = fam.to_inferencedata(res, data)
    vals = fam.values(res, data.binner.transform(Xt)).mean(0)
    if task == "regression":
        err = float(np.sqrt(np.mean((vals[:, 0] - truth) ** 2)))
    else:
        err = float(np.mean(data.classes[vals.argmax(-1)] != truth))
    names = ["n_leaves", "lp"] + (["sigma"] if task == "regression" else [])
    conv = convergence(idata, names)
    ess_min = min(e for _, e in conv.values())
    lp = np.asarray(idata.sample_stats["lp"], float)
    return dict(scheme=scheme, tune=tune, draws=draws, thin=cfg.thin, chains=chains, seconds=seconds, compile_s=compile_s,
                lp_chain_means=lp.mean(1).round(2).tolist(), lp_chain_max=lp.max(1).round(2).tolist(),
                kernel=dict(scheme=cfg.scheme, rungs=len(cfg.temperatures), local_moves=cfg.local_moves,
                            particles=cfg.particles),
                rhat={k: r for k, (r, _) in conv.items()}, ess={k: e for k, (_, e) in conv.items()},
                ess_min=ess_min, ess_per_s=ess_min / seconds, test_error=err,
                mean_n_leaves=float(np.asarray(idata.posterior["n_leaves"]).mean()))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", nargs="+", default=["step", "friedman", "haberman", "iris", "california"])
    p.add_argument("--schemes", nargs="+", default=list(LENGTHS), choices=list(LENGTHS))
    p.add_argument("--case-seeds", type=int, nargs="+", default=[11, 12])
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(RESULTS / "bcart_panel.jsonl"))
    args = p.parse_args()
    print(f"backend {jax.default_backend()}, {args.chains} chains")
    print(f"{'data':>10} {'scheme':>9} {'Rhat n_leaves':>13} {'Rhat sigma':>10} {'Rhat lp':>8} {'ESS min':>8} "
          f"{'ESS/s':>7} {'s':>6} {'compile':>7} {'error':>8} {'leaves':>6}")
    for name, (task, X, y, Xt, truth) in cases(args.data, args.case_seeds):
        for scheme in args.schemes:
            row = fit_one(task, X, y, Xt, truth, scheme, args.chains, args.seed)
            row.update(data=name, n=len(y), machine=f"{jax.default_backend()}, {jax.device_count()} device(s)",
                       date=time.strftime("%Y-%m-%d"))
            r = row["rhat"]
            fmt = lambda v: "stuck" if v == float("inf") else f"{v:.3f}"  # noqa: E731
            print(f"{name:>10} {scheme:>9} {fmt(r['n_leaves']):>13} {fmt(r.get('sigma', float('nan'))):>10} "
                  f"{fmt(r['lp']):>8} {row['ess_min']:8.0f} {row['ess_per_s']:7.1f} {row['seconds']:6.1f} "
                  f"{row['compile_s']:7.1f} {row['test_error']:8.4g} {row['mean_n_leaves']:6.2f}", flush=True)
            with open(args.out, "a") as fh:
                fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
