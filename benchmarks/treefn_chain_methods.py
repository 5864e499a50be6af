"""Whole-fit time of models with tree functions, by how the chains run: the first fit of a process
(compilation included) and a second fit of the same model and shapes (another seed).

Models:

* ``poisson``: ``y ~ Poisson(exp(b0 + f(X)))``, ``bart_function`` with m = 50, n = 2,000, 5 features,
  ``b0`` by NUTS; 4 chains of 200 + 200;
* ``poisson_large``: issue 44's size, ``y ~ Poisson(exp(offset + f(X)))`` at n = 10,000 (the offset at
  the log mean, no other site), the default lengths (4 chains of 1,000 + 1,000); one fit, with the
  R-hat of the function's mean and total leaves;
* ``one_tree``: the one-tree acceptance case of the tests (``tree_function``, 9 rows, a Normal
  likelihood with sigma known), ``jit_data=True``, the default lengths (4 chains of 1,000 + 1,000);
* ``bcf``: ``bt.BCFRegressor`` on 200 rows of the paper's nonlinear heterogeneous design
  (``m_mu=20, m_tau=10``), 2 chains of 200 + 200.

Usage (from the repository root; ``default`` is ``sample_model``'s own default)::

    python benchmarks/treefn_chain_methods.py --methods default vectorized parallel
    python benchmarks/treefn_chain_methods.py --models poisson_large --methods auto vectorized
    python benchmarks/treefn_chain_methods.py --models poisson --log-likelihood --poisson-lengths 1000 1000

``--log-likelihood`` writes the pointwise log likelihood (``sample_model``'s default; off otherwise, as
in the first records); ``--poisson-lengths TUNE DRAWS`` sets the ``poisson`` model's lengths.

One JSON line per model and method on stdout (``first_s``, ``second_s``: wall seconds of the two
fits).  The library's persistent compilation cache is on, in a new temporary folder: the first fit
compiles, the second loads what it can (as a user's second fit does).
"""
from __future__ import annotations

import argparse
import json
import os
import time
import warnings


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=["poisson", "one_tree", "bcf"])
    p.add_argument("--methods", nargs="+", default=["default"])
    p.add_argument("--log-likelihood", action="store_true", help="write the pointwise log likelihood")
    p.add_argument("--poisson-lengths", nargs=2, type=int, default=[200, 200], metavar=("TUNE", "DRAWS"))
    a = p.parse_args(argv)
    import tempfile

    os.environ["BAYESTREES_COMPILATION_CACHE"] = tempfile.mkdtemp(prefix="treefn-chain-methods-")
    import jax.numpy as jnp
    import numpy as np
    import numpyro
    import numpyro.distributions as dist

    import bayestrees as bt

    warnings.simplefilter("ignore")
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(2000, 5)).astype(np.float32)
    y = rng.poisson(np.exp(np.sin(3 * X[:, 0]) + X[:, 1])).astype(np.float32)

    def poisson(X, y=None):
        b0 = numpyro.sample("b0", dist.Normal(0, 1))
        f = bt.bart_function("f", X, m=50)
        numpyro.sample("y", dist.Poisson(jnp.exp(b0 + f)), obs=y)

    XL = rng.uniform(size=(10_000, 5)).astype(np.float32)
    yL = rng.poisson(np.exp(np.sin(3 * XL[:, 0]) + XL[:, 1])).astype(np.float32)
    offset = float(np.log(yL.mean()))

    def poisson_large(X, y=None):
        f = bt.bart_function("f", X, m=50)
        numpyro.sample("y", dist.Poisson(jnp.exp(offset + f)), obs=y)

    codes = np.array([[3, 0], [0, 0], [0, 3], [3, 2], [0, 0], [1, 1], [2, 1], [1, 0], [2, 2]])
    X1 = (codes * 1.5 - 2.0).astype(np.float32)
    y1 = (np.where(codes[:, 0] >= 2, 1.0, -1.0) + 0.5 * np.where(codes[:, 1] >= 1, 1.0, -1.0)
          + 0.7 * np.random.default_rng(3).normal(size=9)).astype(np.float32)

    def one_tree(X, y=None):
        f = bt.tree_function("f", X, max_depth=2)
        numpyro.sample("y", dist.Normal(f, 0.7), obs=y)

    n = 200
    Xc = rng.normal(size=(n, 5)).astype(np.float32)
    pi = 0.8 * (1 / (1 + np.exp(-Xc[:, 0]))) + 0.1
    z = rng.binomial(1, pi)
    yc = (1 + np.abs(Xc[:, 2]) + (1 + 2 * Xc[:, 1]) * z + rng.normal(size=n)).astype(np.float32)

    def fit(model, method, seed):
        kw = {} if method == "default" else {"chain_method": method}
        kw["log_likelihood"] = a.log_likelihood
        if model == "poisson":
            tune, draws = a.poisson_lengths
            return bt.sample_model(poisson, X, y=y, draws=draws, tune=tune, chains=4, random_seed=seed, **kw)
        if model == "poisson_large":
            return bt.sample_model(poisson_large, XL, y=yL, random_seed=seed, **kw)
        if model == "one_tree":
            return bt.sample_model(one_tree, X1, y1, random_seed=seed, jit_data=True, **kw)
        if method != "default":
            raise SystemExit("bcf: the estimator's own chain method only (--methods default)")
        return bt.BCFRegressor(m_mu=20, m_tau=10, draws=200, tune=200, chains=2, random_state=seed).fit(Xc, yc, z, pihat=pi)

    for model in a.models:
        for method in a.methods:
            if model == "poisson_large":
                t = time.perf_counter()
                c = fit(model, method, 0).convergence.table
                print(json.dumps({"model": model, "method": method, "wall_s": round(time.perf_counter() - t, 1),
                                  "rhat_f_mean": round(float(c["f_mean"]["rhat"]), 3),
                                  "rhat_leaves": round(float(c["f_leaves"]["rhat"]), 3)}), flush=True)
                continue
            times = []
            for seed in (0, 1):
                t = time.perf_counter()
                fit(model, method, seed)
                times.append(round(time.perf_counter() - t, 2))
            print(json.dumps({"model": model, "method": method, "first_s": times[0], "second_s": times[1],
                              "log_likelihood": a.log_likelihood}), flush=True)


if __name__ == "__main__":
    main()
