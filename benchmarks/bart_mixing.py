"""BART's mixing at its default lengths: Friedman's function, n = 1,000, 4 chains.

For each move setting (``--moves``: ``cgm`` = grow 0.25, prune 0.25, change 0.4, swap 0.1, the
BayesTree/dbarts moves; ``gp`` = grow and prune 0.5 each, the moves of the R package BART and of
bartz) and each data set (``--datasets``, seeds ``--seed + r``): one fit of ``bt.BARTRegressor`` with
its default lengths (``--tune``/``--draws`` to change them) and 4 chains, then

* R-hat (rank-normalised, split) and bulk ESS of ``sigma`` and of ``f`` at 5 fixed test rows,
* ESS of ``sigma`` per second of sampling (compilation excluded: a warm-up fit of the same shapes
  runs first, and the fit's own ``seconds`` count sampling only),
* RMSE of the posterior mean against the true ``f`` at 1,000 new rows.

Data: ``X ~ U(0, 1)^10``, ``y = 10 sin(pi x1 x2) + 20 (x3 - 0.5)^2 + 10 x4 + 5 x5 + N(0, 1)``.
The issue's goal: R-hat of sigma below 1.01 at the defaults.

    .venv/bin/python benchmarks/bart_mixing.py                      # both settings, 3 data sets
    .venv/bin/python benchmarks/bart_mixing.py --moves gp --datasets 1

Prints a table and appends JSON lines to ``benchmarks/results/bart_mixing.jsonl`` (with the load
average before and after each fit).
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
from pathlib import Path

import arviz as az
import numpy as np

import bayestrees as bt

sys.path.insert(0, str(Path(__file__).resolve().parent))
from forest_common import append_jsonl  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
MOVES = {"cgm": (0.25, 0.25, 0.4, 0.1), "gp": (0.5, 0.5, 0.0, 0.0)}


def friedman(rng, n, p=10):
    X = rng.random((n, p))
    f = 10 * np.sin(np.pi * X[:, 0] * X[:, 1]) + 20 * (X[:, 2] - 0.5) ** 2 + 10 * X[:, 3] + 5 * X[:, 4]
    return X, f


def run(args, moves: str, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    X, f = friedman(rng, args.n)
    y = f + rng.normal(size=args.n)
    Xt, ft = friedman(rng, 1000)
    kw = dict(move_probs=MOVES[moves], chains=4, random_state=seed)
    if args.tune is not None:
        kw["tune"] = args.tune
    if args.draws is not None:
        kw["draws"] = args.draws
    load0 = os.getloadavg()
    est = bt.BARTRegressor(**kw).fit(X, y)
    load1 = os.getloadavg()
    post = est.idata_.posterior
    sigma = post["sigma"]
    fx = est.predict_draws(Xt[:5])                     # (chains, draws, 5)
    fx = np.asarray(fx).reshape(sigma.shape + (5,))
    ds = az.convert_to_dataset({"sigma": np.asarray(sigma), "f": fx})
    rhat, ess = az.rhat(ds), az.ess(ds, method="bulk")
    seconds = float(est.result_.seconds)
    rmse = float(np.sqrt(np.mean((est.predict(Xt) - ft) ** 2)))
    return dict(moves=moves, move_probs=MOVES[moves], seed=seed, n=args.n, tune=kw.get("tune"), draws=kw.get("draws"),
                rhat_sigma=float(rhat["sigma"]), rhat_f_max=float(rhat["f"].max()),
                ess_sigma=float(ess["sigma"]), ess_f_min=float(ess["f"].min()),
                sigma_mean=float(np.mean(sigma)), seconds=seconds, ess_sigma_per_s=float(ess["sigma"]) / seconds,
                rmse=rmse, load_before=[round(x, 2) for x in load0], load_after=[round(x, 2) for x in load1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--moves", nargs="+", default=["cgm", "gp"], choices=sorted(MOVES))
    ap.add_argument("--datasets", type=int, default=3)
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--tune", type=int, default=None)
    ap.add_argument("--draws", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(RESULTS / "bart_mixing.jsonl"))
    args = ap.parse_args()
    # warm-up: compile the shapes once, so that the timed fits sample only
    rng = np.random.default_rng(12345)
    X, f = friedman(rng, args.n)
    for moves in args.moves:
        bt.BARTRegressor(move_probs=MOVES[moves], chains=4, tune=1, draws=2).fit(X, f + rng.normal(size=args.n))
    rows = []
    print(f"{'moves':>5} {'seed':>4} {'R-hat sigma':>11} {'max R-hat f':>11} {'ESS sigma':>9} {'min ESS f':>9} "
          f"{'sigma':>6} {'s':>6} {'ESS/s':>6} {'RMSE':>6}")
    for r in range(args.datasets):
        for moves in args.moves:
            row = run(args, moves, args.seed + r)
            row.update(machine=platform.machine(), cpus=os.cpu_count(), bayestrees=bt.__version__)
            rows.append(row)
            print(f"{moves:>5} {row['seed']:>4} {row['rhat_sigma']:11.3f} {row['rhat_f_max']:11.3f} "
                  f"{row['ess_sigma']:9.0f} {row['ess_f_min']:9.0f} {row['sigma_mean']:6.3f} {row['seconds']:6.1f} "
                  f"{row['ess_sigma_per_s']:6.1f} {row['rmse']:6.3f}", flush=True)
    for row in rows:
        append_jsonl(args.out, row)
    print(f"\nappended {len(rows)} lines to {os.path.relpath(args.out)}")


if __name__ == "__main__":
    main()
