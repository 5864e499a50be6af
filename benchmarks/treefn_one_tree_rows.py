"""A function of one tree at a user's size: the general path's regrowth against none, in time and R-hat.

A Poisson model with a log link and one tree (``bt.tree_function`` at its defaults: depth 5, 100
bins, 5 rows a leaf), ``--n`` rows (default 2,000), 5 uniform features, rates
``exp(0.5 + [x0 > 0.5] - 0.7 [x1 < 0.3])``.  ``sample_model`` runs at its defaults (4 chains of
1,000 + 1,000), with ``particles="auto"`` (the regrowth) and with ``particles=0``, each twice: the
second fit loads its programs from the compilation cache.  Prints the wall time, the largest R-hat
of ``n_leaves`` and its posterior mean.

    python benchmarks/treefn_one_tree_rows.py
    python benchmarks/treefn_one_tree_rows.py --n 500
    python benchmarks/treefn_one_tree_rows.py --likelihood normal
"""
from __future__ import annotations

import argparse
import time
import warnings

import arviz as az
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

import bayestrees as bt


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--likelihood", choices=("poisson", "normal"), default="poisson",
                    help="normal: the log rates plus N(0, 0.5^2) noise observed, sigma known (the conjugate path)")
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    X = rng.uniform(size=(a.n, 5)).astype(np.float32)
    eta = 0.5 + 1.0 * (X[:, 0] > 0.5) - 0.7 * (X[:, 1] < 0.3)
    if a.likelihood == "poisson":
        y = rng.poisson(np.exp(eta)).astype(np.float32)
    else:
        y = (eta + 0.5 * rng.normal(size=a.n)).astype(np.float32)

    def model(X, y=None):
        f = bt.tree_function("f", X)
        if a.likelihood == "poisson":
            numpyro.sample("y", dist.Poisson(jnp.exp(f)), obs=y)
        else:
            numpyro.sample("y", dist.Normal(f, 0.5), obs=y)

    for particles in ("auto", 0, "auto", 0):
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = bt.sample_model(model, X, y, random_seed=1, log_likelihood=False, particles=particles)
        leaves = fit.idata.posterior[["f_n_leaves"]]
        rhat = float(np.max(az.rhat(leaves)["f_n_leaves"].values))
        print(f"particles={particles!s:>4}: {time.perf_counter() - t:6.1f} s, R-hat of n_leaves {rhat:.3f}, "
              f"mean n_leaves {float(leaves['f_n_leaves'].mean()):.2f}", flush=True)


if __name__ == "__main__":
    main()
