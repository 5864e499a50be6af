"""BART's whole ``fit`` against bartz's whole ``mc_gbart``, in one process, compilation apart.

What a user waits for: ``bt.BARTRegressor(...).fit(X, y)`` (binning, scaling, the sampler, moving
the kept draws to the host, the convergence table) against ``bartz.BART.mc_gbart(X, y, ...)`` (its
binning, the sampler, its kept draws and training-row predictions), the priors made the same as in
``benchmarks/bart_bartz.py`` (``m = 200``, 99 cut points, ``sigma_hat`` given to both).  Friedman's
function of 5 features plus noise features (``p = 100``).  Each side fits once to compile, then
``--repeats`` timed fits, the two sides taking turns; the median is reported, and the ratio
ours / bartz.  Needs bartz (a benchmark-only install: ``.venv-bartz``, see ``bart_bartz.py``).

    .venv-bartz/bin/python benchmarks/bart_whole_fit.py --n 1024 32768 --chains 1
    .venv-bartz/bin/python benchmarks/bart_whole_fit.py --n 1024 --chains 4

Records: ``benchmarks/results/bart_whole_fit.jsonl``; the lab notes (``docs/lab-notes/performance.md``).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bart_bartz import MAX_BINS, M_TREES, bartz_kw, friedman, ols_sigma_hat  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "bart_whole_fit.jsonl"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[1024])
    ap.add_argument("--p", type=int, default=100)
    ap.add_argument("--chains", type=int, default=1)
    ap.add_argument("--tune", type=int, default=500)
    ap.add_argument("--draws", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(RESULTS))
    a = ap.parse_args(argv)
    import jax
    from bartz.BART import mc_gbart

    import bayestrees as bt
    from bayestrees.convergence import ConvergenceWarning

    for n in a.n:
        rng = np.random.default_rng(0)
        X, y = friedman(rng, n, a.p)
        sh = ols_sigma_hat(X, y)
        c = a.chains

        def ours(seed):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                return bt.BARTRegressor(m=M_TREES, max_bins=MAX_BINS, sigma_hat=sh, chains=c, tune=a.tune,
                                        draws=a.draws, chain_method="vectorized" if c > 1 else "auto",
                                        random_state=seed).fit(X, y)

        def theirs(seed):
            out = mc_gbart(X, y, mc_cores=c, ndpost=c * a.draws, nskip=a.tune, keepevery=1, seed=seed,
                           **bartz_kw(X, y, sh))
            jax.block_until_ready(out.yhat_train)
            return out

        t = {}
        for name, f in (("ours", ours), ("bartz", theirs)):
            t0 = time.perf_counter()
            f(0)
            t[name + "_first"] = time.perf_counter() - t0
        times = {"ours": [], "bartz": []}
        for r in range(a.repeats):
            for name, f in ((("ours", ours), ("bartz", theirs)) if r % 2 == 0 else (("bartz", theirs), ("ours", ours))):
                t0 = time.perf_counter()
                f(r + 1)
                times[name].append(time.perf_counter() - t0)
        med = {k: statistics.median(v) for k, v in times.items()}
        rec = dict(n=n, p=a.p, m=M_TREES, chains=c, tune=a.tune, draws=a.draws, ours_s=med["ours"],
                   bartz_s=med["bartz"], ratio=med["ours"] / med["bartz"], ours_all=times["ours"],
                   bartz_all=times["bartz"], **t, cpus=os.cpu_count(), backend=jax.default_backend(),
                   time=time.strftime("%Y-%m-%d %H:%M:%S"))
        with open(a.out, "a") as fh:
            fh.write(json.dumps(rec) + "\n")
        print(f"n={n:,} chains={c}: whole fit ours {med['ours']:.2f} s, bartz {med['bartz']:.2f} s, ratio "
              f"{rec['ratio']:.2f} (first fits with compilation {t['ours_first']:.1f} / {t['bartz_first']:.1f} s)",
              flush=True)


if __name__ == "__main__":
    main()
