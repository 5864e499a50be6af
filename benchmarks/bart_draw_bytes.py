"""Bytes a kept BART draw costs, with its trees and without (``keep_trees=False``), issue 29.

Fits ``bt.BARTRegressor(m=200)`` (default ``max_depth=5``: 63 heap slots a tree) twice with one
seed on Friedman data (``--n`` rows, ``--p`` features), naming ``--n-new`` new rows
(``fit(X, y, X_predict=...)``): once keeping the trees, once not.  Per kept draw it counts

* ``result``: the bytes of every array of ``result_`` with leading dims ``(chain, draw)`` (what the
  fit holds in memory: trees or their summaries, ``sigma``, the function at the training rows and
  at the new rows, ``lp`` and the step's statistics), divided by ``chains * draws``;
* ``idata``: the bytes of every variable of ``idata_`` with a ``draw`` dim, divided the same way:
  what NetCDF writes uncompressed (the ``trees`` group's zero-memory broadcasts ``weight``,
  ``count``, ``missing_left`` and ``node_depth`` count in full, as they are written in full; ``mu``
  and the pointwise log-likelihood are float64 there);

and checks that the two fits' draws agree to the bit.  Chains are short: the bytes do not depend on
the chain's length.

    .venv/bin/python benchmarks/bart_draw_bytes.py
    .venv/bin/python benchmarks/bart_draw_bytes.py --n 1000 --p 10 --n-new 100

Prints a table and appends a JSON line to ``benchmarks/results/bart_draw_bytes.jsonl``.
"""
from __future__ import annotations

import argparse
import platform
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from forest_common import append_jsonl  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def _result_bytes(result, kept: int) -> float:
    lead = None
    total = 0
    arrays = [a for a in vars(result).values() if isinstance(a, np.ndarray)]
    arrays += [a for a in result.info if isinstance(a, np.ndarray)]  # the step's statistics (Info)
    for a in arrays:
        if a.ndim >= 2 and a.shape[0] * a.shape[1] == kept:
            lead = a.shape[:2] if lead is None else lead
            total += a.nbytes
    return total / kept


def _idata_bytes(idata, kept: int) -> tuple[float, dict]:
    per_group = {}
    for g in idata.groups():
        ds = idata[g]
        b = sum(int(v.nbytes) for v in ds.data_vars.values() if "draw" in v.dims)
        if b:
            per_group[g] = b / kept
    return sum(per_group.values()), per_group


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000, help="training rows (default 1000)")
    ap.add_argument("--p", type=int, default=10, help="features (default 10)")
    ap.add_argument("--n-new", type=int, default=100, help="rows named with X_predict (default 100)")
    ap.add_argument("--m", type=int, default=200, help="trees (default 200)")
    ap.add_argument("--draws", type=int, default=20, help="kept draws per chain (default 20)")
    ap.add_argument("--no-write", action="store_true", help="do not append to the results file")
    args = ap.parse_args(argv)

    import bayestrees as bt
    from bayestrees.convergence import ConvergenceWarning

    rng = np.random.default_rng(0)
    X = rng.random((args.n, args.p))
    y = (10 * np.sin(np.pi * X[:, 0] * X[:, 1]) + 20 * (X[:, 2] - 0.5) ** 2 + 10 * X[:, 3] + 5 * X[:, 4]
         + rng.normal(size=args.n))
    X_new = rng.random((args.n_new, args.p))
    kw = dict(m=args.m, draws=args.draws, tune=10, chains=1, random_state=0)
    out = {}
    for keep in (True, False):
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            est = bt.BARTRegressor(keep_trees=keep, **kw).fit(X, y, X_predict=X_new)
        kept = est.result_.sigma.size
        idata_b, groups = _idata_bytes(est.idata_, kept)
        out[keep] = dict(est=est, result=_result_bytes(est.result_, kept), idata=idata_b, groups=groups,
                         seconds=time.perf_counter() - t0)
    a, b = out[True]["est"], out[False]["est"]
    same = (np.array_equal(a.result_.sigma, b.result_.sigma) and np.array_equal(a.result_.fit, b.result_.fit)
            and np.array_equal(a.predict_draws(X_new), b.predict_draws(X_new)))
    S = 2 ** (a.max_depth + 1) - 1
    print(f"m = {args.m}, max_depth = {a.max_depth} (S = {S} slots), n = {args.n}, p = {args.p}, "
          f"n_new = {args.n_new}; draws bit-identical: {same}")
    print(f"{'keep_trees':>10}  {'result B/draw':>14}  {'idata B/draw':>13}  idata by group")
    for keep in (True, False):
        r = out[keep]
        print(f"{keep!s:>10}  {r['result']:>14,.0f}  {r['idata']:>13,.0f}  "
              + ", ".join(f"{g} {v:,.0f}" for g, v in r["groups"].items()))
    if not args.no_write:
        append_jsonl(RESULTS / "bart_draw_bytes.jsonl", {
            "date": time.strftime("%Y-%m-%d"), "host": platform.node(), "m": args.m, "max_depth": int(a.max_depth),
            "n": args.n, "p": args.p, "n_new": args.n_new, "bit_identical": bool(same),
            "result_bytes_per_draw": {"trees": out[True]["result"], "no_trees": out[False]["result"]},
            "idata_bytes_per_draw": {"trees": out[True]["idata"], "no_trees": out[False]["idata"]},
            "idata_groups": {"trees": out[True]["groups"], "no_trees": out[False]["groups"]}})
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
