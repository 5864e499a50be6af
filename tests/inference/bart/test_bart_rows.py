"""BART with the rows of each chain split across devices (``data_devices``).

The checks run in one subprocess that JAX starts with four CPU devices
(``--xla_force_host_platform_device_count=4``; the test process itself keeps one):

* the two-stump case of ``test_bart_sampler.py`` (8 rows, 2 trees of depth 1, all four moves, the leaf
  values and ``sigma^2`` sampled) on 4 devices, 2 rows each, against the exact enumeration of the pair of
  stumps and ``E[sigma^2]``, the thresholds of the one-device test;
* the same for a sum of two stumps in a NumPyro model (``sample_model(..., data_devices=4)``, the
  tree functions' conjugate Normal path) against its exact posterior;
* the estimators with rows that do not divide among the devices (padding): the draws' shapes hold the
  rows of the data, the regression's predictions and ``sigma`` follow the one-device fit's from the same
  seed (the same keys, sums in another order), and probit BART (whose latent draws differ per device)
  agrees with the one-device fit in its posterior mean probabilities.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]

_SCRIPT = r'''
import json, sys, warnings
import numpy as np
import jax
sys.path.insert(0, sys.argv[1])
assert jax.device_count() == 4, jax.devices()
import test_bart_sampler as T
import bayestrees as bt

out = {}
codes, y = T._two_stumps_data()
exact, exact_s2 = T._two_stumps_exact(codes, y)
for k in (4,):
    f, t, s2 = T._two_stumps_run(codes, y, chains=4, draws=25000, data_devices=k)
    out[f"stumps{k}"] = dict(tv=T._pairs_tv(T._unordered_pairs(f, t), exact), s2=float(s2.mean()),
                             mcse=T._mcse(s2), exact_s2=float(exact_s2))

sys.path.insert(0, sys.argv[2])
import test_treefn_exact as TE
warnings.simplefilter("ignore")
out["treefn4"] = TE._two_stumps_function_tv(True, data_devices=4)[0]
try:
    TE._two_stumps_function_tv(False, data_devices=4)
    out["treefn_general"] = None
except ValueError as e:
    out["treefn_general"] = str(e)

rng = np.random.default_rng(3)
X = rng.uniform(size=(101, 3))
y = np.sin(4 * X[:, 0]) + X[:, 1] + 0.2 * rng.normal(size=101)
labels = (X[:, 0] + 0.3 * rng.normal(size=101) > 0.5).astype(int)
warnings.simplefilter("ignore")
for k in (1, 2, 4):
    reg = bt.BARTRegressor(m=10, chains=2, tune=5, draws=5, random_state=0, data_devices=k).fit(X, y)
    out[f"fit{k}"] = dict(mu_shape=list(reg.idata_.posterior["mu"].shape), predict=reg.predict(X[:7]).tolist(),
                          sigma=reg.idata_.posterior["sigma"].values.ravel().tolist())
    if k < 4:   # probit: its latents drawn on each device
        clf = bt.BARTClassifier(m=10, chains=4, tune=200, draws=300, random_state=0, data_devices=k).fit(X, labels)
        out[f"fit{k}"].update(proba=clf.predict_proba(X[:20])[:, 1].tolist(),
                              proba_mcse=[T._mcse(clf.predict_draws(X[i:i + 1])[:, 0, 1].reshape(4, 300))
                                          for i in range(20)],
                              proba_shape=list(clf.idata_.posterior["mu"].shape))
import bayestrees.inference.bart.kernel as K
K._BATCH_ROWS = 0   # every grow's left child summed in its visit (with several devices: one sum with the leaves')
for k in (1, 2):   # m = 12: a kernel setting not compiled above, so traced again with _BATCH_ROWS = 0
    reg = bt.BARTRegressor(m=12, chains=2, tune=5, draws=5, random_state=0, data_devices=k).fit(X, y)
    out[f"unbatched{k}"] = dict(predict=reg.predict(X[:7]).tolist(),
                                sigma=reg.idata_.posterior["sigma"].values.ravel().tolist())
try:
    bt.BARTRegressor(m=10, chains=1, tune=1, draws=1, data_devices=8).fit(X, y)
    out["too_many"] = None
except ValueError as e:
    out["too_many"] = str(e)
print("RESULT " + json.dumps(out))
'''


@pytest.fixture(scope="module")
def four_devices():
    env = dict(os.environ)   # the suite's XLA flags (compiling is most of the time here) and compilation cache
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4").strip()
    res = subprocess.run([sys.executable, "-c", _SCRIPT, str(HERE), str(HERE.parent / "treefn")], capture_output=True,
                         text=True, cwd=ROOT,
                         env=env, timeout=900)
    assert res.returncode == 0, res.stderr[-4000:]
    line = [s for s in res.stdout.splitlines() if s.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


@pytest.mark.slow
@pytest.mark.parametrize("k", [4])
def test_rows_on_several_devices_match_the_exact_two_stump_posterior(four_devices, k):
    """The kernel with its rows on ``k`` devices (the leaves' sums, the grown child's rows and
    ``sum w R^2`` added across them) against the exact posterior of the pair of stumps and of
    ``sigma^2``: the thresholds of ``test_two_stumps_and_sigma_match_exact_enumeration``."""
    r = four_devices[f"stumps{k}"]
    assert r["tv"] < 0.03, r
    assert abs(r["s2"] - r["exact_s2"]) < 4 * r["mcse"], r


@pytest.mark.slow
def test_a_tree_function_with_rows_on_four_devices_matches_the_exact_posterior(four_devices):
    """``sample_model(..., data_devices=4)``: a sum of two stumps in a Normal model with sigma fixed (the
    conjugate path, BART's step with its rows split), 8 rows, 2 a device, change and swap among the
    moves: the unordered pair of stumps against the exact posterior, the threshold of
    ``test_a_sum_of_two_stumps_with_change_and_swap_matches_enumeration``.  The general path, which
    does not split rows, says so."""
    assert four_devices["treefn4"] < 0.03, four_devices["treefn4"]
    assert four_devices["treefn_general"] is not None and "conjugate Normal path" in four_devices["treefn_general"]


@pytest.mark.slow
def test_estimators_split_rows_that_do_not_divide_and_follow_one_device(four_devices):
    """101 rows on 2 and 4 devices (padded with rows of no weight): the draws hold 101 rows; the
    regression from one seed follows the one-device chain (the same keys; sums in another order move
    float rounding only in 5 + 5 steps), also where each visit sums the grown node's rows itself (large
    data: one sum across the devices with the leaves'); probit BART on 2 devices (its latents drawn per device) agrees
    with one device in the posterior mean probabilities at 20 rows (4 x 300 draws each: within 4.5 Monte Carlo
    standard errors of the difference)."""
    one = four_devices["fit1"]
    for k in (2, 4):
        r = four_devices[f"fit{k}"]
        assert r["mu_shape"] == one["mu_shape"] == [2, 5, 101]
        np.testing.assert_allclose(r["predict"], one["predict"], rtol=1e-3, atol=1e-3)
        np.testing.assert_allclose(r["sigma"], one["sigma"], rtol=1e-3)
    u1, u2 = four_devices["unbatched1"], four_devices["unbatched2"]   # the visit's own pass over the grown node
    np.testing.assert_allclose(u2["predict"], u1["predict"], rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(u2["sigma"], u1["sigma"], rtol=1e-3)
    for k in (2,):
        r = four_devices[f"fit{k}"]
        assert r["proba_shape"] == one["proba_shape"] == [4, 300, 101, 2]
        gap = np.abs(np.asarray(r["proba"]) - np.asarray(one["proba"]))
        se = np.hypot(r["proba_mcse"], one["proba_mcse"])
        assert np.all(gap < 4.5 * se), (k, gap, se)
    assert four_devices["too_many"] is not None and "data_devices=8" in four_devices["too_many"]


def test_data_devices_is_checked_before_sampling():
    """Settings that cannot run say so: more devices than JAX sees, the regrowth on several devices."""
    import bayestrees as bt

    X, y = np.random.default_rng(0).uniform(size=(20, 2)), np.arange(20.0)
    with pytest.raises(ValueError, match="data_devices=2, but JAX sees 1"):
        bt.BARTRegressor(m=2, chains=1, tune=1, draws=1, data_devices=2).fit(X, y)
    with pytest.raises(ValueError, match="particles"):
        bt.BARTRegressor(m=2, chains=1, tune=1, draws=1, data_devices=2, particles=4).fit(X, y)
    with pytest.raises(ValueError, match="data_devices"):
        bt.BARTRegressor(m=2, chains=1, tune=1, draws=1, data_devices=0).fit(X, y)
