"""BART with and without parallel tempering (``temperatures``): R-hat and bulk ESS per second.

Friedman's function (``n`` rows, 10 features, noise sd 1), ``BARTRegressor`` at its defaults (200 trees,
4 chains of 1,000 + 1,000 steps) against the same with a ladder of temperatures; per fit the R-hat and
bulk ESS of ``sigma`` and ``lp`` (the convergence table), the sampling seconds (compiled first), and the
held-out RMSE of the posterior mean against the true function.

Usage (from the repository root)::

    .venv/bin/python benchmarks/bart_tempering.py [--n 1000] [--ladders "1" "1,0.8,0.6"]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--ladders", nargs="+", default=["1", "1,0.8,0.6"])
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    import bayestrees as bt
    from bcart_speed import friedman

    warnings.simplefilter("ignore")
    rng = np.random.default_rng(a.seed)
    X, y = friedman(rng, a.n)
    Xt = rng.random((1000, 10))
    ft = 10 * np.sin(np.pi * Xt[:, 0] * Xt[:, 1]) + 20 * (Xt[:, 2] - 0.5) ** 2 + 10 * Xt[:, 3] + 5 * Xt[:, 4]
    for ladder in a.ladders:
        temps = tuple(float(b) for b in ladder.split(","))
        bt.BARTRegressor(temperatures=temps, tune=5, draws=5, random_state=a.seed).fit(X, y)   # compile
        reg = bt.BARTRegressor(temperatures=temps, random_state=a.seed).fit(X, y)
        s = reg.result_.seconds
        tab = reg.convergence_.table
        rec = dict(n=a.n, temperatures=temps, seconds=round(s, 2),
                   rmse=round(float(np.sqrt(np.mean((reg.predict(Xt) - ft) ** 2))), 4),
                   **{f"{v}_{k}": round(float(tab[v][k]), 3) for v in tab for k in ("rhat", "ess_bulk")},
                   **{f"{v}_ess_per_s": round(float(tab[v]["ess_bulk"]) / s, 2) for v in tab})
        print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
