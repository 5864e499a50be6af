"""Seconds of sampling of the Poisson BART model of ``treefn_pymc_bart.py`` (m = 50 trees, log link,
offset ``log(mean(y))``), our side only: for timing changes to the tree functions' kernel.

The same model and log rate (Friedman's function of the first 5 features, scaled to log rates in
[-1, 2]: ``treefn_pymc_bart.true_log_rate``), the features uniform (``--features``: 5 as in
``treefn_pymc_bart.py``, or more, unused by the rate); ``bt.sample_model`` is called twice with the same
sizes (different seeds) and the second call is timed: ``sampling`` is ``ModelFit.seconds`` (NumPyro's
run, waited for), ``call`` the whole call, ``cpu`` this process's CPU seconds in the call.

To compare two versions of the library, run the script once per version, with ``PYTHONPATH`` set to a
worktree of the other commit for it (the first line printed names the folder imported), on the same
machine one after the other::

    python benchmarks/treefn_step_speed.py --n 1000 --features 10 --chains 4 --steps 1000 --leaf-prior loggamma
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--steps", type=int, default=1000, help="tune = draws = STEPS")
    ap.add_argument("--m", type=int, default=50)
    ap.add_argument("--features", type=int, default=None, help="uniform features (default: treefn_pymc_bart's 5)")
    ap.add_argument("--leaf-prior", default="loggamma", choices=["normal", "loggamma"])
    ap.add_argument("--chain-method", default="vectorized", choices=["vectorized", "sequential"])
    a = ap.parse_args()

    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    import bayestrees as bt
    from treefn_pymc_bart import N_FEATURES, true_log_rate

    rng = np.random.default_rng(0)
    X = rng.uniform(size=(a.n, a.features or N_FEATURES))
    y = rng.poisson(np.exp(true_log_rate(X))).astype(float)
    c = float(np.log(y.mean()))

    def model(X, y=None):
        g = bt.bart_function("f", X, m=a.m, leaf_prior=a.leaf_prior)
        numpyro.sample("y", dist.Poisson(jnp.exp(c + g)), obs=y)

    kw = dict(draws=a.steps, tune=a.steps, chains=a.chains, chain_method=a.chain_method, log_likelihood=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bt.sample_model(model, X, y=y, random_seed=1, **kw)
        load = os.getloadavg()[0]
        t0, c0 = time.perf_counter(), time.process_time()
        fit = bt.sample_model(model, X, y=y, random_seed=0, **kw)
        call, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"bayestrees from {Path(bt.__file__).resolve().parent.parent.name}/: n={a.n} m={a.m} {a.leaf_prior} "
          f"p={X.shape[1]} {a.chains} x ({a.steps} + {a.steps}) {a.chain_method}: sampling {fit.seconds:.2f} s, call {call:.2f} s, "
          f"cpu {cpu:.2f} s; load {load:.1f} -> {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
