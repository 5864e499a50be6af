"""What ``BARTRegressor.fit`` spends beyond the sampler's steps, and what the first ``idata_`` costs.

Friedman's function at ``n = 1,024``, ``p = 100``; ``BARTRegressor(m=200, chains=4, tune=1000,
draws=1000)`` after a short fit that compiles the programs.  Per fit: the whole ``fit``, the
sampling (``result_.seconds``), the rest, then the first access of ``idata_``.

Usage (from the repository root)::

    .venv/bin/python benchmarks/bart_fit_overhead.py [--n 1024] [--repeats 2]
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=2)
    a = ap.parse_args(argv)
    import bayestrees as bt
    from bcart_speed import friedman

    warnings.simplefilter("ignore")
    X, y = friedman(np.random.default_rng(0), a.n, 100)
    kw = dict(m=200, chains=4, tune=1000, draws=1000, random_state=0)
    bt.BARTRegressor(**{**kw, "tune": 10, "draws": 10}).fit(X, y)
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        reg = bt.BARTRegressor(**kw).fit(X, y)
        total = time.perf_counter() - t0
        t0 = time.perf_counter()
        reg.idata_
        first = time.perf_counter() - t0
        print(f"fit {total:.2f} s, sampling {reg.result_.seconds:.2f} s, the rest {total - reg.result_.seconds:.2f} s; "
              f"first idata_ {first:.2f} s", flush=True)


if __name__ == "__main__":
    main()
