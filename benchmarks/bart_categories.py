"""BART, Bayesian CART and BET on unordered categorical features: subsets of categories against the
ordering and one-hot.

Data:

    sim       a categorical feature ``g`` of ``--levels`` categories (default 12) whose effect is +2
              on a random half A of them where ``x1 > 0.5`` and on another random half B where
              ``x1 <= 0.5`` (0 elsewhere), plus ``sin(2 pi x0)``; ``x0, x1, x2`` uniform (``x2``
              noise), noise sd 0.5; 1,000 training rows, 2,000 held-out rows.  No one ordering of
              the categories makes both halves contiguous
    german    the German credit data as the package ships it (``bayestrees.datasets.load_german_credit``:
              1,000 rows, 13 categorical columns of 2-10 categories, 7 numeric; good / bad credit),
              random 70/30 splits

Methods, each ``BARTRegressor()`` / ``BARTClassifier()`` at its defaults (``--family bcart``:
``BayesianCARTRegressor()`` / ``BayesianCARTClassifier()``; ``--family bet``: ``BETRegressor()`` /
``BETClassifier()``):

    subsets   the categorical columns as categories: split by subsets of their categories
    ordered   each categorical column replaced by the rank of its category's mean training response
              (what BART did before subset splits: one ordering, splits as values)
    onehot    each categorical column replaced by one 0/1 column per category

Per (data set, split, method): held-out RMSE against the true function (sim) or log loss and
accuracy (german), fit seconds (with compilation: one fit each), R-hat of ``sigma`` (sim).  One
JSON line each to ``benchmarks/results/bart_categories.jsonl``.

    python benchmarks/bart_categories.py [--family bart] [--sets sim german] [--reps 3] [--levels 12]
        [--move-probs G P C S] [--quick]
"""
from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"


def load_sim(rng, levels):
    n = 3000
    g = rng.integers(0, levels, n)
    a, b = np.zeros(levels), np.zeros(levels)
    a[rng.permutation(levels)[: levels // 2]] = 2.0
    b[rng.permutation(levels)[: levels // 2]] = 2.0
    x = rng.uniform(size=(n, 3))
    f = np.where(x[:, 1] > 0.5, a[g], b[g]) + np.sin(2 * np.pi * x[:, 0])
    cols = {"g": np.array([f"c{k}" for k in g], object)}
    cols.update({f"x{j}": x[:, j] for j in range(3)})
    return cols, ["g"], f + 0.5 * rng.normal(size=n), f, 1000


def load_german():
    """The German credit data as shipped with the package (``bayestrees.datasets.load_german_credit``)."""
    from bayestrees.datasets import load_german_credit

    X, y, names, cat = load_german_credit()           # y 1: bad credit
    cols = {name: (np.array([f"c{int(v)}" for v in X[:, j]], object) if j in cat else X[:, j])
            for j, name in enumerate(names)}
    return cols, [names[j] for j in cat], y


def encode(cols, cats, y_train, train, method):
    """A DataFrame of the columns by ``method`` (the ordering learned on the training rows)."""
    import pandas as pd

    out = {}
    for name, v in cols.items():
        if name not in cats:
            out[name] = np.asarray(v, float)
        elif method == "subsets":
            out[name] = pd.Categorical(v)
        elif method == "ordered":
            levels = np.unique(v)
            means = {lv: (y_train[v[train] == lv].mean() if np.any(v[train] == lv) else np.mean(y_train))
                     for lv in levels}
            rank = {lv: i for i, lv in enumerate(sorted(levels, key=lambda lv: means[lv]))}
            out[name] = np.array([rank[e] for e in v], float)
        elif method == "onehot":
            for lv in np.unique(v):
                out[f"{name}={lv}"] = (v == lv).astype(float)
        else:
            raise ValueError(method)
    return pd.DataFrame(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--family", default="bart", choices=["bart", "bcart", "bet"])
    ap.add_argument("--sets", nargs="+", default=["sim", "german"])
    ap.add_argument("--methods", nargs="+", default=["subsets", "ordered", "onehot"])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--levels", type=int, default=12)
    ap.add_argument("--quick", action="store_true", help="short chains (a smoke run, not a record)")
    ap.add_argument("--move-probs", type=float, nargs=4, default=None,
                    help="BART's move_probs (grow, prune, change, swap); default: the estimators'")
    ap.add_argument("--slide", type=int, default=0,
                    help="BART's slide (with --move-probs giving the slide's probability in the change slot)")
    ap.add_argument("--out", default=str(RESULTS / "bart_categories.jsonl"))
    args = ap.parse_args()
    import bayestrees as bt

    reg, clf = {"bart": (bt.BARTRegressor, bt.BARTClassifier),
                "bcart": (bt.BayesianCARTRegressor, bt.BayesianCARTClassifier),
                "bet": (bt.BETRegressor, bt.BETClassifier)}[args.family]
    kw = (dict(m=20, draws=50, tune=50, chains=2) if args.family == "bart" else dict(draws=50, tune=50)) \
        if args.quick else {}
    if args.family != "bart" and (args.move_probs is not None or args.slide):
        raise SystemExit("--move-probs and --slide are BART's")
    if args.move_probs is not None:
        kw["move_probs"] = tuple(args.move_probs)
    if args.slide:
        kw["slide"] = int(args.slide)
    RESULTS.mkdir(exist_ok=True)
    for name in args.sets:
        for rep in range(args.reps):
            rng = np.random.default_rng(100 + rep)
            if name == "sim":
                cols, cats, y, f, n_train = load_sim(rng, args.levels)
                train = np.zeros(len(y), bool)
                train[:n_train] = True
            else:
                cols, cats, y = load_german()
                train = np.zeros(len(y), bool)
                train[rng.permutation(len(y))[: int(0.7 * len(y))]] = True
            for method in args.methods:
                X = encode(cols, cats, y[train], train, method)
                t0 = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    if name == "sim":
                        est = reg(random_state=rep, **kw).fit(X[train], y[train])
                    else:
                        est = clf(random_state=rep, **kw).fit(X[train], y[train])
                sec = time.perf_counter() - t0
                rec = dict(family=args.family, data=name, rep=rep, method=method, n_train=int(train.sum()),
                           d=X.shape[1], seconds=round(sec, 2), quick=bool(args.quick))
                if args.family == "bart":
                    rec.update(move_probs=list(kw.get("move_probs", (0.5, 0.5, 0.0, 0.0))), slide=int(kw.get("slide", 0)))
                if name == "sim":
                    rec["levels"] = args.levels
                    rec["rmse_f"] = float(np.sqrt(np.mean((est.predict(X[~train]) - f[~train]) ** 2)))
                    table = est.convergence_.table
                    rec["rhat_sigma"] = float(table["sigma"]["rhat"]) if "sigma" in table else None
                else:
                    p = np.clip(est.predict_proba(X[~train])[:, 1], 1e-12, 1 - 1e-12)
                    yt = y[~train]
                    rec["log_loss"] = float(-np.mean(yt * np.log(p) + (1 - yt) * np.log(1 - p)))
                    rec["accuracy"] = float(np.mean((p > 0.5) == yt))
                print(json.dumps(rec), flush=True)
                with open(args.out, "a") as fh:
                    fh.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
