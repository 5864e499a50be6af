"""What one chain costs inside a vmapped batch of Bayesian CART chains, against a chain alone.

The chain-scaling figure of the Bayesian CART issue asks for 16 vmapped chains within 4x the time
of one on the CPU. On P cores that needs each chain in the batch to cost at most P/4 of what a
lone chain costs, so that work has to be shared between chains. This script measures how much is
shared, in two ways.

* Whole runs: ``BayesianCARTRegressor.fit`` with 1 and 16 vmapped chains, on ``--n`` Friedman
  rows, for both the default move mix and grow/prune only. The data and depth limit are those of
  ``bcart_speed.py``. It records the wall and process CPU time, median of ``--repeats``, with the
  settings interleaved.
* Pieces of the tree evaluation every move makes: the rows' routing, the leaf statistics and
  the per-node code ranges. Each is timed for one tree alone and vmapped over the 16 trees of a
  16-chain fit, as ``K`` evaluations in one compiled loop so that dispatch is not counted. The
  input is perturbed by a value read from an argument, so that XLA cannot hoist the work.

"per chain" is the batch's time over 16 times the lone chain's: 1 means nothing is shared and
nothing is lost, and below 1 means work is shared. Run from the repository root::

    python benchmarks/bcart_batch_cost.py --n 30
    python benchmarks/bcart_batch_cost.py --n 1000
"""
from __future__ import annotations

import json
import time

import jax
import jax.numpy as jnp
import numpy as np

import bayestrees as bt
import bayestrees.inference.bcart.fit as BC
from bayestrees.inference import moves as M
from bayestrees.leaves import leaf_stats
from bcart_speed import friedman
from forest_common import RESULTS, machine, parser

MIXES = {"default moves": (0.25, 0.25, 0.4, 0.1), "grow/prune only": (0.5, 0.5, 0.0, 0.0)}


def whole_runs(X, y, steps, repeats):
    def fit(chains, mix):
        est = bt.BayesianCARTRegressor(draws=steps // 2, tune=steps // 2, chains=chains, max_depth=5, max_bins=100,
                                       random_state=0, chain_method="vectorized", move_probs=mix, progressbar=False)
        jax.block_until_ready(est.fit(X, y).result_.lp)

    for mix in MIXES.values():  # compile
        for c in (1, 16):
            fit(c, mix)
    rec = {}
    for _ in range(repeats):
        for name, mix in MIXES.items():
            for c in (1, 16):
                t0, c0 = time.perf_counter(), time.process_time()
                fit(c, mix)
                rec.setdefault(name, {}).setdefault(c, []).append((time.perf_counter() - t0, time.process_time() - c0))
    out = {}
    for name, by_c in rec.items():
        med = {c: (float(np.median([w for w, _ in v])), float(np.median([p for _, p in v]))) for c, v in by_c.items()}
        out[name] = dict(wall_1=med[1][0], cpu_1=med[1][1], wall_16=med[16][0], cpu_16=med[16][1],
                         wall_ratio=med[16][0] / med[1][0], cpu_per_chain=med[16][1] / (16 * med[1][1]))
    return out


def pieces(X, y, K, repeats):
    """The evaluation pieces on the last trees of a 16-chain fit: one tree against 16 vmapped."""
    captured = {}
    plain_run_chains = BC.run_chains

    def capture(key, kernel, args, **kw):
        res = plain_run_chains(key, kernel, args=args, **kw)
        captured.update(data=args[0], trees=res.last_state.tree, cfg=kernel.step.cfg)
        return res

    BC.run_chains = capture
    try:
        bt.BayesianCARTRegressor(draws=200, tune=200, chains=16, max_depth=5, max_bins=100, random_state=0,
                                 progressbar=False).fit(X, y)
    finally:
        BC.run_chains = plain_run_chains
    data, trees, mc = captured["data"], captured["trees"], captured["cfg"]  # the fit's own sampler config
    S, D = mc.capacity, mc.max_depth
    route = lambda t: M._route(t, data.codes, D)  # noqa: E731
    fns = {
        "routing": lambda t: route(t).sum().astype(jnp.float32),
        "routing + leaf statistics": lambda t: leaf_stats(route(t), data.row_stats, S, data.weight).sum(),
        "routing + code ranges": lambda t: M._ranges(route(t), data.codes, data.weight, S, D)[1].sum().astype(
            jnp.float32),
        "whole evaluation": lambda t: M.evaluate(t, data, mc).log_lik,
    }
    zero = jnp.zeros(2, jnp.int32)
    one_tree = jax.tree_util.tree_map(lambda a: a[0], trees)
    out = {"leaves_per_tree": np.asarray((trees.left == -1).sum(-1)).tolist()}
    for name, fn in fns.items():
        def looped(tree, z, fn=fn, batched=False):
            def body(i, acc):
                t = tree._replace(threshold=tree.threshold + z[i % 2])
                return acc + (jax.vmap(fn)(t).sum() if batched else fn(t))
            return jax.lax.fori_loop(0, K, body, jnp.float32(0.0))

        single = jax.jit(looped)
        batch = jax.jit(lambda tree, z, looped=looped: looped(tree, z, batched=True))
        single(one_tree, zero).block_until_ready()
        batch(trees, zero).block_until_ready()
        ts, tb = [], []
        for _ in range(repeats):
            t0 = time.perf_counter()
            single(one_tree, zero).block_until_ready()
            ts.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            batch(trees, zero).block_until_ready()
            tb.append(time.perf_counter() - t0)
        s, b = float(np.median(ts)) / K * 1e6, float(np.median(tb)) / K * 1e6
        out[name] = dict(one_us=s, sixteen_us=b, per_chain=b / (16 * s))
    return out


def main():
    p = parser("Bayesian CART: one chain's cost inside a vmapped batch")
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--steps", type=int, default=4000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--loop", type=int, default=200, help="evaluations per compiled loop in the piece timings")
    a = p.parse_args()
    X, y = friedman(np.random.default_rng(0), a.n)
    out = {"benchmark": "bcart_batch_cost", "n": a.n, "steps": a.steps, "machine": machine(),
           "runs": whole_runs(X, y, a.steps, a.repeats), "pieces": pieces(X, y, a.loop, 5)}
    print(f"\nn = {a.n}: whole runs, {a.steps} steps per chain (median of {a.repeats})")
    print("| moves | 1 chain s (CPU s) | 16 vmapped s (CPU s) | wall ratio | CPU per chain |")
    print("|---|---|---|---:|---:|")
    for name, r in out["runs"].items():
        print(f"| {name} | {r['wall_1']:.3f} ({r['cpu_1']:.3f}) | {r['wall_16']:.3f} ({r['cpu_16']:.3f}) | "
              f"{r['wall_ratio']:.1f} | {r['cpu_per_chain']:.2f} |")
    print(f"\npieces, per evaluation (leaves per tree {out['pieces']['leaves_per_tree']})")
    print("| piece | one tree us | 16 vmapped us | per chain |")
    print("|---|---:|---:|---:|")
    for name, r in out["pieces"].items():
        if isinstance(r, dict):
            print(f"| {name} | {r['one_us']:.1f} | {r['sixteen_us']:.1f} | {r['per_chain']:.2f} |")
    with open(a.out or RESULTS / "bcart_batch_cost.jsonl", "a") as fh:
        fh.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
