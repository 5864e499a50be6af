"""Two BCF fits of the same shapes in one process, at the estimator's defaults (the paper's 200 + 50
trees, 4 chains of 1,000 + 1,000): the second loads the programs the first compiled.

    XDG_CACHE_HOME=$(mktemp -d) python benchmarks/bcf_refit.py LABEL

Prints each fit's whole time and the time in NumPyro's run (the sampling loop, its compilation
included).
"""
from __future__ import annotations

import argparse
import time
import warnings

import numpy as np


def data(seed: int, n: int = 250):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 5))
    pi = 1 / (1 + np.exp(-X[:, 0]))
    z = rng.binomial(1, pi)
    y = 1.0 + X[:, 0] + (1 + X[:, 1]) * z + 0.5 * rng.normal(size=n)
    return X, y, z, pi


def main(argv=None) -> None:
    import bayestrees as bt

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("label", nargs="?", default="")
    ap.add_argument("--n", type=int, default=250)
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    for seed in (0, 1):
        X, y, z, pi = data(seed, args.n)
        t0 = time.perf_counter()
        m = bt.BCFRegressor(random_state=0).fit(X, y, z, pihat=pi)
        print(args.label, "fit", seed, round(time.perf_counter() - t0, 1), "s; NumPyro's run",
              round(m.fit_.seconds, 1), "s", flush=True)


if __name__ == "__main__":
    main()
