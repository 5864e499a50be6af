"""Bayesian CART sampler speed: tree-move steps per second against bartz (one tree), and chain scaling.

Both sides run in this process on the same Friedman data (n rows, p = 10), one tree, the same
depth limit (bayestrees ``max_depth=5`` = bartz ``maxdepth=6``: levels 0..5) and about the same
cut points (``max_bins=100`` against ``numcut=100``).  A bayestrees step is one move (grow,
prune, change or swap); a bartz iteration is one grow/prune move of its single tree plus its
leaf and noise updates.  Each side runs once to compile (reported apart) and then ``--repeats``
times; the median is reported.  The chain-scaling part times ``chains`` in 1 and ``--chains``
(default 4, 16, 64) chains of bayestrees for the same number of steps, vmapped
(``chain_method="vectorized"``) and in threads (``"parallel"``); one chain runs the same unbatched
program either way.  Beside each wall time the process CPU time of the same run is recorded
(``chains_cpu_s``, ``bartz_chains_cpu_s``: all threads together, so it exceeds the wall time when
XLA keeps both cores busy), which tells how much of the machine one chain already uses.

The peer figure for chain scaling times bartz's own multi-chain sampler,
``bartz.BART.mc_gbart(mc_cores=c)`` for ``c`` in ``--bartz-chains`` (default 1, 4, 16, 64), with the
same settings as the one-chain bartz run.  ``mc_gbart`` takes ``ndpost`` as the total over chains
(``ceil(ndpost / c)`` kept per chain) and ``nskip`` per chain, so it is called with
``ndpost = c * steps / 2`` and ``nskip = steps / 2``: every chain does ``steps`` iterations, like the
one-chain run; the trace shapes are checked after timing.  With a single JAX CPU device (the
default here) bartz runs the ``c`` chains ``jax.vmap``-ed in one program on that device, the
counterpart of our ``chain_method="vectorized"``; its default ``num_chain_devices='auto'`` would
shard the chains over up to ``os.cpu_count()`` JAX CPU devices, but only when
``jax_num_cpu_devices`` provides them (it warns and falls back to one device otherwise; the
warning is recorded as ``bartz_chains_device_note``).  ``mc_cores=1`` is the same unbatched
program as ``gbart``.  Each chain count runs once to compile (``bartz_chains_compile_and_first_s``)
and then ``--repeats`` times (median in ``bartz_chains_seconds``, ratios to one chain in
``bartz_chains_ratio_to_one``).  ``--skip-bartz`` skips every bartz part.

Run from the repository root (bartz: ``pip install bartz``, a benchmark-only dependency)::

    .venv/bin/python benchmarks/bcart_speed.py
"""
from __future__ import annotations

import json
import time
import warnings

import jax
import numpy as np

import bayestrees as bt
from forest_common import RESULTS, machine, parser


def friedman(rng, n, p=10):
    X = rng.random((n, p))
    f = 10 * np.sin(np.pi * X[:, 0] * X[:, 1]) + 20 * (X[:, 2] - 0.5) ** 2 + 10 * X[:, 3] + 5 * X[:, 4]
    return X, f + rng.normal(size=n)


def timed(fn, repeats, cpu=None):
    """``(first call s, median of repeats s)``; with a dict ``cpu``, ``cpu["s"]`` gets the median
    process CPU seconds of the repeats (all threads: above the wall time when several cores work)."""
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    times, cpus = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        times.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    if cpu is not None:
        cpu["s"] = float(np.median(cpus))
    return first, float(np.median(times))


def bartz_chain_scaling(X, y, steps, repeats, chain_counts):
    """Time bartz's multi-chain sampler, ``mc_gbart(mc_cores=c)``, with ``steps`` iterations per chain.

    ``ndpost`` is the total over chains in ``mc_gbart`` (``ceil(ndpost / c)`` saved per chain) and
    ``nskip`` is per chain, hence ``ndpost = c * steps // 2``.  Checked shapes (n = 1000,
    steps = 4000): ``mc_cores=1``: ``sigma`` (4000,), ``yhat_train`` (2000, 1000), burn-in and main
    ``error_cov_inv`` traces (2000,) each; ``mc_cores=4``: ``sigma`` (4000, 4) (burn-in + kept,
    chains), ``yhat_train`` (8000, 1000), burn-in and main ``error_cov_inv`` traces (4, 2000) each.
    The same checks are asserted below after every chain count's timing.  With one JAX CPU device
    bartz has no mesh (``_mcmc_state.config.mesh is None``): the chains are vmapped in one program.

    Returns
    -------
    dict
        ``bartz_chains_seconds`` and ``bartz_chains_compile_and_first_s`` per chain count,
        ``bartz_chains_ratio_to_one`` (seconds over the one-chain seconds of this same function,
        when 1 is in ``chain_counts``), ``bartz_chains_devices`` (``c`` -> number of chain devices
        bartz used, 1 = vmapped on one device) and ``bartz_chains_device_note`` (bartz's warnings,
        e.g. that it would have sharded the chains across more JAX CPU devices).  The one-chain
        compile time is small: ``mc_cores=1`` reuses the program compiled by the ``gbart`` run.
    """
    from bartz.BART import mc_gbart

    y32 = y.astype(np.float32)
    seconds, compile_s, devices, notes, cpu_s = {}, {}, {}, set(), {}
    for c in chain_counts:
        last = {}

        def run(c=c, last=last):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                m = mc_gbart(X, y32, ntree=1, ndpost=c * (steps // 2), nskip=steps // 2, numcut=100,
                             printevery=None, seed=0, mc_cores=c)
                jax.block_until_ready(m.yhat_train_mean)
            notes.update(str(w.message) for w in caught)
            last["m"] = m
        cpu = {}
        compile_s[c], seconds[c] = timed(run, repeats, cpu)
        cpu_s[c] = cpu["s"]
        m = last["m"]
        # every chain ran steps // 2 burn-in plus steps // 2 kept iterations
        sigma_shape = (steps,) if c == 1 else (steps, c)
        trace_shape = (steps // 2,) if c == 1 else (c, steps // 2)
        assert m.sigma.shape == sigma_shape, (c, m.sigma.shape)
        assert m.yhat_train.shape == (c * (steps // 2), X.shape[0]), (c, m.yhat_train.shape)
        assert m._burnin_trace.error_cov_inv.shape == trace_shape, (c, m._burnin_trace.error_cov_inv.shape)
        assert m._main_trace.error_cov_inv.shape == trace_shape, (c, m._main_trace.error_cov_inv.shape)
        mesh = m._mcmc_state.config.mesh
        devices[c] = 1 if mesh is None or "chains" not in mesh.axis_names else mesh.shape["chains"]
    res = {"bartz_chains_seconds": seconds, "bartz_chains_cpu_s": cpu_s,
           "bartz_chains_compile_and_first_s": compile_s,
           "bartz_chains_devices": devices, "bartz_chains_device_note": sorted(notes)}
    if 1 in seconds:
        res["bartz_chains_ratio_to_one"] = {c: v / seconds[1] for c, v in seconds.items()}
    return res


def main():
    p = parser("Bayesian CART speed against bartz")
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--steps", type=int, default=4000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--chain-methods", default="vectorized,parallel")
    p.add_argument("--skip-bartz", action="store_true", help="only the chain scaling (no bartz part at all)")
    p.add_argument("--chains", default="4,16,64",
                   help="comma-separated chain counts (besides 1) for our chain scaling")
    p.add_argument("--bartz-chains", default="1,4,16,64",
                   help="comma-separated chain counts for bartz's mc_gbart(mc_cores=c) scaling")
    args = p.parse_args()
    if args.quick:
        args.n, args.steps, args.repeats = 200, 500, 1
    rng = np.random.default_rng(0)
    X, y = friedman(rng, args.n)
    out = {"benchmark": "bcart_speed", "n": args.n, "steps": args.steps, "machine": machine()}

    def ours(chains, method="vectorized"):
        def run():
            est = bt.BayesianCARTRegressor(draws=args.steps // 2, tune=args.steps // 2, chains=chains, max_depth=5,
                                           max_bins=100, random_state=0, chain_method=method).fit(X, y)
            jax.block_until_ready(est.result_.lp)
        return run

    first, med = timed(ours(1), args.repeats)
    out["bayestrees_compile_and_first_s"], out["bayestrees_s"] = first, med
    out["bayestrees_steps_per_s"] = args.steps / med
    try:
        if args.skip_bartz:
            raise ModuleNotFoundError("skipped (--skip-bartz)")
        from bartz.BART import gbart

        def theirs():
            m = gbart(X, y.astype(np.float32), ntree=1, ndpost=args.steps // 2, nskip=args.steps // 2, numcut=100,
                      printevery=None, seed=0)
            jax.block_until_ready(m.yhat_train_mean if hasattr(m, "yhat_train_mean") else m.sigma)
        first_b, med_b = timed(theirs, args.repeats)
        out["bartz_compile_and_first_s"], out["bartz_s"] = first_b, med_b
        out["bartz_steps_per_s"] = args.steps / med_b
        out["ratio_steps_per_s_ours_over_bartz"] = out["bayestrees_steps_per_s"] / out["bartz_steps_per_s"]
        out.update(bartz_chain_scaling(X, y, args.steps, args.repeats,
                                       [int(c) for c in args.bartz_chains.split(",")]))
    except ImportError as e:
        out["bartz"] = str(e) if args.skip_bartz else "not installed (pip install bartz)"
    cpu = {}
    _, one = timed(ours(1), 1, cpu)
    one_cpu = cpu["s"]
    for method in args.chain_methods.split(","):
        scaling, cpu_s = {1: one}, {1: one_cpu}
        for c in (int(c) for c in args.chains.split(",")):
            _, scaling[c] = timed(ours(c, method), 1, cpu)
            cpu_s[c] = cpu["s"]
        key = "" if method == "vectorized" else f"_{method}"
        out[f"chains_seconds{key}"] = scaling
        out[f"chains_cpu_s{key}"] = cpu_s
        out[f"chains_ratio_to_one{key}"] = {c: v / one for c, v in scaling.items()}
    print(json.dumps(out, indent=1))
    with open(args.out or RESULTS / "bcart_speed.jsonl", "a") as fh:
        fh.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
