"""BART for several classes (multinomial logit, log-linear BART) against the other classifiers.

Data sets (held-out rows; ``--reps`` random splits each):

    iris          scikit-learn's, 150 rows, 4 features, 3 classes; 100 train / 50 test
    wine          scikit-learn's, 178 rows, 13 features, 3 classes; 120 train / 58 test
    digits        scikit-learn's handwritten digits, 1,797 rows, 64 pixel features (0-16), 10 classes;
                  1,000 train / 797 test
    wine_quality  ``../shared/data/wine_quality.csv`` (red and white, 6,497 rows, 11 features and the
                  colour as 0/1), quality grouped into 3 classes (<= 5, 6, >= 7); 1,000 train / 2,000 test
    sim4          simulated: 5 uniform features, 4 classes with log-rates ``f_c(x)`` (a step, a sine, an
                  interaction, 0); 1,000 train / 2,000 test; the true probabilities are known

Methods: ``BARTClassifier()`` at its defaults (m = 200 trees per class, 4 chains of 1,000 + 1,000),
``BayesianCARTClassifier()`` and ``BayesianForestClassifier()`` at theirs, and scikit-learn's
multinomial logistic regression (standardised features), random forest (500 trees) and
histogram gradient boosting (defaults).  Per (data set, split, method): held-out log loss (mean per
row, probabilities clipped at 1e-12) and accuracy, fit seconds (compilation included for the first
fit of a shape; ``--warm`` fits BART once before timing), and for the MCMC families the largest
R-hat and smallest bulk ESS of ``lp`` and of the class probabilities at 10 held-out rows; for sim4
the mean total-variation distance of the predicted probabilities to the true ones.  One JSON line
per (data set, split, method) to ``benchmarks/results/bart_multiclass.jsonl``.

    python benchmarks/bart_multiclass.py [--sets iris wine digits wine_quality sim4] [--reps 3] [--quick]
"""
from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"


def load(name, data_dir, rng):
    from sklearn import datasets

    if name == "iris":
        X, y = datasets.load_iris(return_X_y=True)
        return X, y, 100, None
    if name == "wine":
        X, y = datasets.load_wine(return_X_y=True)
        return X, y, 120, None
    if name == "digits":
        X, y = datasets.load_digits(return_X_y=True)
        return X.astype(float), y, 1000, None
    if name == "wine_quality":
        import pandas as pd

        df = pd.read_csv(Path(data_dir) / "wine_quality.csv")
        q = df.pop("quality").to_numpy()
        df["color"] = (df["color"] == "red").astype(float)
        y = np.where(q <= 5, 0, np.where(q == 6, 1, 2))
        return df.to_numpy(float), y, 1000, None
    if name == "sim4":
        n = 3000
        X = rng.uniform(size=(n, 5))
        f = np.stack([2.0 * (X[:, 0] > 0.5), 1.5 * np.sin(2 * np.pi * X[:, 1]), 3.0 * X[:, 2] * X[:, 3],
                      np.zeros(n)], 1)
        p = np.exp(f - f.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        y = np.array([rng.choice(4, p=pi) for pi in p])
        return X, y, 1000, p
    raise ValueError(name)


def make(method, quick):
    import bayestrees as bt

    short = dict(draws=200, tune=200, chains=2) if quick else {}
    if method == "BART":
        return bt.BARTClassifier(random_state=0, **({"m": 50, **short} if quick else {}))
    if method == "BCART":
        return bt.BayesianCARTClassifier(random_state=0, **short)
    if method == "BF":
        return bt.BayesianForestClassifier(random_state=0)
    if method == "logistic":
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        return make_pipeline(StandardScaler(), LogisticRegression(max_iter=5000))
    if method == "RF":
        from sklearn.ensemble import RandomForestClassifier

        return RandomForestClassifier(500, random_state=0, n_jobs=2)
    if method == "HGB":
        from sklearn.ensemble import HistGradientBoostingClassifier

        return HistGradientBoostingClassifier(random_state=0)
    raise ValueError(method)


def _diagnostics(est, X_test):
    """Largest R-hat and smallest bulk ESS of lp and of the class probabilities at 10 held-out rows."""
    import arviz as az

    out = {}
    lp = az.convert_to_dataset({"lp": np.asarray(est.idata_.sample_stats["lp"])})
    out["rhat_lp"] = float(az.rhat(lp)["lp"])
    out["ess_lp"] = float(az.ess(lp)["lp"])
    draws = est.predict_draws(X_test[:10])                         # (chains * draws, 10, k)
    chains = int(est.idata_.posterior.sizes["chain"])
    d = draws.reshape((chains, -1) + draws.shape[1:])
    ds = az.convert_to_dataset({"p": d})
    out["rhat_proba_max"] = float(az.rhat(ds)["p"].max())
    out["ess_proba_min"] = float(az.ess(ds)["p"].min())
    return out


def run(sets, reps, methods, data_dir, quick, warm, out_path):
    import bayestrees as bt

    out_path.parent.mkdir(parents=True, exist_ok=True)
    for name in sets:
        for rep in range(reps):
            rng = np.random.default_rng(1000 + rep)
            X, y, n_train, p_true = load(name, data_dir, rng)
            idx = rng.permutation(len(y))
            n_test = min(len(y) - n_train, 2000)
            tr, te = idx[:n_train], idx[n_train:n_train + n_test]
            for method in methods:
                est = make(method, quick)
                if warm and method == "BART" and rep == 0:
                    make(method, quick).fit(X[tr], y[tr])
                t0 = time.perf_counter()
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    est.fit(X[tr], y[tr])
                seconds = time.perf_counter() - t0
                proba = est.predict_proba(X[te])
                classes = list(getattr(est, "classes_", np.unique(y[tr])))
                cols = np.searchsorted(classes, y[te])
                rec = dict(set=name, rep=rep, method=method, n_train=len(tr), n_test=len(te),
                           k=int(len(np.unique(y))), seconds=seconds,
                           log_loss=float(-np.mean(np.log(np.clip(proba[np.arange(len(te)), cols], 1e-12, 1)))),
                           accuracy=float(np.mean(np.asarray(classes)[proba.argmax(1)] == y[te])),
                           warnings=sorted({type(w.message).__name__ for w in caught}))
                if p_true is not None:
                    rec["tv_to_truth"] = float(0.5 * np.abs(proba - p_true[te]).sum(1).mean())
                if method in ("BART", "BCART"):
                    rec.update(_diagnostics(est, X[te]))
                    rec["elpd_loo"] = float(bt.loo(est.idata_).elpd_loo)
                print(json.dumps(rec), flush=True)
                with open(out_path, "a") as f:
                    f.write(json.dumps(rec) + "\n")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sets", nargs="+", default=["iris", "wine", "wine_quality", "sim4"])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--methods", nargs="+", default=["BART", "BCART", "BF", "logistic", "RF", "HGB"])
    p.add_argument("--data-dir", default=str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    p.add_argument("--quick", action="store_true", help="short chains (a check of the script)")
    p.add_argument("--warm", action="store_true", help="fit BART once before the timed fits of a data set")
    p.add_argument("--out", default=str(RESULTS / "bart_multiclass.jsonl"))
    a = p.parse_args(argv)
    run(a.sets, a.reps, a.methods, a.data_dir, a.quick, a.warm, Path(a.out))


if __name__ == "__main__":
    main()
