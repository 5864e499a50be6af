"""A function of one tree (``tree_function``, m = 1) against the exact posterior of every tree.

The set-up of ``tests/inference/treefn/test_treefn_exact.py::test_one_tree_function_at_its_defaults_matches_enumeration``
over more data and sampler seeds: 9 rows, 2 features of 4 levels, depth <= 2, a Normal likelihood
with sigma known (0.7), the default prior, leaf sd and kernel, the default lengths (4 chains of
1,000 + 1,000). Per (data seed, sampler seed): the total variation distance of the posterior of
``n_leaves`` from the enumeration, the bulk ESS of the indicator ``n_leaves == 2``, and the fit's
wall time (the first fit of a process includes compiling what later fits find in the caches).

Usage::

    python benchmarks/treefn_one_tree.py --data-seeds 0 20 --sampler-seeds 0 1
    python benchmarks/treefn_one_tree.py --likelihood poisson --data-seeds 0 20 [--grow-prune]
    python benchmarks/treefn_one_tree.py --data-seeds 3 4 --sampler-seeds $(seq 0 31) --moves 0.25 0.25 0.3 0.1 0.1
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

import arviz as az
import numpy as np
import numpyro
import numpyro.distributions as dist
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "inference" / "treefn"))   # the suite's cases and enumeration
from test_treefn_exact import MAX_DEPTH, Q, _enumerate, _exact, _one_tree_data, _one_tree_poisson, _tv  # noqa: E402

import bayestrees as bt  # noqa: E402
from bayestrees.inference.treefn import kernel as treefn_kernel  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-seeds", type=int, nargs=2, default=(0, 5), metavar=("FIRST", "STOP"))
    ap.add_argument("--sampler-seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--particles", default="auto", help='"auto" (the default kernel) or an integer')
    ap.add_argument("--likelihood", choices=("normal", "poisson"), default="normal",
                    help="normal: sigma known (the conjugate path); poisson: counts with a log link (the general "
                         "path), the set-up of test_one_tree_poisson_function_at_its_defaults_matches_enumeration")
    ap.add_argument("--grow-prune", action="store_true",
                    help="the one-tree moves without change and swap (grow and prune 0.5 / 0.5)")
    ap.add_argument("--moves", type=float, nargs="+", default=None, metavar="P",
                    help="the one-tree move probabilities instead of the default (grow, prune, change, swap[, rotate])")
    ap.add_argument("--local-moves", type=int, default=None, metavar="K",
                    help="the one-tree moves a step instead of the default (ONE_TREE_MOVE_COUNT)")
    a = ap.parse_args()
    if a.local_moves:
        treefn_kernel.ONE_TREE_MOVE_COUNT = a.local_moves
    if a.grow_prune:
        treefn_kernel.ONE_TREE_MOVES = (0.5, 0.5, 0.0, 0.0)
    if a.moves:
        treefn_kernel.ONE_TREE_MOVES = tuple(a.moves)
    particles = a.particles if a.particles == "auto" else int(a.particles)
    sigma, sd = 0.7, 1.5
    rows = []
    t0 = time.perf_counter()
    for data_seed in range(*a.data_seeds):
        if a.likelihood == "poisson":
            X, y, want, model = _one_tree_poisson(data_seed)
        else:
            X, codes, y = _one_tree_data(data_seed)

            def log_leaf(r):
                k = len(r)
                cov = sigma ** 2 * np.eye(k) + sd ** 2 * np.ones((k, k))
                return stats.multivariate_normal(np.zeros(k), cov).logpdf(y[r])

            want, _ = _exact(_enumerate(codes, alpha=0.95, beta=2.0), log_leaf, n=len(y))

            def model(X, y=None):
                f = bt.tree_function("f", X, max_depth=MAX_DEPTH, min_leaf_rows=Q)
                numpyro.sample("y", dist.Normal(f, sigma), obs=y)

        for seed in a.sampler_seeds:
            t_fit = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fit = bt.sample_model(model, X, y, random_seed=seed, particles=particles, log_likelihood=False)
            t_fit = time.perf_counter() - t_fit
            nl = np.asarray(fit.idata.posterior["f_n_leaves"])[..., 0]
            ess = float(az.ess(az.convert_to_dataset({"x": (nl == 2).astype(float)}))["x"])
            tv = _tv(Counter(nl.ravel().tolist()), want)
            rows.append((data_seed, seed, tv, ess))
            print(f"data seed {data_seed} sampler seed {seed}: TV {tv:.3f}, bulk ESS of 1[n_leaves = 2] {ess:.0f}, "
                  f"fit {t_fit:.1f} s", flush=True)
    tv = np.array([r[2] for r in rows])
    print(f"worst TV {tv.max():.3f}, median {np.median(tv):.3f}, mean {tv.mean():.4f}, above 0.03: "
          f"{int(np.sum(tv > 0.03))} of {len(tv)}; {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
