"""XLA CPU compiler flags against the time to compile a small, test-sized workload.

The test suite compiles thousands of small programs and runs each for milliseconds
(``tests/conftest.py`` picks its flags from this comparison). Each flag set runs the same workload
in a fresh subprocess with no compilation cache: three forest estimators on two data shapes,
Bayesian CART, BET and BCART-PCFG, all fitted and predicting on a few dozen rows. A JAX monitoring
listener sums the time spent tracing, lowering to MLIR and in the backend compiler; the wall time
is the whole workload's. Flag sets run in rounds (every set once per round, in order), so a slow
spell of the machine falls on all of them.

Run from the repository root::

    python benchmarks/compile_flags.py --rounds 2

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

WORKLOAD = r"""
import collections, json, time, warnings
import jax.monitoring as mon
tot = collections.Counter()
mon.register_event_duration_secs_listener(lambda e, d, **k: tot.update({e.rsplit('/', 1)[-1]: d}))
import numpy as np
warnings.filterwarnings("ignore")
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
print("RESULT" + json.dumps(dict(wall=time.perf_counter() - t0, backend_compile=tot["backend_compile_duration"],
                                  trace=tot["jaxpr_trace_duration"], lower=tot["jaxpr_to_mlir_module_duration"])))
"""

FLAG_SETS = {
    "XLA defaults": "",
    "LLVM -O0": "--xla_backend_optimization_level=0",
    "LLVM -O0, older fusion emitter": "--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false",
    "older fusion emitter": "--xla_cpu_use_fusion_emitters=false",
}


def run(flags: str, timeout: float, mem_gb: float) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_COMPILATION_CACHE_DIR")}
    env["XLA_FLAGS"] = flags
    env["BAYESTREES_COMPILATION_CACHE"] = "0"  # no persistent cache: every round compiles (bayestrees.compile_cache)
    # bound the child's memory, so a compiler that runs away is stopped before it takes the machine
    pre = None
    if mem_gb > 0 and sys.platform.startswith("linux"):
        import resource

        limit = int(mem_gb * 2**30)
        pre = lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit))  # noqa: E731
    t0 = time.perf_counter()
    try:
        r = subprocess.run([sys.executable, "-c", WORKLOAD], env=env, capture_output=True, text=True,
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
    ap.add_argument("--out", default="benchmarks/results/compile_flags.jsonl")
    a = ap.parse_args(argv)
    rows = []
    for k in range(a.rounds):
        for name, flags in FLAG_SETS.items():
            res = run(flags, a.timeout, a.mem_gb)
            rows.append(dict(round=k, name=name, flags=flags, **res))
            print(json.dumps(rows[-1]), flush=True)
    print(f"\n| flags | wall s | backend compile s | trace s | lower s |\n|---|---:|---:|---:|---:|")
    for name in FLAG_SETS:
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
