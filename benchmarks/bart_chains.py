"""BART's several chains on the CPU as the library runs them: threads (the default there) or ``vmap``.

One process; the kernel and data exactly as ``bt.BARTRegressor(m=200).fit`` builds them (Friedman's
function of 5 of ``p = 100`` features plus noise, ``n`` rows: first argument, default 1,024).  For 1,
4 and 16 chains and ``chain_method`` "parallel" (threads, one compiled chain each; what
``chain_method="auto"`` picks on a multi-core CPU) and "vectorized" (the chains under ``vmap``):
``run_chains`` of 100 tuning + ``steps`` kept steps (second argument, default 200) once to compile,
then again, timed to the end of the result; the time per step of all the chains together.

    .venv-bartz/bin/python benchmarks/bart_chains.py 1024 200

(``.venv-bartz``: see ``benchmarks/bart_bartz.py``, whose data and kernel capture this script uses;
bartz's own figures for several chains are ``bart_bartz.py --speed-chains``.)
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bart_bartz as B  # noqa: E402
import jax  # noqa: E402
import numpy as np  # noqa: E402

from bayestrees.inference.loop import run_chains  # noqa: E402


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    rng = np.random.default_rng(0)
    X, f = B.friedman(rng, n, 100)
    y = f + rng.normal(size=n)
    kernel, kargs = B.ours_kernel(X, y, B.ols_sigma_hat(X, y))

    def sigma2(key, state, data):
        return state.sigma2

    print(f"load {os.getloadavg()}")
    for chains in (1, 4, 16):
        for method in ("parallel", "vectorized"):
            if chains == 1 and method == "vectorized":
                continue
            kw = dict(args=kargs, chains=chains, draws=steps, tune=100, collect=sigma2, chain_method=method)
            jax.block_until_ready(run_chains(jax.random.key(0), kernel, **kw).samples)
            t0 = time.perf_counter()
            jax.block_until_ready(run_chains(jax.random.key(1), kernel, **kw).samples)
            dt = (time.perf_counter() - t0) / (steps + 100)
            print(f"n = {n}, {chains:>2} chains, {method:>10}: {dt * 1e3:7.2f} ms a step of all the chains "
                  f"({dt * 1e3 / chains:5.2f} ms a chain)", flush=True)


if __name__ == "__main__":
    main()
