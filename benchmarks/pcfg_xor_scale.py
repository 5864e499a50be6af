"""Largest hidden-XOR training set the row programme handles on this machine.

20 binary features, label = XOR of the first four.  For each n: grammar build
(row sets reachable by splitting), inside programmes, MAP tree, accuracy of the
MAP tree on 2,000 fresh rows, peak memory.  Each n runs in a fresh subprocess
with a wall-clock limit.

Usage::

    python benchmarks/pcfg_xor_scale.py 128 192 256 [--limit 900]

Prints a table and writes benchmarks/results/pcfg_xor_scale.json.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parent / "results"


def one(n):
    from bayestrees.inference.pcfg.fit import fit_posterior
    from bayestrees.tree import n_leaves, predict

    rng = np.random.default_rng(0)
    X = rng.integers(0, 2, size=(n, 20))
    y = X[:, :4].sum(1) % 2
    Xt = rng.integers(0, 2, size=(2000, 20))
    yt = Xt[:, :4].sum(1) % 2
    t0 = time.perf_counter()
    post = fit_posterior(X, [2] * 20, y, kind="classification", n_classes=2, method="row")
    fit_s = time.perf_counter() - t0
    tree, _ = post.map_tree()
    acc = float(np.mean(np.argmax(np.asarray(predict(tree, Xt.astype(np.uint8))), -1) == yt))
    st = post.structure
    return {"n": n, "symbols": st.n_symbols, "splits": st.n_splits, "fit_s": fit_s, "map_accuracy": acc,
            "map_leaves": int(n_leaves(tree)), "map_nodes": int(tree.n_nodes),
            "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ns", nargs="*", type=int, default=[64, 128, 192, 256])
    ap.add_argument("--one", type=int, default=None)
    ap.add_argument("--limit", type=int, default=900)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one)))
        return
    rows = []
    for n in args.ns:
        try:
            out = subprocess.run([sys.executable, __file__, "--one", str(n)], capture_output=True, text=True,
                                 timeout=args.limit, check=True).stdout.strip().splitlines()[-1]
            rows.append(json.loads(out))
        except subprocess.TimeoutExpired:
            rows.append({"n": n, "status": f"not finished within {args.limit} s"})
        except subprocess.CalledProcessError as e:
            rows.append({"n": n, "status": "failed: " + e.stderr.strip().splitlines()[-1]})
        print(json.dumps(rows[-1]), flush=True)
        OUT.mkdir(parents=True, exist_ok=True)
        (OUT / "pcfg_xor_scale.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
