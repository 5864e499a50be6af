"""A model pymc-bart cannot run in reasonable time: a linear part, group intercepts and BART (issue 30).

    y_i = z_i . beta + a_{g(i)} + f(x_i) + e_i,   e_i ~ N(0, sigma^2),
    beta ~ N(0, 1),  a_g ~ N(0, tau^2), tau ~ HalfNormal(1),
    f = a sum of m trees (bt.bart_function), sigma ~ HalfNormal(1).

The group intercepts are centred by default (``--param centred``): with n / groups = 2,000 rows a
group each ``a_g`` is pinned by its data (posterior sd about 0.02 against tau = 0.5), where the
non-centred form (``a_g = tau a_raw_g``, ``a_raw ~ N(0, 1)``; ``--param noncentred``) puts a narrow
ridge between ``tau`` and ``a_raw`` that NUTS can only cross with a tiny step size.

The coefficients, the group intercepts and their scale are NUTS's, the trees the library's tree
moves (here the conjugate path: the observation is Normal and f enters its mean additively), in
NumPyro's MCMC.  Prints and writes (benchmarks/results/treefn_large.jsonl): the compile time (a
short run of the same shapes first), the time to ``--tune`` + ``--draws`` steps per chain, R-hat and
bulk ESS of every coefficient and of sigma, and the posterior means against the truth.

    python benchmarks/treefn_large.py                       # n = 100,000, 4 chains, 1,000 + 1,000
    python benchmarks/treefn_large.py --n 10000 --draws 200 --tune 200
"""
from __future__ import annotations

import argparse
import os
import time
import warnings

import numpy as np


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--m", type=int, default=50)
    ap.add_argument("--groups", type=int, default=50)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--tune", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--param", choices=["centred", "noncentred"], default="centred",
                    help="the group intercepts' parametrisation")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "treefn_large.jsonl"))
    a = ap.parse_args(argv)

    import arviz as az
    import jax
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    import bayestrees as bt
    from forest_common import append_jsonl

    rng = np.random.default_rng(a.seed)
    n, G = a.n, a.groups
    X = rng.uniform(size=(n, 5))
    Z = rng.normal(size=(n, 3))
    g = rng.integers(0, G, n)
    beta_true = np.array([0.5, -1.0, 0.3])
    tau_true, sigma_true = 0.5, 1.0
    a_true = tau_true * rng.normal(size=G)
    f_true = 10 * np.sin(np.pi * X[:, 0] * X[:, 1]) + 20 * (X[:, 2] - 0.5) ** 2 + 10 * X[:, 3] + 5 * X[:, 4]
    f_true = (f_true - f_true.mean()) / f_true.std()
    y = Z @ beta_true + a_true[g] + f_true + sigma_true * rng.normal(size=n)
    leaf_sd = float(0.5 * (y.max() - y.min()) / (2.0 * np.sqrt(a.m)))

    def model(X, Z, g, y=None):
        beta = numpyro.sample("beta", dist.Normal(0.0, 1.0).expand([Z.shape[1]]).to_event(1))
        tau = numpyro.sample("tau", dist.HalfNormal(1.0))
        if a.param == "centred":
            a_g = numpyro.sample("a", dist.Normal(0.0, tau).expand([G]).to_event(1))
        else:
            a_g = tau * numpyro.sample("a_raw", dist.Normal(0.0, 1.0).expand([G]).to_event(1))
        sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
        f = bt.bart_function("f", X, m=a.m, leaf_sd=leaf_sd)
        numpyro.sample("y", dist.Normal(Z @ beta + a_g[g] + f, sigma), obs=y)

    args = (X, Z, g)
    kw = dict(chains=a.chains, random_seed=a.seed, log_likelihood=False)
    warnings.simplefilter("ignore")
    t0 = time.perf_counter()
    bt.sample_model(model, *args, y=y, draws=2, tune=2, **kw)          # compiles the same programs
    first = time.perf_counter() - t0
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    fit = bt.sample_model(model, *args, y=y, draws=a.draws, tune=a.tune, **kw)
    seconds = time.perf_counter() - t0
    load1 = os.getloadavg()[0]
    post = fit.idata.posterior
    names = [f"beta[{j}]" for j in range(3)] + ["tau", "sigma"]
    arrays = [post["beta"].values[..., j] for j in range(3)] + [post["tau"].values, post["sigma"].values]
    truth = list(beta_true) + [tau_true, sigma_true]
    rows = []
    print(f"n={n} m={a.m} groups={G} chains={a.chains} tune={a.tune} draws={a.draws} param={a.param} "
          f"device={jax.devices()[0]}")
    print(f"first (compiling) run of 2 + 2 steps: {first:.1f} s; timed run: {seconds:.1f} s "
          f"({seconds / (a.tune + a.draws) * 1e3:.1f} ms a step of all chains); load {load0:.1f} / {load1:.1f}")
    print(f"{'site':<9} {'truth':>7} {'mean':>8} {'sd':>7} {'R-hat':>7} {'ESS bulk':>9}")
    for name, x, t in zip(names, arrays, truth):
        ds = az.convert_to_dataset({"x": np.asarray(x, float)})
        rhat = float(az.rhat(ds)["x"]) if a.chains > 1 else float("nan")
        ess = float(az.ess(ds)["x"])
        rows.append(dict(site=name, truth=float(t), mean=float(x.mean()), sd=float(x.std()), rhat=rhat, ess_bulk=ess))
        print(f"{name:<9} {t:7.3f} {x.mean():8.3f} {x.std():7.3f} {rhat:7.3f} {ess:9.0f}")
    rmse_f = float(np.sqrt(np.mean((post["f"].values.mean((0, 1)) - f_true) ** 2)))
    print(f"RMSE of the posterior mean of f against the truth: {rmse_f:.3f} (f has sd 1)")
    append_jsonl(a.out, dict(benchmark="treefn_large", n=n, m=a.m, groups=G, chains=a.chains, tune=a.tune, param=a.param,
                             draws=a.draws, device=str(jax.devices()[0]), compile_run_s=first, seconds=seconds,
                             load=[load0, load1], sites=rows, rmse_f=rmse_f,
                             max_rhat=max(r["rhat"] for r in rows)))


if __name__ == "__main__":
    import sys

    sys.path.insert(0, os.path.dirname(__file__))
    main()
