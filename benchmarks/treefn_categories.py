"""Tree functions on an unordered categorical feature: subsets of categories against the ordering and one-hot.

The simulated set of ``benchmarks/bart_categories.py`` (``sim``: a feature of ``--levels``
categories whose effect is +2 on one random half of them where ``x1 > 0.5`` and on another where
``x1 <= 0.5``, plus ``sin(2 pi x0)``; 1,000 training rows, 2,000 held-out rows, noise sd 0.5), fitted
as a NumPyro model with ``bt.bart_function`` (``m`` trees, a HalfNormal noise sd, the response
centred and scaled) at ``bt.sample_model``'s defaults.  Methods:

    subsets   the category codes with ``categorical_features=[0]``
    ordered   each category replaced by the rank of its mean training response
    onehot    one 0/1 column per category

Per (replication, method): held-out RMSE of the posterior mean function against the true one, the
largest R-hat of the noise sd, seconds with compilation.  One JSON line each to
``benchmarks/results/treefn_categories.jsonl``.

    python benchmarks/treefn_categories.py [--levels 12] [--reps 1] [--m 50]
"""
from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np

from bart_categories import encode, load_sim

RESULTS = Path(__file__).resolve().parent / "results"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--levels", type=int, default=12)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--m", type=int, default=50)
    ap.add_argument("--methods", nargs="+", default=["subsets", "ordered", "onehot"])
    ap.add_argument("--out", default=str(RESULTS / "treefn_categories.jsonl"))
    args = ap.parse_args()
    import arviz as az
    import numpyro
    import numpyro.distributions as dist

    import bayestrees as bt

    m = int(args.m)
    for rep in range(args.reps):
        rng = np.random.default_rng(100 + rep)
        cols, cats, y, f, n_train = load_sim(rng, args.levels)
        train = np.zeros(len(y), bool)
        train[:n_train] = True
        loc, scale = float(y[train].mean()), float(y[train].std())
        for method in args.methods:
            frame = encode(cols, cats, y[train], train, method)
            if method == "subsets":
                frame["g"] = frame["g"].cat.codes
                frame = frame[["g"] + [c for c in frame.columns if c != "g"]]
            X = frame.to_numpy(np.float32)
            categorical = [0] if method == "subsets" else None

            def model(X, y=None):
                g = bt.bart_function("f", X, m=m, leaf_sd=0.5 / np.sqrt(m), categorical_features=categorical)
                s = numpyro.sample("s", dist.HalfNormal(1.0))
                numpyro.sample("y", dist.Normal(g, s), obs=y)

            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fit = bt.sample_model(model, X[train], ((y[train] - loc) / scale).astype(np.float32), random_seed=rep,
                                      log_likelihood=False)
            sec = time.perf_counter() - t0
            pred = loc + scale * fit.function("f", X[~train]).mean((0, 1))
            rec = dict(rep=rep, method=method, levels=args.levels, m=m, n_train=int(train.sum()), d=X.shape[1],
                       seconds=round(sec, 2), rmse_f=float(np.sqrt(np.mean((pred - f[~train]) ** 2))),
                       rhat_s=float(az.rhat(az.convert_to_dataset({"s": np.asarray(fit.idata.posterior["s"])}))["s"]))
            print(json.dumps(rec), flush=True)
            RESULTS.mkdir(exist_ok=True)
            with open(args.out, "a") as fh:
                fh.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
