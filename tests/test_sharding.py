"""Chains, trees and exact draws split across devices (two CPU devices in a subprocess).

The same script runs here (one device) and in a subprocess that sees two CPU devices: the
results must be the same numbers, and in the subprocess the batch axis must live on both devices.
"""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np

SCRIPT = textwrap.dedent("""
    import json
    import jax, jax.numpy as jnp, numpy as np
    import bayestrees as bt
    from bayestrees.inference import moves as M
    from bayestrees.inference.loop import run_chains
    from bayestrees.inference.pcfg.fit import fit_posterior
    from bayestrees.leaves import NIGPrior, NormalLeaves

    rng = np.random.default_rng(0)
    n = 40
    codes = rng.integers(0, 5, (n, 2))
    y = (codes[:, 0] + rng.normal(0, 0.5, n)).astype(np.float32)
    out = {"devices": jax.device_count()}

    # MCMC chains
    model = NormalLeaves(NIGPrior(0.0, 0.5, 2.0, 1.0))
    cfg = M.MCMCConfig(bt.priors.ChipmanPrior(0.95, 1.0), model, 3, 2)
    data = M.MCMCData(jnp.asarray(codes, jnp.int32), jnp.asarray(y), model.row_stats(jnp.asarray(y)),
                      jnp.ones(n, jnp.float32))
    res = run_chains(jax.random.key(0), M.build_kernel(cfg), args=(data,), chains=4, draws=20, tune=10,
                     collect=M.collect(cfg), chain_method="vectorized")
    out["chains_lp"] = np.asarray(res.samples.lp).tolist()
    out["chains_mu"] = np.asarray(res.samples.mu).ravel().tolist()
    out["chains_on"] = len(res.last_state.tree.feature.sharding.device_set)
    if jax.device_count() > 1:  # the same chains, each on its own (in threads, chain c on device c mod k)
        res = run_chains(jax.random.key(0), M.build_kernel(cfg), args=(data,), chains=4, draws=20, tune=10,
                         collect=M.collect(cfg), chain_method="parallel")
        out["parallel_lp"] = np.asarray(res.samples.lp).tolist()

    # a forest: trees of one compiled chunk
    X = codes.astype(float) + rng.random((n, 2)) * 0.1
    f = bt.BayesianForestRegressor(draws=8, random_state=0).fit(X, y)
    out["forest_draws"] = np.asarray(f.predict_draws(X[:10])).ravel().tolist()

    # exact PCFG draws
    yc = (codes[:, 0] >= 2).astype(np.int32)
    post = fit_posterior(codes, np.full(2, 5), yc, kind="classification", log_phi=2.0, alpha=1.0, n_classes=2)
    trees, logp = post.sample(jax.random.key(1), 8)
    out["pcfg_logp"] = np.asarray(logp).tolist()
    out["pcfg_feature"] = np.asarray(trees.feature).ravel().tolist()
    out["pcfg_on"] = len(trees.feature.sharding.device_set)
    print("RESULT" + json.dumps(out))
""")


def _here():
    """The script in this process (one device, as the suite runs)."""
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(SCRIPT, {"__name__": "sharding_script"})
    line = [x for x in buf.getvalue().splitlines() if x.startswith("RESULT")][-1]
    return json.loads(line[len("RESULT"):])


def _run(env_extra):
    env = dict(os.environ, **env_extra)
    p = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    line = [x for x in p.stdout.splitlines() if x.startswith("RESULT")][-1]
    return json.loads(line[len("RESULT"):])


def test_two_devices_split_the_batch_and_change_nothing():
    import jax

    if jax.device_count() != 1:
        import pytest

        pytest.skip("compares against a one-device run in this process")
    # the one-device reference runs on the CPU too (on a GPU machine this process computes on the GPU)
    one = _here() if jax.default_backend() == "cpu" else _run({"JAX_PLATFORMS": "cpu"})
    two = _run({"XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=2".strip(),
                "JAX_PLATFORMS": "cpu"})
    assert one["devices"] == 1 and two["devices"] == 2
    # the batch axis lives on both devices
    assert one["chains_on"] == 1 and two["chains_on"] == 2
    assert one["pcfg_on"] == 1 and two["pcfg_on"] == 2
    # and the numbers are the same (independent members, each with its own key)
    for k in ("chains_lp", "chains_mu", "forest_draws", "pcfg_logp", "pcfg_feature"):
        np.testing.assert_allclose(two[k], one[k], rtol=1e-6, atol=1e-6, err_msg=k)
    # chains run one by one in threads, spread over the two devices, draw what the vmapped chains draw
    np.testing.assert_allclose(two["parallel_lp"], one["chains_lp"], rtol=1e-6, atol=1e-6)


def test_one_device_leaves_arrays_alone():
    import jax
    import jax.numpy as jnp

    from bayestrees.sharding import batch_devices, shard_batch

    x = {"a": jnp.arange(8.0), "b": jnp.zeros(())}
    if jax.device_count() == 1:
        assert batch_devices(8) == 1
        assert shard_batch(x) is x
    else:  # a machine with several devices: odd lengths are not split
        assert batch_devices(jax.device_count() * 2 + 1) == 1
