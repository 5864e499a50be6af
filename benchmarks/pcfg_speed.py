"""Speed and memory of the BCART-PCFG programmes on Iris at 10 bins.

For each binning (the library's Binner with max_bins=10, and rank binning with
exactly 10 codes per feature, which gives 55**4 = 9.15M boxes) it measures, in a
fresh subprocess so that peak memory is that configuration's own:

* grammar build (boxes -> symbols and split table), wall seconds;
* log Q and log Q_max (inside programmes) after compilation, best of 3;
* sampling 10,000 exact posterior trees after compilation;
* peak resident memory of the process;
* a plain-Python memoised recursion over the same boxes (written here, below),
  computing log Q and log Q_max together, and the ratio to the JAX programme.

Usage::

    python benchmarks/pcfg_speed.py            # both binnings
    python benchmarks/pcfg_speed.py --skip-python
    python benchmarks/pcfg_speed.py --dtype float64 --out pcfg_speed_float64.json

``--dtype float64`` runs the programmes in float64 (turning on
``jax_enable_x64`` in the measuring subprocesses).  Prints a table and writes
benchmarks/results/pcfg_speed.json (or ``--out``, a file name under
benchmarks/results/).
"""
from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parent / "results"


def iris_codes(binning):
    from sklearn.datasets import load_iris

    from bayestrees.data import Binner

    X, y = load_iris(return_X_y=True)
    if binning == "binner":
        b = Binner(max_bins=10).fit(X)
        return b.transform(X).astype(np.int64), b.n_bins_.tolist(), y
    # rank binning: exactly 10 codes per feature
    ranks = np.argsort(np.argsort(X, axis=0, kind="stable"), axis=0, kind="stable")
    return (ranks * 10 // X.shape[0]).astype(np.int64), [10] * 4, y


def python_recursion(codes, y, n_classes, alpha, log_phi):
    """log Q and log Q_max by a plain memoised recursion over tight boxes (no numpy in the loop)."""
    rows_all = [tuple(int(v) for v in r) for r in codes]
    labels = [int(v) for v in y]
    d = len(rows_all[0])
    lg_a = n_classes * math.lgamma(alpha) - math.lgamma(n_classes * alpha)
    memo = {}

    def leaf(idx):
        c = [0] * n_classes
        for i in idx:
            c[labels[i]] += 1
        return sum(math.lgamma(ci + alpha) for ci in c) - math.lgamma(len(idx) + n_classes * alpha) - lg_a

    def rec(idx):
        box = tuple((min(rows_all[i][j] for i in idx), max(rows_all[i][j] for i in idx)) for j in range(d))
        hit = memo.get(box)
        if hit is not None:
            return hit
        lq = ll = leaf(idx)
        lm = ll
        seen = set()
        for j in range(d):
            vals = sorted({rows_all[i][j] for i in idx})
            for t in vals[:-1]:
                left = tuple(i for i in idx if rows_all[i][j] <= t)
                right = tuple(i for i in idx if rows_all[i][j] > t)
                if left in seen or right in seen:
                    continue
                seen.add(left)
                ql, ml = rec(left)
                qr, mr = rec(right)
                s = ql + qr - log_phi
                lq = max(lq, s) + math.log1p(math.exp(-abs(lq - s)))
                lm = max(lm, mr + ml - log_phi)
        memo[box] = (lq, lm)
        return lq, lm

    sys.setrecursionlimit(100000)
    out = rec(tuple(range(len(rows_all))))
    return out, len(memo)


def run_config(binning, skip_python, dtype="float32"):
    import jax

    if dtype == "float64":
        jax.config.update("jax_enable_x64", True)

    from bayestrees.inference.pcfg import dp as P
    from bayestrees.inference.pcfg.structure import build_box_structure

    codes, nb, y = iris_codes(binning)
    res = {"binning": binning, "n_bins": nb, "dtype": dtype}
    t0 = time.perf_counter()
    st = build_box_structure(codes, nb, np.eye(3)[y])
    res["build_s"] = time.perf_counter() - t0
    res.update(boxes=st.n_boxes, symbols=st.n_symbols, splits=st.n_splits, slots=st.n_slots)
    ds, root = P.device_structure(st, dtype)
    ll = P.log_leaf_marginals(ds.stats, "classification", 1.0)
    for mode in ("sum", "max"):
        t0 = time.perf_counter()
        q = P.log_inside(ll, 2.0, ds, mode).block_until_ready()
        res[f"compile_{mode}_s"] = time.perf_counter() - t0
        ts = []
        for _ in range(3):
            t0 = time.perf_counter()
            q = P.log_inside(ll, 2.0, ds, mode).block_until_ready()
            ts.append(time.perf_counter() - t0)
        res[f"log_q_{mode}_s"] = min(ts)
        res[f"log_q_{mode}_root"] = float(q[root])
    q = P.log_inside(ll, 2.0, ds, "sum")
    vals = P.leaf_values(ds.stats, "classification", 1.0)
    cap = P._bucket(2 * len(y)) - 1
    trees, _ = P.sample_trees(jax.random.key(0), q, ll, 2.0, vals, ds, root, cap, 10000)
    jax.block_until_ready(trees)
    ts = []
    for i in range(3):
        t0 = time.perf_counter()
        trees, _ = P.sample_trees(jax.random.key(i + 1), q, ll, 2.0, vals, ds, root, cap, 10000)
        jax.block_until_ready(trees)
        ts.append(time.perf_counter() - t0)
    res["sample_10000_s"] = min(ts)
    res["peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    res["device"] = str(jax.devices()[0])
    if not skip_python:
        t0 = time.perf_counter()
        (pq, pm), nmemo = python_recursion(codes, y, 3, 1.0, 2.0)
        res["python_s"] = time.perf_counter() - t0
        res["python_memo_boxes"] = nmemo
        res["python_log_q"], res["python_log_q_max"] = pq, pm
        res["ratio_python_over_jax"] = res["python_s"] / (res["log_q_sum_s"] + res["log_q_max_s"])
        res["ratio_python_over_jax_incl_build"] = res["python_s"] / (
            res["build_s"] + res["log_q_sum_s"] + res["log_q_max_s"])
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default=None)
    ap.add_argument("--skip-python", action="store_true")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--out", default="pcfg_speed.json", help="file name under benchmarks/results/")
    args = ap.parse_args()
    if args.config:
        print(json.dumps(run_config(args.config, args.skip_python, args.dtype)))
        return
    rows = []
    for cfg in ("binner", "rank10"):
        cmd = [sys.executable, __file__, "--config", cfg, "--dtype", args.dtype] + (
            ["--skip-python"] if args.skip_python else [])
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
        rows.append(json.loads(out))
        print(out, flush=True)
    print(f"{'binning':<8} {'boxes':>9} {'symbols':>8} {'build s':>8} {'logQ s':>7} {'Qmax s':>7} "
          f"{'10k trees s':>11} {'peak GB':>8} {'python s':>9} {'ratio':>7}")
    for r in rows:
        print(f"{r['binning']:<8} {r['boxes']:>9} {r['symbols']:>8} {r['build_s']:>8.2f} {r['log_q_sum_s']:>7.3f} "
              f"{r['log_q_max_s']:>7.3f} {r['sample_10000_s']:>11.3f} {r['peak_rss_gb']:>8.2f} "
              f"{r.get('python_s', float('nan')):>9.2f} {r.get('ratio_python_over_jax', float('nan')):>7.0f}")
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
