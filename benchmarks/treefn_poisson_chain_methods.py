"""A Poisson model with a sum of trees at n = 10,000 (issue 44's size), by how the chains run.

``y ~ Poisson(exp(offset + f(X)))``, ``bart_function`` with m = 50 (Normal leaves: the general path),
5 uniform features, ``log y = sin(3 x0) + x1``; ``bt.sample_model`` at its default lengths (4 chains of
1,000 + 1,000).  One JSON line per chain method given: the whole fit's wall seconds (compilation
included), ``ModelFit.seconds``, and the R-hat of the function's mean over the rows and of its total
leaves (the fit's convergence table).

    python benchmarks/treefn_poisson_chain_methods.py auto vectorized
"""
import sys, time, warnings, json
import numpy as np, jax.numpy as jnp, numpyro, numpyro.distributions as dist
import bayestrees as bt
warnings.simplefilter("ignore")
rng = np.random.default_rng(0); n = 10_000
X = rng.uniform(size=(n, 5)).astype(np.float32); y = rng.poisson(np.exp(np.sin(3 * X[:, 0]) + X[:, 1])).astype(np.float32)
off = float(np.log(y.mean()))
def model(X, y=None):
    f = bt.bart_function("f", X, m=50)
    numpyro.sample("y", dist.Poisson(jnp.exp(off + f)), obs=y)
for cm in sys.argv[1:]:
    t = time.perf_counter()
    fit = bt.sample_model(model, X, y=y, random_seed=0, chain_method=cm, log_likelihood=False)
    c = fit.convergence.table
    print(json.dumps(dict(method=cm, wall_s=round(time.perf_counter() - t, 1), seconds=round(fit.seconds, 1),
                          rhat_f_mean=round(float(c["f_mean"]["rhat"]), 3), rhat_leaves=round(float(c["f_leaves"]["rhat"]), 3))), flush=True)
