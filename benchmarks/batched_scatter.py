"""A scatter-add of every row into its cell, as a BART visit makes it, for several chains at once.

For ``C`` chains of ``n`` rows (leaf slots of a tree of capacity 63, the rows of one slot sent to
its children), ``T = 200`` visits in a ``lax.scan``, each summing ``x`` by cell with
``bayestrees.batching.cell_sums`` three ways: under ``jax.vmap`` with the library's batching rule
(one scatter on the flattened table, every chain's cells offset), under ``jax.vmap`` of a plain
``.at[].add`` (XLA's scatter with a batch dimension), and as a Python loop of one unbatched
``cell_sums`` per chain.  Prints microseconds per visit (minimum of 15 runs).

    taskset -c 0 .venv/bin/python benchmarks/batched_scatter.py 4 1024
"""
from __future__ import annotations

import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from bayestrees.batching import cell_sums

S, T, LANES = 63, 200, 8


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    C, n = int(argv[0]), int(argv[1])
    rng = np.random.default_rng(0)
    leafs = jnp.asarray(rng.integers(0, S, size=(T, C, n)), jnp.int8)
    x = jnp.asarray(rng.normal(size=(C, n)), jnp.float32)
    nodes = jnp.asarray(rng.integers(0, S // 2, size=(T, C)), jnp.int32)

    def finer_of(l8, s, x):
        leaf = l8.astype(jnp.int32)
        return jnp.where(leaf == s, 2 * s + 1 + (x > 0), leaf)

    def plain(cell, x):
        lane = jnp.arange(x.shape[0], dtype=jnp.int32) % LANES
        return jnp.sum(jnp.zeros(S * LANES, x.dtype).at[cell + S * lane].add(x, mode="drop").reshape(LANES, S), 0)

    variants = {
        "library rule": lambda l8, x, s: jax.vmap(lambda a, b, c: cell_sums(finer_of(a, c, b), b, S))(l8, x, s),
        "XLA batched": lambda l8, x, s: jax.vmap(lambda a, b, c: plain(finer_of(a, c, b), b))(l8, x, s),
        "loop of chains": lambda l8, x, s: jnp.stack([cell_sums(finer_of(l8[i], s[i], x[i]), x[i], S)
                                                      for i in range(C)]),
    }
    for name, fn in variants.items():
        def run(leafs, x, nodes, fn=fn):
            def body(c, t):
                l8, s = t
                r = fn(l8, x + c, s)
                return c + r[:, :1] * 1e-9, r
            return jax.lax.scan(body, jnp.zeros((C, 1)), (leafs, nodes))[1]

        f = jax.jit(run)
        jax.block_until_ready(f(leafs, x, nodes))
        best = float("inf")
        for _ in range(15):
            t0 = time.perf_counter()
            jax.block_until_ready(f(leafs, x, nodes))
            best = min(best, (time.perf_counter() - t0) / T * 1e6)
        print(f"chains {C}, rows {n}: {name:15s} {best:6.2f} us a visit")


if __name__ == "__main__":
    main()
