"""The first fit of a fresh process for the MCMC families, the persistent compilation cache off.

Each run is a new Python process with ``BAYESTREES_COMPILATION_CACHE=0`` and
``JAX_ENABLE_COMPILATION_CACHE=false`` (every program compiled), at XLA's default flags, that fits
one workload once and prints its wall time and the XLA compilation time of the chain loop's block
(``jax_log_compiles``):

* ``bart``: ``bt.BARTRegressor`` (``m = 200``), 1,024 rows, 100 features (Friedman's function of 5),
  one chain of 50 + 50 steps;
* ``bart_probit``: ``bt.BARTClassifier``, 300 rows, 5 features, one chain of 50 + 50;
* ``bcart``, ``bet``: ``bt.BayesianCARTRegressor``, ``bt.BETRegressor`` at their defaults but the
  lengths, 300 rows, 5 features (a step plus a quadratic), 2 chains of 20 + 20;
* ``bcf``: ``bt.BCFRegressor`` (200 + 50 trees), 300 rows, 5 covariates, the true propensity given,
  2 chains of 50 + 50;
* ``one_tree``: ``bt.tree_function`` in a Normal model with sigma known, 9 rows, 2 features of 4
  levels, depth <= 2, ``bt.sample_model`` with 2 chains of 20 + 20 (the one-tree kernel: 50 local
  moves and a particle Gibbs regrowth a step).

``--library PATH`` puts another checkout first on ``PYTHONPATH`` (a worktree of an earlier commit,
``git worktree add ../bayestrees-before <commit>``; a path relative to the working directory); the
fits alternate between the present checkout and those, ``--rounds`` times.

    python benchmarks/mcmc_first_fit.py --rounds 2
    python benchmarks/mcmc_first_fit.py --library ../bayestrees-before --rounds 2
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import io, logging, re, sys, time, warnings
import numpy as np
import jax
jax.config.update("jax_log_compiles", True)
buf = io.StringIO()
logging.getLogger("jax").addHandler(logging.StreamHandler(buf))
logging.getLogger("jax").setLevel(logging.WARNING)
warnings.simplefilter("ignore")
import numpyro, numpyro.distributions as dist
import bayestrees as bt
work = sys.argv[1]
rng = np.random.default_rng(0)
t0 = time.perf_counter()
if work in ("bart", "bart_probit"):
    X = rng.uniform(size=(1024, 100))
    y = 10 * np.sin(np.pi * X[:, 0] * X[:, 1]) + 20 * (X[:, 2] - 0.5) ** 2 + 10 * X[:, 3] + 5 * X[:, 4]
    y = y + rng.normal(size=1024)
    if work == "bart":
        bt.BARTRegressor(chains=1, draws=50, tune=50, random_state=0).fit(X, y)
    else:
        bt.BARTClassifier(chains=1, draws=50, tune=50, random_state=0).fit(X[:300, :5], (y[:300] > 14).astype(int))
elif work == "bcf":
    X = rng.normal(size=(300, 5))
    pi = 1 / (1 + np.exp(-X[:, 0]))
    z = (rng.uniform(size=300) < pi).astype(int)
    y = 1 + X[:, 1] + (1 + X[:, 2] > 0) * z + rng.normal(size=300)
    bt.BCFRegressor(chains=2, draws=50, tune=50, random_state=0).fit(X, y, z, pihat=pi)
elif work in ("bcart", "bet"):
    X = rng.uniform(size=(300, 5))
    y = 2.0 * (X[:, 2] > 0.3) + 4.0 * (X[:, 0] - 0.5) ** 2 + 0.3 * rng.normal(size=300)
    est = bt.BayesianCARTRegressor if work == "bcart" else bt.BETRegressor
    est(chains=2, draws=20, tune=20, random_state=0).fit(X, y)
else:
    codes = rng.integers(0, 4, size=(9, 2))
    X = codes * 1.5 - 2.0
    y = (np.where(codes[:, 0] >= 2, 1.0, -1.0) + 0.7 * rng.normal(size=9)).astype(np.float32)
    def model(X, y=None):
        f = bt.tree_function("f", X, max_depth=2, min_leaf_rows=1)
        numpyro.sample("y", dist.Normal(f, 0.7), obs=y)
    bt.sample_model(model, X, y, draws=20, tune=20, chains=2, random_seed=0, log_likelihood=False)
wall = time.perf_counter() - t0
block = sum(float(x) for x in re.findall(r"Finished XLA compilation of jit\(_block\) in ([0-9.e-]+) sec", buf.getvalue()))
print(f"RESULT {wall:.2f} {block:.2f}")
"""


def run(work: str, library: str | None) -> tuple[float, float]:
    env = dict(os.environ, BAYESTREES_COMPILATION_CACHE="0", JAX_ENABLE_COMPILATION_CACHE="false")
    env.pop("XLA_FLAGS", None)
    if library:   # the child runs outside the checkout (so that it does not import this one): an absolute path
        env["PYTHONPATH"] = str(Path(library).resolve()) + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", CHILD, work], env=env, cwd="/" if library else ROOT,
                         capture_output=True, text=True, check=True).stdout
    wall, block = re.search(r"RESULT (\S+) (\S+)", out).groups()
    return float(wall), float(block)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", nargs="+", default=["bart", "bart_probit", "bcart", "bet", "bcf", "one_tree"])
    ap.add_argument("--library", nargs="*", default=[], help="other checkouts to compare (PYTHONPATH)")
    ap.add_argument("--rounds", type=int, default=1)
    a = ap.parse_args(argv)
    versions = [None] + list(a.library)
    for r in range(a.rounds):
        for work in a.work:
            for lib in versions:
                wall, block = run(work, lib)
                print(f"round {r} {work:12s} {lib or 'this checkout':24s} first fit {wall:6.2f} s, "
                      f"the block's compilation {block:6.2f} s", flush=True)


if __name__ == "__main__":
    main()
