"""Where a BART step's time goes: the whole step per move setting, and its proposal phase alone.

One chain, ``m = 200``, Friedman's function of 5 of ``p = 100`` features plus noise, ``n`` rows
(first argument, default 1,024), the kernel and data exactly as ``bt.BARTRegressor().fit`` builds
them (``benchmarks/bart_bartz.py``'s ``ours_kernel``).  Each timing is ``jit(step)`` called in a
loop after 100 warm-up steps: the minimum over 7 blocks of 10 steps (the machine is shared; the
minimum is the least disturbed block; ``BLOCKS=25`` in the environment takes 25 blocks).

    .venv-bartz/bin/python benchmarks/bart_step_profile.py 1024

(``.venv-bartz``: see ``benchmarks/bart_bartz.py``, which this script imports.)
"""
from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bart_bartz as B  # noqa: E402  (bartz first: it may set XLA flags)
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from bayestrees import random_bits  # noqa: E402
from bayestrees.inference import proposals  # noqa: E402
from bayestrees.inference.bart import kernel as K  # noqa: E402


#: timed blocks per measurement (``BLOCKS`` in the environment; default 7)
BLOCKS = int(os.environ.get("BLOCKS", 7))


def best_ms(fn, *a, reps=10, blocks=BLOCKS):
    out = fn(*a)
    jax.block_until_ready(out)
    best = float("inf")
    for _ in range(blocks):
        t = time.perf_counter()
        for _ in range(reps):
            out = fn(*a)
        jax.block_until_ready(out)
        best = min(best, (time.perf_counter() - t) / reps * 1e3)
    return best


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
    rng = np.random.default_rng(0)
    X, f = B.friedman(rng, n, 100)
    y = f + rng.normal(size=n)
    kernel, (data,) = B.ours_kernel(X, y, B.ols_sigma_hat(X, y))
    base = kernel.step.cfg
    for name, mp in (("grow/prune/change/swap", (0.25, 0.25, 0.4, 0.1)), ("grow/prune", (0.5, 0.5, 0.0, 0.0))):
        cfg = dataclasses.replace(base, move_probs=mp)
        kern = K.build_kernel(cfg)
        state = jax.jit(kern.init)(jax.random.key(0), data)
        step = jax.jit(kern.step)
        for i in range(100):
            state, _ = step(jax.random.key(i), state, data)

        @jax.jit
        def propose(key, st, cfg=cfg):
            u = random_bits.open_uniform(key, (cfg.m, proposals.N_UNIFORMS))
            return jax.vmap(lambda *a: proposals.propose(*a, data, cfg, jnp.float32))(u, st.feature, st.threshold,
                                                                                st.log_prior, st.avail)

        print(f"n = {n}, {name}: step {best_ms(lambda k: step(k, state, data), jax.random.key(5)):.2f} ms, "
              f"proposals {best_ms(propose, jax.random.key(1), state):.2f} ms")


if __name__ == "__main__":
    main()
