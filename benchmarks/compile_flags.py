"""XLA CPU compiler flags against the time to compile a small, test-sized workload.

The test suite compiles thousands of small programs and runs each for milliseconds
(``tests/conftest.py`` picks its flags from this comparison). Each flag set runs the same workload
in a fresh subprocess with no compilation cache. ``--workload families`` (the default): three forest
estimators on two data shapes, Bayesian CART, BET and BCART-PCFG, all fitted and predicting on a few
dozen rows. ``--workload treefn``: the one-tree function of the exactness tests (a Normal model, 9
rows, 4 chains of 100 + 300, the data as arguments) fitted twice with two sampler seeds, then a
20-tree ``BARTRegressor`` on 100 rows. ``--one-core`` pins each run to one CPU, as each of the
suite's two processes has one on a 2-core machine. A JAX monitoring
listener sums the time spent tracing, lowering to MLIR and in the backend compiler; the wall time
is the whole workload's. Flag sets run in rounds (every set once per round, in order), so a slow
spell of the machine falls on all of them.

Run from the repository root::

    python benchmarks/compile_flags.py --rounds 2
    python benchmarks/compile_flags.py --workload treefn --one-core --rounds 3 --sets suite "suite, one codegen split"

A flag set that kills its process (an unknown flag aborts XLA; a compiler that runs out of memory
is killed) is reported with its exit status instead of times.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

#: every workload: a JAX monitoring listener that sums the compiler's times, and its RESULT line
HEAD = r"""
import collections, json, time, warnings
import jax.monitoring as mon
tot = collections.Counter()
mon.register_event_duration_secs_listener(lambda e, d, **k: tot.update({e.rsplit('/', 1)[-1]: d}))
import numpy as np
warnings.filterwarnings("ignore")
"""
TAIL = r"""
print("RESULT" + json.dumps(dict(wall=time.perf_counter() - t0, backend_compile=tot["backend_compile_duration"],
                                  trace=tot["jaxpr_trace_duration"], lower=tot["jaxpr_to_mlir_module_duration"])))
"""

WORKLOAD = HEAD + r"""
import bayestrees as bt
t0 = time.perf_counter()
rng = np.random.default_rng(0)
for n, d in [(50, 3), (100, 5)]:
    X = rng.normal(size=(n, d)); y = rng.normal(size=n); yc = (X[:, 0] > 0).astype(int)
    bt.BayesianForestRegressor(draws=3, random_state=0).fit(X, y).predict(X)
    bt.BayesianForestClassifier(draws=3, random_state=0).fit(X, yc).predict_proba(X)
    bt.SubSampleForestRegressor(draws=4, n_blocks=2, random_state=0).fit(X, y).predict(X)
X = rng.normal(size=(40, 2)); y = X[:, 0] + rng.normal(size=40) * 0.3
bt.BayesianCARTRegressor(draws=20, tune=20, chains=2, random_state=0).fit(X, y).predict(X)
bt.BETRegressor(draws=10, tune=10, chains=1, random_state=0).fit(X, y).predict(X)
bt.PCFGTreeRegressor().fit(X[:20], y[:20]).predict(X)
""" + TAIL

TREEFN_WORKLOAD = HEAD + r"""
import numpyro, numpyro.distributions as dist
import bayestrees as bt
t0 = time.perf_counter()
rng = np.random.default_rng(0)
X = rng.integers(0, 4, size=(9, 2)).astype(np.float32) * 1.5 - 2.0
y = rng.normal(size=9).astype(np.float32)
def model(X, y=None):
    f = bt.tree_function("f", X, max_depth=2, min_leaf_rows=1)
    numpyro.sample("y", dist.Normal(f, 0.7), obs=y)
for seed in (0, 1):
    bt.sample_model(model, X, y, draws=300, tune=100, chains=4, random_seed=seed, log_likelihood=False, jit_data=True)
Xb = rng.normal(size=(100, 4))
bt.BARTRegressor(m=20, draws=100, tune=100, chains=2, random_state=0).fit(Xb, Xb[:, 0] + rng.normal(size=100))
""" + TAIL
WORKLOADS = {"families": WORKLOAD, "treefn": TREEFN_WORKLOAD}

#: the suite's flags (``tests/conftest.py``): LLVM -O0 and the older fusion emitter
SUITE = "--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false"
FLAG_SETS = {
    "XLA defaults": "",
    "LLVM -O0": "--xla_backend_optimization_level=0",
    "suite": SUITE,
    "older fusion emitter": "--xla_cpu_use_fusion_emitters=false",
    "suite, one codegen split": SUITE + " --xla_cpu_parallel_codegen_split_count=1",
    "suite, legacy runtime": SUITE + " --xla_cpu_use_thunk_runtime=false",
}


def run(flags: str, timeout: float, mem_gb: float, workload: str = WORKLOAD, one_core: bool = False) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_COMPILATION_CACHE_DIR")}
    env["XLA_FLAGS"] = flags
    env["BAYESTREES_COMPILATION_CACHE"] = "0"  # no persistent cache: every round compiles (bayestrees.compile_cache)
    # bound the child's memory, so a compiler that runs away is stopped before it takes the machine
    limits = []
    if mem_gb > 0 and sys.platform.startswith("linux"):
        import resource

        limit = int(mem_gb * 2**30)
        limits.append(lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))
    if one_core and hasattr(os, "sched_setaffinity"):
        core = min(os.sched_getaffinity(0))
        limits.append(lambda: os.sched_setaffinity(0, {core}))
    pre = (lambda: [f() for f in limits]) if limits else None
    t0 = time.perf_counter()
    try:
        r = subprocess.run([sys.executable, "-c", workload], env=env, capture_output=True, text=True,
                           timeout=timeout, preexec_fn=pre)
    except subprocess.TimeoutExpired:
        return dict(status=f"timed out after {timeout:.0f} s")
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT")]
    if r.returncode != 0 or not lines:
        tail = (r.stderr.strip().splitlines() or ["(no message)"])[-1][:160]
        return dict(status=f"exit {r.returncode} after {time.perf_counter() - t0:.0f} s: {tail}")
    return dict(status="ok", **json.loads(lines[-1][len("RESULT"):]))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--mem-gb", type=float, default=8.0, help="address-space limit per run (0: none)")
    ap.add_argument("--workload", choices=sorted(WORKLOADS), default="families")
    ap.add_argument("--one-core", action="store_true", help="pin each run to one CPU")
    ap.add_argument("--sets", nargs="+", choices=list(FLAG_SETS), default=list(FLAG_SETS)[:4],
                    help="the flag sets to compare (default: the first four)")
    ap.add_argument("--out", default="benchmarks/results/compile_flags.jsonl")
    a = ap.parse_args(argv)
    sets = {name: FLAG_SETS[name] for name in a.sets}
    rows = []
    for k in range(a.rounds):
        for name, flags in sets.items():
            res = run(flags, a.timeout, a.mem_gb, WORKLOADS[a.workload], a.one_core)
            rows.append(dict(round=k, name=name, flags=flags, workload=a.workload, one_core=a.one_core, **res))
            print(json.dumps(rows[-1]), flush=True)
    print(f"\n| flags | wall s | backend compile s | trace s | lower s |\n|---|---:|---:|---:|---:|")
    for name in sets:
        ok = [r for r in rows if r["name"] == name and r["status"] == "ok"]
        if not ok:
            print(f"| {name} | {[r['status'] for r in rows if r['name'] == name][0]} | | | |")
            continue
        f = lambda key: " / ".join(f"{r[key]:.1f}" for r in ok)  # noqa: E731
        print(f"| {name} | {f('wall')} | {f('backend_compile')} | {f('trace')} | {f('lower')} |")
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    import jax

    with open(a.out, "a") as fh:
        for r in rows:
            fh.write(json.dumps(dict(r, jax=jax.__version__, cpus=os.cpu_count(),
                                     date=time.strftime("%Y-%m-%d %H:%M"))) + "\n")


if __name__ == "__main__":
    main()
