"""The NumPyro MCMCKernel adapter runs the Bayesian CART kernel with chain_method="vectorized"."""
import jax
import jax.numpy as jnp
import numpy as np
from numpyro.infer import MCMC

from bayestrees.inference import moves as M
from bayestrees.inference.numpyro_adapter import NumPyroKernel
from bayestrees.leaves import DirichletLeaves
from bayestrees.priors import LeafCountPrior


def _summary(state):
    return {"n_leaves": jnp.sum(state.tree.is_leaf()), "lp": state.ev.log_lik + state.ev.log_prior}


def test_vectorized_chains_under_numpyro():
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 4, size=(30, 2))
    y = (codes[:, 0] >= 2).astype(np.int32)
    model = DirichletLeaves(2, 1.0)
    cfg = M.MCMCConfig(LeafCountPrior(1.0), model, 3, 2)
    data = M.MCMCData(jnp.asarray(codes, jnp.int32), jnp.asarray(y), model.row_stats(y), jnp.ones(30))
    kernel = M.build_kernel(cfg)
    mcmc = MCMC(NumPyroKernel(kernel, args=(data,), summary=_summary), num_warmup=20, num_samples=50,
                num_chains=3, chain_method="vectorized", progress_bar=False)
    mcmc.run(jax.random.key(0))
    s = mcmc.get_samples(group_by_chain=True)
    assert s["n_leaves"].shape == (3, 50)
    # the adapter runs exactly the library's kernel: replay each chain by hand with NumPyro's keys
    step = jax.jit(kernel.step)
    for c, key in enumerate(jax.random.split(jax.random.key(0), 3)):
        k_init, key = jax.random.split(key)
        st = kernel.init(k_init, data)
        lps = []
        for _ in range(70):
            k_step, key = jax.random.split(key)
            st, _ = step(k_step, st, data)
            lps.append(float(st.ev.log_lik + st.ev.log_prior))
        np.testing.assert_allclose(np.asarray(s["lp"][c]), lps[20:], rtol=1e-5)
