"""Reproduce Quadrianto & Ghahramani (2015), Tables 1/2: safe-Bayesian random forest.

Protocol: 80/20 stratified split repeated 5 times, 1000 prior trees,
lam = 0.475, m = 5, alpha = 1.  For each split one fit gives the S-Bayes RF
(beta = m / N), the best tree and BMA (beta = 1) from the same trees; the
operating-curve choice of m ("auto", 20% validation split of the training
rows) and scikit-learn's random forest (Gini, max_features = 0.5 D, 1000
trees) run in the same process.  Prints accuracy (mean +- sd, %) and mean
test log predictive probability, fit+predict wall time after compilation,
and writes benchmarks/results/safebayes_paper.json and one operating-curve
figure per data set.

Usage::

    .venv/bin/python benchmarks/safebayes_paper.py [--datasets iris wine ...] [--repeats 5] [--trees 1000]
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

import bayestrees as bt

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
OUT = Path(__file__).resolve().parent / "results"

PAPER = {"australian": 87.39, "breast-cancer": 97.95, "diabetes": 74.28, "heart": 87.41, "ionosphere": 91.14,
         "german": 72.40, "iris": 96.67, "wine": 99.44}


def load(name):
    """(X, y) of a benchmark set, parsed from the files as published."""
    import pandas as pd

    if name == "australian":
        df = pd.read_csv(DATA / "australian.dat", sep=r",\s*", engine="python")
        return df.iloc[:, :-1].to_numpy(float), df.iloc[:, -1].to_numpy()
    if name == "breast-cancer":
        df = pd.read_csv(DATA / "breast_cancer_wisconsin.data", header=None, na_values="?").dropna()
        return df.iloc[:, 1:10].to_numpy(float), df.iloc[:, 10].to_numpy()
    if name == "diabetes":
        df = pd.read_csv(DATA / "pima_diabetes.csv", header=None)
        return df.iloc[:, :-1].to_numpy(float), df.iloc[:, -1].to_numpy()
    if name == "heart":
        df = pd.read_csv(DATA / "statlog_heart.dat", sep=r"\s+")
        return df.iloc[:, :-1].to_numpy(float), df.iloc[:, -1].to_numpy()
    if name == "ionosphere":
        df = pd.read_csv(DATA / "ionosphere.csv", header=None)
        return df.iloc[:, :-1].to_numpy(float), df.iloc[:, -1].to_numpy()
    if name == "german":
        # 20 columns: the 7 numeric attributes as they are and the 13 categorical
        # attributes as ordinal codes (A11 < A12 < ...), the ordering that a
        # probability-integral-transform tree sees.  german.numer's exact 24-column
        # layout (extra indicator columns) is not rebuilt: see docs/safebayes.md.
        df = pd.read_csv(DATA / "german.csv", header=None)
        cols = []
        for j in range(20):
            c = df.iloc[:, j]
            if not pd.api.types.is_numeric_dtype(c):
                cols.append(c.str.extract(r"A(\d+)")[0].astype(float).to_numpy())
            else:
                cols.append(c.to_numpy(float))
        return np.column_stack(cols), df.iloc[:, 20].to_numpy()
    if name == "iris":
        from sklearn.datasets import load_iris

        return load_iris(return_X_y=True)
    if name == "wine":
        from sklearn.datasets import load_wine

        return load_wine(return_X_y=True)
    raise ValueError(name)


def _logpred(p, y, classes):
    idx = np.searchsorted(classes, y)
    return float(np.mean(np.log(np.clip(p[np.arange(len(y)), idx], 1e-15, 1.0))))


def run(names, repeats, n_trees, seed):
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.model_selection import train_test_split

    results = {}
    for name in names:
        X, y = load(name)
        rec = {k: {"acc": [], "lp": []} for k in ("sbayes", "best", "bma", "auto", "rf")}
        rec["time_sbayes"], rec["time_rf"], rec["m_auto"] = [], [], []
        rec["oracle_acc"], rec["oracle_m"] = [], []
        curves = []
        for r in range(repeats):
            Xa, Xb, ya, yb = train_test_split(X, y, test_size=0.2, random_state=r, stratify=y)
            clf = bt.SafeBayesForestClassifier(n_trees, split_prob=0.475, effective_sample_size=5, alpha=1.0,
                                               random_state=seed)
            if r == 0:  # warm-up: compile for this shape bucket (and draw/cache the prior trees)
                clf.fit(Xa, ya).predict_proba(Xb)
            t0 = time.perf_counter()
            clf.fit(Xa, ya)
            p = clf.predict_proba(Xb)
            rec["time_sbayes"].append(time.perf_counter() - t0)
            for key, pp in (("sbayes", p), ("best", clf.predict_proba(Xb, "best")),
                            ("bma", clf.predict_proba(Xb, "bma"))):
                rec[key]["acc"].append(float(np.mean(clf.classes_[np.argmax(pp, 1)] == yb)))
                rec[key]["lp"].append(_logpred(pp, yb, clf.classes_))
            curve = clf.operating_curve(Xb, yb)
            curves.append(curve)
            # best test accuracy over m (chosen on the test set: a diagnostic, not an estimate)
            ib = int(np.argmax(curve["accuracy"]))
            rec["oracle_acc"].append(float(curve["accuracy"][ib]))
            rec["oracle_m"].append(int(curve["m"][ib]))
            auto = bt.SafeBayesForestClassifier(n_trees, effective_sample_size="auto", random_state=seed).fit(Xa, ya)
            pa = auto.predict_proba(Xb)
            rec["auto"]["acc"].append(float(np.mean(auto.classes_[np.argmax(pa, 1)] == yb)))
            rec["auto"]["lp"].append(_logpred(pa, yb, auto.classes_))
            rec["m_auto"].append(auto.effective_sample_size_)
            rf = RandomForestClassifier(n_estimators=n_trees, criterion="gini", max_features=0.5, n_jobs=2,
                                        random_state=r)
            t0 = time.perf_counter()
            rf.fit(Xa, ya)
            prf = rf.predict_proba(Xb)
            rec["time_rf"].append(time.perf_counter() - t0)
            rec["rf"]["acc"].append(float(np.mean(rf.classes_[np.argmax(prf, 1)] == yb)))
            rec["rf"]["lp"].append(_logpred(prf, yb, rf.classes_))
        _plot_trees(name, clf)
        rec["n"], rec["d"] = int(X.shape[0]), int(X.shape[1])
        rec["paper"] = PAPER.get(name)
        results[name] = rec
        _plot_curve(name, curves)
        _print_row(name, rec)
    return results


def _plot_curve(name, curves):
    try:
        import matplotlib

        matplotlib.use("Agg")
        from bayestrees.plots_safebayes import plot_operating_curve
    except ImportError:
        return
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(9, 3.2))
    for c in curves:
        plot_operating_curve(c, ax=ax, alpha=0.5)
    fig.suptitle(f"{name}: test-set operating curves (5 splits)")
    fig.tight_layout()
    OUT.mkdir(parents=True, exist_ok=True)
    fig.savefig(OUT / f"safebayes_curve_{name}.png", dpi=90)
    plt.close(fig)


def _plot_trees(name, clf):
    """Highest- and lowest-weight trees of the last split's fit (the paper's Figure 3)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        from bayestrees.plots_safebayes import plot_extreme_trees
    except ImportError:
        return
    import matplotlib.pyplot as plt

    fig = plot_extreme_trees(clf, n=3)
    OUT.mkdir(parents=True, exist_ok=True)
    fig.savefig(OUT / f"safebayes_trees_{name}.png", dpi=90)
    plt.close(fig)


def _ms(v, scale=100.0):
    v = np.asarray(v) * scale
    return f"{v.mean():6.2f}+-{v.std(ddof=1) if len(v) > 1 else 0.0:5.2f}"


def _print_row(name, rec):
    print(f"{name:14s} paper {rec['paper']!s:>6}  S-Bayes {_ms(rec['sbayes']['acc'])}  best {_ms(rec['best']['acc'])}"
          f"  BMA {_ms(rec['bma']['acc'])}  auto {_ms(rec['auto']['acc'])} (m~{np.median(rec['m_auto']):.0f})"
          f"  RF {_ms(rec['rf']['acc'])}", flush=True)
    print(f"{'':14s} log pred:     S-Bayes {_ms(rec['sbayes']['lp'], 1)}  best {_ms(rec['best']['lp'], 1)}"
          f"  BMA {_ms(rec['bma']['lp'], 1)}  auto {_ms(rec['auto']['lp'], 1)}  RF {_ms(rec['rf']['lp'], 1)}",
          flush=True)
    print(f"{'':14s} test-curve maximum (diagnostic, m picked on test): {_ms(rec['oracle_acc'])} at m~"
          f"{np.median(rec['oracle_m']):.0f}", flush=True)
    print(f"{'':14s} time fit+predict: S-Bayes {np.mean(rec['time_sbayes']):.3f}s  RF {np.mean(rec['time_rf']):.3f}s",
          flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--datasets", nargs="*", default=list(PAPER))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--trees", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    from bayestrees.inference.prior_trees import sample_prior_forest, truncated_mass
    import jax

    t0 = time.perf_counter()
    jax.block_until_ready(sample_prior_forest(jax.random.key(0), a.trees, 10, 0.475, 511))
    t1 = time.perf_counter()
    jax.block_until_ready(sample_prior_forest(jax.random.key(1), a.trees, 10, 0.475, 511))
    t_sample = time.perf_counter() - t1
    print(f"prior sampling of {a.trees} trees (capacity 1023): compile+run {t1 - t0:.2f}s, run {t_sample:.2f}s; "
          f"truncated prior mass {truncated_mass(0.475, 511):.2e}", flush=True)
    res = run(a.datasets, a.repeats, a.trees, a.seed)
    OUT.mkdir(parents=True, exist_ok=True)
    with open(OUT / "safebayes_paper.json", "w") as fh:
        json.dump({"args": vars(a), "prior_sampling_s": t_sample, "results": res}, fh, indent=1)
    n_order = sum(np.mean(r["sbayes"]["acc"]) >= np.mean(r["bma"]["acc"]) >= np.mean(r["best"]["acc"])
                  for r in res.values())
    within = sum(abs(100 * np.mean(r["sbayes"]["acc"]) - r["paper"]) <= 2 for r in res.values() if r["paper"])
    print(f"ordering S-Bayes >= BMA >= best on {n_order}/{len(res)} sets; within 2 points of the paper on "
          f"{within}/{len(res)}")


if __name__ == "__main__":
    main()
