"""Where a BART step's time goes, by XLA operation: ours and bartz's step, one chain or several vmapped.

The step is compiled as ``benchmarks/bart_bartz.py`` builds it (``bt.BARTRegressor(m=200)``'s
kernel; bartz's ``mcmcstep.step``), run 100 steps from the root, then 20 steps under JAX's profiler
with XLA's per-operation trace events (``--xla_cpu_enable_xprof_traceme``, set here before JAX
starts).  It prints the step's time without and with the profiler, the time of the operations in
the scan over the trees (those run once per tree) against the rest, and the largest operations:
microseconds a call, calls a step, whether XLA split the operation over threads
(``outer_dimension_partitions``), and the output shape.  The trace events cost about half a
microsecond each, so read the table for where the time goes, not for the step's time.

    .venv-bartz/bin/python benchmarks/bart_op_profile.py --n 2048
    .venv-bartz/bin/python benchmarks/bart_op_profile.py --n 1024 --chains 4 --side bartz

(``.venv-bartz``: see ``benchmarks/bart_bartz.py``.)  ``taskset -c 0`` in front runs it on one core.
"""
from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_enable_xprof_traceme=true").strip()
sys.path.insert(0, str(Path(__file__).resolve().parent))
import bart_bartz as B  # noqa: E402  (bartz first: it may set XLA flags)
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402


def compiled_step(side: str, chains: int, X, y, sigma_hat):
    """``(step(key, state) -> state, state0, chain_keys)`` of one side, compiled."""
    many = chains > 1
    chain_keys = (lambda k: jax.random.split(k, chains)) if many else (lambda k: k)
    if side == "ours":
        kernel, kargs = B.ours_kernel(X, y, sigma_hat, 0, chains)
        init, step = kernel.init, kernel.step
        if many:
            init = jax.vmap(init, in_axes=(0,) + (None,) * len(kargs))
            step = jax.vmap(step, in_axes=(0, 0) + (None,) * len(kargs))
        s0 = jax.jit(init)(chain_keys(jax.random.key(0)), *kargs)
        c = jax.jit(step).lower(chain_keys(jax.random.key(1)), s0, *kargs).compile()
        return (lambda k, s: c(k, s, *kargs)[0]), s0, chain_keys, c.as_text()
    s0 = B.bartz_initial_state(X, y, sigma_hat, 0)
    step = B.bartz_mcmcstep.step
    if many:
        s0 = jax.tree_util.tree_map(lambda a: jnp.stack([a] * chains), s0)
        step = jax.vmap(step)
    c = jax.jit(step).lower(chain_keys(jax.random.key(1)), s0).compile()
    return c, s0, chain_keys, c.as_text()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--p", type=int, default=100)
    ap.add_argument("--chains", type=int, default=1)
    ap.add_argument("--side", choices=("ours", "bartz"), default="ours")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    X, f = B.friedman(rng, a.n, a.p)
    y = f + rng.normal(size=a.n)
    step, s, chain_keys, hlo = compiled_step(a.side, a.chains, X, y, B.ols_sigma_hat(X, y))
    info = {}
    for m in re.finditer(r"\n\s*(?:ROOT )?%?([\w.\-]+) = (\S+) [^\n]*", hlo):
        parts = re.search(r'outer_dimension_partitions":\[([^\]]*)\]', m.group(0))
        info[m.group(1)] = (m.group(2), parts.group(1).replace('"', "") if parts else "")
    keys = [chain_keys(k) for k in jax.random.split(jax.random.key(2), 170)]
    for k in keys[:100]:
        s = step(k, s)
    jax.block_until_ready(s)
    t0 = time.perf_counter()
    for k in keys[100:150]:
        s = step(k, s)
    jax.block_until_ready(s)
    plain = (time.perf_counter() - t0) / 50 * 1e3
    with tempfile.TemporaryDirectory() as d:
        with jax.profiler.trace(d, create_perfetto_trace=True):
            for k in keys[150:170]:
                s = step(k, s)
            jax.block_until_ready(s)
        trace = json.load(gzip.open(glob.glob(f"{d}/**/*perfetto_trace.json.gz", recursive=True)[0]))
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    total, calls = collections.Counter(), collections.Counter()
    for e in events:
        if e.get("ph") == "X" and e["name"] in info and not e["name"].startswith("while"):
            total[e["name"]] += e.get("dur", 0)
            calls[e["name"]] += 1
    per_tree = {k for k in total if calls[k] >= 20 * 50}   # in the loop over the trees (bartz: 100 iterations of 2)
    body = sum(total[k] for k in per_tree) / 20
    rest = sum(v for k, v in total.items() if k not in per_tree) / 20
    print(f"{a.side}, n = {a.n}, chains = {a.chains}: {plain:.3f} ms a step; "
          f"operations in the scan over the trees {body:.0f} us a step, the rest {rest:.0f} us")
    print(f"{'us/call':>9} {'calls/step':>10} {'threads':>7}  shape / operation   (profiled: about 0.5 us an event more)")
    for k, v in total.most_common(a.top):
        print(f"{v / calls[k]:9.2f} {calls[k] / 20:10.0f} {info[k][1] or '1':>7}  {info[k][0]}  {k}")


if __name__ == "__main__":
    main()
