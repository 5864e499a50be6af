"""Peak memory per row of a BART chain on the CPU: this library against bartz, each in its own process.

For each library a fresh Python process generates Friedman data (``--n`` rows, ``p = 100``,
float64 ``X`` as a user would hold it), records its resident set size (``VmRSS``), then
builds the one-chain sampler state exactly as the library's estimator would (ours:
``bt.BARTRegressor(m=200)``'s ``fit_bart`` call intercepted; bartz: ``mc_gbart(..., mc_cores=1)``'s
initial state intercepted, as in ``benchmarks/bart_bartz.py``), runs ``--steps`` steps of the
compiled step function and records the peak (``ru_maxrss``).  The figure is ``(peak after - RSS
before) / n``: the bytes per row the sampler adds on top of the user's data (binning, the state, the step's
temporaries and XLA's buffers), compilation included.  Nothing is kept per draw here (a fit's kept
draws add ``4 n`` bytes each for the function at the training rows, and ``m * 378`` bytes of trees).

    .venv-bartz/bin/python benchmarks/bart_memory.py --n 1048576
    .venv-bartz/bin/python benchmarks/bart_memory.py --n 131072 262144

(``.venv-bartz``: see ``benchmarks/bart_bartz.py``.)  Prints a table and appends JSON lines to
``benchmarks/results/bart_memory.jsonl`` with the load average.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from forest_common import append_jsonl  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def _rss_mb() -> float:
    """The resident set size now (Linux ``/proc/self/status``)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def child(lib: str, n: int, steps: int) -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bart_bartz as B  # bartz first (it may set XLA flags), then jax
    import jax
    import numpy as np

    rng = np.random.default_rng(0)
    X, f = B.friedman(rng, n, 100)
    y = f + rng.normal(size=n)
    sh = B.ols_sigma_hat(X, y)
    import gc

    gc.collect()
    before = _rss_mb()   # not the peak so far: the least-squares fit's temporaries have been freed
    keys = jax.random.split(jax.random.key(0), steps)
    if lib == "ours":
        kernel, kargs = B.ours_kernel(X, y, sh)
        state = jax.jit(kernel.init)(jax.random.key(0), *kargs)
        step = jax.jit(kernel.step, donate_argnums=(1,))
        for k in keys:
            state = step(k, state, *kargs)[0]
    else:
        state = B.bartz_initial_state(X, y, sh)
        for k in keys:
            state = B.bartz_mcmcstep.step(k, state)
    jax.block_until_ready(state)
    after = _peak_mb()
    return dict(lib=lib, n=n, steps=steps, rss_before_mb=before, peak_after_mb=after,
                bytes_per_row=(after - before) * 2 ** 20 / n)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[1_048_576])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--libs", nargs="+", default=["ours", "bartz"])
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=str(RESULTS / "bart_memory.jsonl"))
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.n[0], args.steps)))
        return
    rows = []
    print(f"{'n':>9} {'library':>7} {'RSS before MB':>13} {'peak after MB':>13} {'bytes/row':>9}")
    for n in args.n:
        for lib in args.libs:
            load = os.getloadavg()
            out = subprocess.run([sys.executable, __file__, "--child", lib, "--n", str(n), "--steps", str(args.steps)],
                                 capture_output=True, text=True, check=True)
            row = json.loads(out.stdout.strip().splitlines()[-1])
            row.update(load_before=[round(x, 2) for x in load], machine=platform.machine(), cpus=os.cpu_count())
            rows.append(row)
            print(f"{n:>9} {lib:>7} {row['rss_before_mb']:13.0f} {row['peak_after_mb']:13.0f} "
                  f"{row['bytes_per_row']:9.0f}", flush=True)
    for row in rows:
        append_jsonl(args.out, row)
    print(f"\nappended {len(rows)} lines to {os.path.relpath(args.out)}")


if __name__ == "__main__":
    main()
