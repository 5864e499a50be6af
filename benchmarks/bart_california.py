"""BART on California housing, beside this library's Bayesian forest and scikit-learn's random forest.

The forests' protocol (``benchmarks/forest_california.py``, Taddy et al. 2015): shuffled 10-fold
CV, ``KFold(10, shuffle=True, random_state=5807)``; ``--folds`` picks the folds (default ``0``:
one fold, about 18,600 training rows and 2,064 test rows, 8 features).  Per fold:

* BART: ``bt.BARTRegressor()`` at its defaults (200 trees, 4 chains of 1,000 + 1,000 steps unless
  ``--chains``/``--tune``/``--draws``), the posterior mean;
* BF: ``bt.BayesianForestRegressor(draws=100, min_samples_leaf=2)`` (the forests' benchmark setting);
* sklearn-RF: ``RandomForestRegressor(100, min_samples_leaf=2, n_jobs=-1)``.

Reported: test RMSE (in the response's units, dollars), fit seconds (BART's includes compilation
and is also given as sampling seconds), and for BART the R-hat of ``sigma`` and the coverage of its
90% predictive interval on the test fold.

    .venv/bin/python benchmarks/bart_california.py                 # fold 0
    .venv/bin/python benchmarks/bart_california.py --folds 0 1 2

Appends JSON lines to ``benchmarks/results/bart_california.jsonl``.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from forest_california import SEED, load  # noqa: E402
from forest_common import append_jsonl, data_dir, machine, rmse  # noqa: E402

import bayestrees as bt  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--folds", type=int, nargs="+", default=[0])
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--tune", type=int, default=1000)
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--out", default=str(RESULTS / "bart_california.jsonl"))
    args = ap.parse_args()
    from sklearn.ensemble import RandomForestRegressor
    from sklearn.model_selection import KFold

    X, y, _ = load(data_dir())
    folds = list(KFold(10, shuffle=True, random_state=SEED).split(X))
    rows = []
    print(f"{'fold':>4} {'method':>10} {'RMSE':>9} {'fit s':>7} {'note'}")
    for f in args.folds:
        tr, te = folds[f]
        load0 = os.getloadavg()
        t0 = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            bart = bt.BARTRegressor(chains=args.chains, tune=args.tune, draws=args.draws, random_state=f).fit(X[tr], y[tr])
        t_bart = time.perf_counter() - t0
        pred = bart.predict(X[te])
        # the 90% predictive interval: each draw's function plus its noise (sigma from the same draw)
        mu = bart.predict_draws(X[te])                                    # (chains * draws, n)
        sig = np.asarray(bart.idata_.posterior["sigma"]).reshape(-1, 1)
        ypred = mu + sig * np.random.default_rng(f).standard_normal(mu.shape)
        lo, hi = np.quantile(ypred, [0.05, 0.95], axis=0)
        cover = float(np.mean((y[te] >= lo) & (y[te] <= hi)))
        rhat = float(bart.convergence_.table["sigma"]["rhat"])
        rec = dict(fold=f, method="BART", rmse=rmse(pred, y[te]), fit_s=t_bart, sampling_s=float(bart.result_.seconds),
                   rhat_sigma=rhat, coverage90=cover, chains=args.chains, tune=args.tune, draws=args.draws,
                   convergence_warning=any("converged" in str(w.message) for w in caught))
        rows.append(rec)
        print(f"{f:>4} {'BART':>10} {rec['rmse']:9.0f} {t_bart:7.1f} R-hat sigma {rhat:.3f}, 90% predictive "
              f"coverage {cover:.3f}, sampling {rec['sampling_s']:.1f} s", flush=True)
        t0 = time.perf_counter()
        bf = bt.BayesianForestRegressor(draws=100, min_samples_leaf=2, random_state=f).fit(X[tr], y[tr])
        rec = dict(fold=f, method="BF", rmse=rmse(bf.predict(X[te]), y[te]), fit_s=time.perf_counter() - t0)
        rows.append(rec)
        print(f"{f:>4} {'BF':>10} {rec['rmse']:9.0f} {rec['fit_s']:7.1f}", flush=True)
        t0 = time.perf_counter()
        rf = RandomForestRegressor(100, min_samples_leaf=2, n_jobs=-1, random_state=f).fit(X[tr], y[tr])
        rec = dict(fold=f, method="sklearn-RF", rmse=rmse(rf.predict(X[te]), y[te]), fit_s=time.perf_counter() - t0)
        rows.append(rec)
        print(f"{f:>4} {'sklearn-RF':>10} {rec['rmse']:9.0f} {rec['fit_s']:7.1f}", flush=True)
        for r in rows[-3:]:
            r.update(load_before=[round(x, 2) for x in load0], **machine())
    for row in rows:
        append_jsonl(args.out, row)
    print(f"\nappended {len(rows)} lines to {os.path.relpath(args.out)}")


if __name__ == "__main__":
    main()
