"""BART with missing values in X (missingness in attributes) against mean imputation and gradient boosting.

Data:

    friedman    Friedman's (1991) function of 10 uniform features (5 of them noise), noise sd 1;
                1,000 training rows, 2,000 held-out rows
    california  California housing (``bayestrees.datasets.load_california_housing``), a random
                2,000 training rows and 2,000 held-out rows, the value in units of $100,000

Entries are removed from every row (training and held-out) at rate 10%, 30% or 50%:

    mcar        completely at random, every feature
    value       depending on the value itself: in every feature, the entries above the feature's
                ``1 - rate`` quantile (the largest ``rate`` of them)

Methods: ``BARTRegressor()`` at its defaults with the missing entries in X (each rule says where
missing rows go: ``bayestrees.inference.missing``), the same after replacing each missing entry by
the training column's mean, and scikit-learn's ``HistGradientBoostingRegressor()`` with its native
missing values.  Per (data set, mechanism, rate, split, method): held-out RMSE against the observed
response, coverage of the 90% predictive interval (BART: each draw's function plus its noise; gradient
boosting: none), fit seconds, and BART's R-hat of sigma.  One JSON line each to
``benchmarks/results/bart_missing.jsonl``.

    python benchmarks/bart_missing.py [--sets friedman california] [--rates 0.1 0.3 0.5] [--reps 2] [--quick]
                                      [--bart k=1 beta=1] [--methods BART-MIA HGB]

``--bart NAME=VALUE ...`` sets ``BARTRegressor``'s arguments (both BART methods; recorded as ``bart``),
``--methods`` runs a subset of the three.
"""
from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"


def load(name, rng):
    if name == "friedman":
        n = 3000
        X = rng.uniform(size=(n, 10))
        f = 10 * np.sin(np.pi * X[:, 0] * X[:, 1]) + 20 * (X[:, 2] - 0.5) ** 2 + 10 * X[:, 3] + 5 * X[:, 4]
        return X, f + rng.normal(size=n), 1000
    if name == "california":
        from bayestrees.datasets import load_california_housing

        X, y, _ = load_california_housing()
        y = y / 1e5
        idx = rng.permutation(len(y))[:4000]
        return X[idx], y[idx], 2000
    raise ValueError(name)


def remove(X, rate, mechanism, rng):
    X = X.copy()
    if mechanism == "mcar":
        X[rng.random(X.shape) < rate] = np.nan
    elif mechanism == "value":
        X[X > np.quantile(X, 1 - rate, axis=0)] = np.nan
    else:
        raise ValueError(mechanism)
    return X


def run(sets, rates, mechanisms, reps, quick, out_path, bart=None, methods=("BART-MIA", "BART-mean", "HGB")):
    import arviz as az
    from sklearn.ensemble import HistGradientBoostingRegressor

    import bayestrees as bt

    short = dict(m=50, draws=200, tune=200, chains=2) if quick else {}
    short.update(bart or {})
    out_path.parent.mkdir(parents=True, exist_ok=True)
    for name in sets:
        for mechanism in mechanisms:
            for rate in rates:
                for rep in range(reps):
                    rng = np.random.default_rng(7000 + rep)
                    X, y, n_train = load(name, rng)
                    Xm = remove(X, rate, mechanism, rng)
                    tr, te = slice(0, n_train), slice(n_train, None)
                    means = np.nanmean(Xm[tr], axis=0)
                    imputed = np.where(np.isnan(Xm), means, Xm)
                    for method, Xuse in (("BART-MIA", Xm), ("BART-mean", imputed), ("HGB", Xm)):
                        if method not in methods:
                            continue
                        t0 = time.perf_counter()
                        with warnings.catch_warnings(record=True) as caught:
                            warnings.simplefilter("always")
                            if method == "HGB":
                                est = HistGradientBoostingRegressor(random_state=0).fit(Xuse[tr], y[tr])
                            else:
                                est = bt.BARTRegressor(random_state=0, **short).fit(Xuse[tr], y[tr])
                        seconds = time.perf_counter() - t0
                        pred = est.predict(Xuse[te])
                        rec = dict(set=name, mechanism=mechanism, rate=rate, rep=rep, method=method,
                                   n_train=n_train, n_test=len(y[te]), seconds=seconds,
                                   missing_share=float(np.isnan(Xm).mean()),
                                   rmse=float(np.sqrt(np.mean((pred - y[te]) ** 2))),
                                   warnings=sorted({type(w.message).__name__ for w in caught}))
                        if bart and method != "HGB":
                            rec["bart"] = bart
                        if method != "HGB":
                            f = est.predict_draws(Xuse[te])
                            sig = est.idata_.posterior["sigma"].values.reshape(-1, 1)
                            ynew = f + sig * np.random.default_rng(1).normal(size=f.shape)
                            lo, hi = np.quantile(ynew, [0.05, 0.95], axis=0)
                            rec["coverage90"] = float(np.mean((y[te] >= lo) & (y[te] <= hi)))
                            rec["rhat_sigma"] = float(az.rhat(az.convert_to_dataset(
                                {"s": est.idata_.posterior["sigma"].values}))["s"])
                        print(json.dumps(rec), flush=True)
                        with open(out_path, "a") as fh:
                            fh.write(json.dumps(rec) + "\n")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sets", nargs="+", default=["friedman", "california"])
    p.add_argument("--rates", nargs="+", type=float, default=[0.1, 0.3, 0.5])
    p.add_argument("--mechanisms", nargs="+", default=["mcar", "value"])
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--quick", action="store_true", help="short chains (a check of the script)")
    p.add_argument("--out", default=str(RESULTS / "bart_missing.jsonl"))
    p.add_argument("--bart", nargs="*", default=[], metavar="NAME=VALUE",
                   help="BARTRegressor arguments for both BART methods, e.g. k=1 beta=1 (numbers or JSON)")
    p.add_argument("--methods", nargs="+", default=["BART-MIA", "BART-mean", "HGB"],
                   choices=["BART-MIA", "BART-mean", "HGB"])
    a = p.parse_args(argv)
    run(a.sets, a.rates, a.mechanisms, a.reps, a.quick, Path(a.out), _parse_params(a.bart), tuple(a.methods))


def _parse_params(items):
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--bart takes NAME=VALUE, got {item!r}")
        try:
            out[name] = json.loads(value)
        except json.JSONDecodeError:
            out[name] = value
    return out


if __name__ == "__main__":
    main()
