"""Issue 30: a second ``bt.sample_model`` call with a new ``y`` (same shapes): compilations and time.

Three small models of user-written NumPyro code with a tree function (60 rows, 3 features, m = 5):

* ``normal``: ``y ~ Normal(f(X), 0.3)``, the tree moves' conjugate path, no NUTS site;
* ``poisson``: ``y ~ Poisson(exp(f(X)))``, the general path, no NUTS site;
* ``nuts``: ``y ~ Normal(b x_0 + f(X), sigma)`` with ``b`` and ``sigma`` by NUTS.

Per model: a first call with ``y``, a second with a new ``y`` (another draw of the same process),
both with the same seed.  Recorded per call: wall seconds of ``sample_model``, XLA compilations
(``/jax/core/compile/backend_compile_duration`` events not preceded by a persistent-cache hit) and
programs loaded from the persistent cache, each also for NumPyro's sampling loop
(``_fori_collect_loop``), the seconds of those compilations, and a SHA-256 of the draws (every
latent site, the sample stats, the pointwise log likelihood) to check that a change leaves them
bit-identical.

Usage (from the repository root)::

    python benchmarks/treefn_refit.py                     # XLA's defaults, no persistent cache
    python benchmarks/treefn_refit.py --xla suite         # the test suite's XLA flags (-O0)
    python benchmarks/treefn_refit.py --cache tmp         # a fresh persistent cache in a temporary folder
    python benchmarks/treefn_refit.py --cache tmp --jit-data   # sample_model(..., jit_data=True)

One JSON line per model on stdout.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--xla", choices=("default", "suite"), default="default")
    p.add_argument("--cache", choices=("off", "tmp"), default="off")
    p.add_argument("--models", default="normal,poisson,nuts")
    p.add_argument("--chains", type=int, default=2)
    p.add_argument("--chain-method", default="vectorized")
    p.add_argument("--steps", type=int, default=30, help="tune = draws = steps")
    p.add_argument("--jit-data", action="store_true", help="sample_model(..., jit_data=True)")
    a = p.parse_args(argv)
    if a.xla == "suite":
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0"
                                   " --xla_cpu_use_fusion_emitters=false").strip()
    os.environ["BAYESTREES_COMPILATION_CACHE"] = "0"
    import jax

    if a.cache == "tmp":
        jax.config.update("jax_compilation_cache_dir", tempfile.mkdtemp(prefix="treefn-refit-"))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    import jax.numpy as jnp
    import numpy as np
    import numpyro
    import numpyro.distributions as dist

    import bayestrees as bt

    def counts(log) -> dict:
        """Compilations and persistent-cache loads (bt.compile_cache.compile_log), the sampling loop's apart."""
        loop = [bool(e.name and "_fori_collect_loop" in e.name) for e in log]
        return {"compiles": sum(not e.loaded for e in log), "loop": sum(lp and not e.loaded for e, lp in zip(log, loop)),
                "loaded": sum(e.loaded for e in log), "loop_loaded": sum(lp and e.loaded for e, lp in zip(log, loop)),
                "compile_s": round(sum(e.seconds for e in log if not e.loaded), 2)}

    def normal(X, y=None):
        f = bt.bart_function("f", X, m=5, max_depth=3, min_leaf_rows=2, leaf_sd=0.3)
        numpyro.sample("y", dist.Normal(f, 0.3), obs=y)

    def poisson(X, y=None):
        f = bt.bart_function("f", X, m=5, max_depth=3, min_leaf_rows=2)
        numpyro.sample("y", dist.Poisson(jnp.exp(f)), obs=y)

    def nuts(X, y=None):
        b = numpyro.sample("b", dist.Normal(0.0, 1.0))
        sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
        f = bt.bart_function("f", X, m=5, max_depth=3, min_leaf_rows=2, leaf_sd=0.3)
        numpyro.sample("y", dist.Normal(b * X[:, 0] + f, sigma), obs=y)

    models = {"normal": normal, "poisson": poisson, "nuts": nuts}
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(60, 3))

    def response(name, r):
        mean = np.sin(3 * X[:, 0]) + X[:, 1]
        if name == "poisson":
            return r.poisson(np.exp(0.5 * mean)).astype(np.float32)
        return (mean + 0.3 * r.normal(size=60)).astype(np.float32)

    def digest(fit):
        h = hashlib.sha256()
        for group in ("posterior", "sample_stats", "log_likelihood"):
            ds = getattr(fit.idata, group, None)
            if ds is None:
                continue
            for k in sorted(ds.data_vars):
                h.update(k.encode())
                h.update(np.ascontiguousarray(ds[k].values).tobytes())
        for k in sorted(fit.samples):
            h.update(k.encode())
            h.update(np.ascontiguousarray(fit.samples[k]).tobytes())
        return h.hexdigest()[:16]

    for name in a.models.split(","):
        out = {"model": name, "xla": a.xla, "cache": a.cache, "chains": a.chains, "chain_method": a.chain_method,
               "steps": a.steps, "jit_data": a.jit_data, "load": round(os.getloadavg()[0], 2)}
        for call, seed in (("first", 1), ("second", 2)):
            y = response(name, np.random.default_rng(seed))
            t0 = time.perf_counter()
            with bt.compile_cache.compile_log() as log:
                fit = bt.sample_model(models[name], X, y=y, draws=a.steps, tune=a.steps, chains=a.chains,
                                      chain_method=a.chain_method, random_seed=0, jit_data=a.jit_data)
            wall = time.perf_counter() - t0
            out[call] = {"wall_s": round(wall, 2), **counts(log), "hash": digest(fit)}
        pred = fit.predict(X[:4])
        out["predict_shape"] = list(np.asarray(pred["y"]).shape)
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    sys.exit(main())
