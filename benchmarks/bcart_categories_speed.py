"""Bayesian CART's cost of subset splits: one fit of the same data with a categorical column split by
subsets of its categories against the same column as ordered codes.

1,000 rows, 5 features, column 0 of 8 categories (the response steps between {1, 4, 6} and the
rest), one chain, the random moves (``--moves-draws`` steps) and the default kernel
(``--mixed-draws`` steps); the first fit compiles, then ``--reps`` fits are timed by the sampler's own
clock (``BCARTResult.seconds``) and the median printed.  A/B two versions by running the script
under each, alternated, in one session.

    python benchmarks/bcart_categories_speed.py [--reps 3] [--moves-draws 15000] [--mixed-draws 200]
"""
from __future__ import annotations

import argparse
import warnings

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--moves-draws", type=int, default=15000)
    ap.add_argument("--mixed-draws", type=int, default=200)
    args = ap.parse_args()

    import jax

    from bayestrees.data import prepare_data
    from bayestrees.inference.bcart.fit import BCARTConfig, fit_bcart

    warnings.simplefilter("ignore")
    rng = np.random.default_rng(0)
    n, d = 1000, 5
    X = rng.uniform(size=(n, d))
    X[:, 0] = rng.integers(0, 8, n)
    y = np.isin(X[:, 0], [1, 4, 6]) * 2.0 + X[:, 1] + 0.3 * rng.normal(size=n)
    for scheme, draws in (("moves", args.moves_draws), ("mixed", args.mixed_draws)):
        for cat in (None, [0]):
            data = prepare_data(X, y, task="regression", max_bins=32, categorical=cat)
            cfg = BCARTConfig(scheme=scheme, chains=1, draws=draws, tune=0)
            fit_bcart(jax.random.key(0), data, cfg)   # compiles
            ts = [fit_bcart(jax.random.key(r + 1), data, cfg).seconds for r in range(args.reps)]
            print(f"{scheme:6s} {'subsets' if cat else 'ordered':8s} s per fit {np.round(ts, 3)} "
                  f"median {np.median(ts):.3f}")


if __name__ == "__main__":
    main()
