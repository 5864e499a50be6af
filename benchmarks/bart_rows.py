"""BART with the rows of one chain split across devices (``data_devices``) against one device.

Each setting runs in its own process, JAX started with ``--xla_force_host_platform_device_count``
(CPU devices; on a machine with several GPUs pass ``--real-devices`` to use them as they are).
One chain, ``m`` trees, Friedman's function with ``p`` features; the timed call is a second fit of
the same shapes (compiled programs reused), so it times the steps and the fit's own work, not
compilation.  Printed per setting: seconds per step and the posterior mean of ``sigma`` and of the
function at 5 rows (the same law on every setting; the numbers part only by float rounding).

    .venv/bin/python benchmarks/bart_rows.py --n 65536 --devices 1 2 4
    .venv/bin/python benchmarks/bart_rows.py --n 65536 --devices 1 2 --cpus 1   # every process on one core

Records: ``benchmarks/results/bart_rows.jsonl``; the lab notes (``docs/lab-notes/performance.md``).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r'''
import json, sys, time, warnings
import numpy as np
import jax
a = json.loads(sys.argv[1])
import bayestrees as bt
warnings.simplefilter("ignore")
rng = np.random.default_rng(0)
n, p = a["n"], a["p"]
X = rng.uniform(size=(n, p))
y = (10 * np.sin(np.pi * X[:, 0] * X[:, 1]) + 20 * (X[:, 2] - 0.5) ** 2 + 10 * X[:, 3] + 5 * X[:, 4]
     + rng.normal(size=n))
kw = dict(m=a["m"], chains=1, tune=a["steps"] // 2, draws=a["steps"] // 2, random_state=0,
          data_devices=a["data_devices"], keep_trees=False)
t = time.perf_counter(); bt.BARTRegressor(**kw).fit(X, y); first = time.perf_counter() - t
t = time.perf_counter(); reg = bt.BARTRegressor(**kw).fit(X, y); second = time.perf_counter() - t
print("RESULT " + json.dumps(dict(first_s=first, second_s=second, step_ms=1e3 * second / a["steps"],
                                  sigma=float(reg.idata_.posterior["sigma"].mean()),
                                  mu5=np.asarray(reg.idata_.posterior["mu"]).mean((0, 1))[:5].tolist(),
                                  devices=jax.device_count(), backend=jax.default_backend())))
'''


def run(args, k: int) -> dict:
    env = dict(os.environ)
    if not args.real_devices:
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={max(args.devices)}").strip()
    cmd = [sys.executable, "-c", CHILD, json.dumps(dict(n=args.n, p=args.p, m=args.m, steps=args.steps, data_devices=k))]
    if args.cpus:
        cmd = ["taskset", "-c", ",".join(str(i) for i in range(args.cpus))] + cmd
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    if res.returncode:
        raise SystemExit(res.stderr[-3000:])
    return json.loads([s for s in res.stdout.splitlines() if s.startswith("RESULT ")][-1][7:])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=65536)
    ap.add_argument("--p", type=int, default=100)
    ap.add_argument("--m", type=int, default=200)
    ap.add_argument("--steps", type=int, default=200, help="tune + draws of the timed fit (half each)")
    ap.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4], help="data_devices settings")
    ap.add_argument("--cpus", type=int, default=0, help="pin every process to this many cores (0: all)")
    ap.add_argument("--real-devices", action="store_true", help="use the devices JAX sees (GPUs), none forced")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "bart_rows.jsonl"))
    args = ap.parse_args(argv)
    base = None
    with open(args.out, "a") as f:
        for k in args.devices:
            r = run(args, k)
            base = r["step_ms"] if base is None else base
            rec = dict(n=args.n, p=args.p, m=args.m, steps=args.steps, data_devices=k, cpus=args.cpus or os.cpu_count(),
                       ratio_to_first=r["step_ms"] / base, time=time.strftime("%Y-%m-%d %H:%M:%S"), **r)
            f.write(json.dumps(rec) + "\n")
            print(f"data_devices={k}: {r['step_ms']:.2f} ms a step ({rec['ratio_to_first']:.2f}x the first setting), "
                  f"first fit {r['first_s']:.1f} s, sigma {r['sigma']:.5f}, mu[:5] "
                  + " ".join(f"{v:.4f}" for v in r["mu5"]), flush=True)


if __name__ == "__main__":
    main()
