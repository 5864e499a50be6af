"""``dtype="float64"`` for Bayesian CART and BET, in a subprocess with ``JAX_ENABLE_X64=1``.

x64 mode is global to a JAX process, so the float64 fits run in a child process and this process
(the rest of the suite) stays in float32; the float32 fits, the reference, run here, as a user
without x64 runs them.

What the two dtypes share, checked on these fits (seed 0, 4 chains):

* **Bayesian CART draws the same trees.**  Its tree updates (particle Gibbs, the default scheme)
  read their uniforms from ``bayestrees.random_bits`` in float32 whatever the dtype, and
  the leaf parameters are integrated out of their weights and acceptance ratios, so the two runs take
  the same decisions unless a log weight or log acceptance ratio falls within float32 rounding
  (about 1e-6) of its threshold, a chance of order 1e-6 per decision: every kept tree is the same
  in both runs.  The leaf parameters (``sigma``, ``mu``) are drawn with
  dtype-specific samplers, so they are other draws from the same conditional distributions given
  the same trees: their means agree within 5 standard errors of the difference of two independent
  means (``sqrt(var_64 / N + var_32 / N)``; the draws are correlated along a chain through the
  trees, which both runs share, so that error is an upper bound).
* **BET draws other chains** (the clustering step uses the drawn leaf parameters, which differ from
  the first step on; the initial allocation differs too, as ``jax.random.randint`` draws at the
  default integer width, 64 bits under x64), so the float64 run agrees with the float32 one in distribution only: the
  posterior mean of the ensemble prediction at two points and of the number of occupied components
  agree within 5 standard errors of the difference, each run's error taken from its 4 chain means
  (``sd(chain means) / sqrt(4)``).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import jax
import numpy as np
import pytest

import bayestrees as bt
from bayestrees.convergence import ConvergenceWarning

ROOT = Path(__file__).resolve().parents[2]
POINTS = [[0.0, 0.5], [0.75, 0.5]]          # one point on each side of the split at 0.5


def _data(n: int = 60, seed: int = 0):
    """The regression data of ``test_predict_interval.py`` (and settings as there, apart from the chain
    lengths, which are traced: the float32 fits reuse the programs compiled for those tests)."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, 2))
    X[:, 0] = rng.integers(0, 6, n) / 6
    return X, 10.0 + np.where(X[:, 0] < 0.5, -1.0, 1.0) + 0.5 * X[:, 1] + 0.4 * rng.normal(size=n)


#: particle Gibbs, whose decisions on these data are far from ties at either precision, so the two dtypes
#: draw the same trees; the default ladder's exchanges compare whole log likelihoods, where float32's
#: rounding flips a near-tie decision now and then (1.9% of the tree entries differed at the defaults)
BCART = dict(draws=300, tune=100, chains=4, max_depth=2, max_bins=6, random_state=0, scheme="pgibbs")
BET = dict(draws=300, tune=100, chains=4, max_trees=3, active_trees=3, init_trees=2, min_leaf_rows=3, max_depth=2,
           max_bins=6, random_state=0)

_SCRIPT = r'''
import json, sys, warnings
import jax
import numpy as np
sys.path.insert(0, "tests/inference")
import test_float64_mcmc as T

assert jax.config.jax_enable_x64, "the child process runs with JAX_ENABLE_X64=1"
warnings.simplefilter("ignore")
print(json.dumps(T.fit_both("float64")))
'''


def _dtypes(ds) -> dict:
    return {k: str(ds[k].dtype) for k in ds.data_vars}


def fit_both(dtype: str) -> dict:
    """Fit the Bayesian CART and BET regressors at ``dtype``: their dtypes and summaries (JSON-able)."""
    X, y = _data()
    bc = bt.BayesianCARTRegressor(dtype=dtype, **BCART).fit(X, y)
    be = bt.BETRegressor(dtype=dtype, **BET).fit(X, y)
    out = {}
    for name, est in (("bcart", bc), ("bet", be)):
        idata = est.idata_
        out[name] = {
            "posterior": _dtypes(idata.posterior), "sample_stats": _dtypes(idata.sample_stats),
            "log_likelihood": str(idata.log_likelihood["y"].dtype), "trees_value": str(idata.trees["value"].dtype),
            "result_value": str(np.asarray(est.trees_.value).dtype),
            "predict": str(np.asarray(est.predict(POINTS)).dtype),
            # per chain: posterior mean of the prediction at POINTS
            "chain_pred": np.asarray(est.predict_draws(POINTS)).reshape(est.chains, -1, len(POINTS)).mean(1).tolist(),
        }
    tr = bc.trees_
    out["bcart"].update(feature=np.asarray(tr.feature).tolist(), threshold=np.asarray(tr.threshold).tolist(),
                        left=np.asarray(tr.left).tolist(), sigma=bc.idata_.posterior["sigma"].values.tolist(),
                        mu=bc.idata_.posterior["mu"].values[..., :3].tolist())
    out["bet"]["chain_components"] = be.n_components_.mean(1).tolist()
    return out


@pytest.fixture(scope="module")
def runs():
    env = dict(os.environ, JAX_ENABLE_X64="1")
    res = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, cwd=ROOT, env=env,
                         timeout=600)
    assert res.returncode == 0, res.stderr[-4000:]
    f64 = json.loads(res.stdout.strip().splitlines()[-1])
    assert not jax.config.jax_enable_x64           # this process stays in float32
    with warnings.catch_warnings():   # short chains: ConvergenceWarning; BET's slice past max_trees: RuntimeWarning
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        f32 = fit_both("float32")
    return f64, f32


def test_float64_fits_keep_every_posterior_array_in_float64(runs):
    f64, f32 = runs
    for name in ("bcart", "bet"):
        for want, got in ((np.float64, f64[name]), (np.float32, f32[name])):
            want = np.dtype(want).name
            floats = {k: v for k, v in got["posterior"].items() if k not in ("n_leaves", "depth", "split_counts",
                                                                            "n_trees", "n_components", "Z")}
            assert floats and set(floats.values()) == {want}, (name, got["posterior"])
            assert got["log_likelihood"] == want and got["trees_value"] == want and got["result_value"] == want
            assert got["sample_stats"]["lp"] == want, (name, got["sample_stats"])
    assert {"sigma", "mu"} <= set(f64["bcart"]["posterior"])
    assert {"w", "xi", "xi_bar", "mu"} <= set(f64["bet"]["posterior"])


def test_bcart_float64_draws_the_same_trees_and_leaf_parameters_from_the_same_law(runs):
    f64, f32 = runs
    for field in ("feature", "threshold", "left"):
        np.testing.assert_array_equal(np.asarray(f64["bcart"][field]), np.asarray(f32["bcart"][field]))
    left = np.asarray(f64["bcart"]["left"])
    assert len({tuple(t) for t in left.reshape(-1, left.shape[-1])}) > 1     # the chains moved between trees
    for what in ("sigma", "mu"):
        a, b = (np.asarray(r["bcart"][what], np.float64) for r in (f64, f32))
        assert not np.array_equal(a, b)                                     # other draws ...
        a, b = a.reshape(-1, *a.shape[2:]), b.reshape(-1, *b.shape[2:])
        se = np.sqrt(a.var(0) / len(a) + b.var(0) / len(b))
        assert np.all(np.abs(a.mean(0) - b.mean(0)) < 5 * se), (what, a.mean(0), b.mean(0), se)   # ... same law


def test_bet_float64_agrees_with_float32_in_distribution(runs):
    f64, f32 = runs
    for what in ("chain_pred", "chain_components"):
        a, b = (np.asarray(r["bet"][what], np.float64) for r in (f64, f32))   # (chains[, points])
        se = np.sqrt(a.var(0, ddof=1) / len(a) + b.var(0, ddof=1) / len(b))
        assert np.all(np.abs(a.mean(0) - b.mean(0)) < 5 * se), (what, a.mean(0), b.mean(0), se)
    pred = np.asarray(f64["bet"]["chain_pred"]).mean(0)
    assert pred[0] < 10 < pred[1]                                            # both sides of the split found


@pytest.mark.parametrize("make", [lambda: bt.BayesianCARTRegressor(dtype="float64", draws=5, tune=5),
                                  lambda: bt.BETRegressor(dtype="float64", draws=5, tune=5)], ids=["bcart", "bet"])
def test_float64_without_x64_is_refused(make):
    X, y = _data()
    with pytest.raises(ValueError, match="jax_enable_x64"):
        make().fit(X, y)
