"""California housing 10-fold CV (Taddy et al. 2015, Section 5, Table 1).

Protocol: shuffled 10-fold CV, ``KFold(10, shuffle=True, random_state=5807)``;
``medianIncome`` multiplied by 1e4 (cosmetic, as in the paper); RMSE in dollars.
Every forest has 100 trees and ``min_samples_leaf=2``:

    DT    one CART, unit weights               BayesianForestRegressor(1, weights="none")
    RF    Breiman's random forest (bootstrap)  BayesianForestRegressor(weights="multinomial")
    BF    Bayesian forest (Exp(1) weights)     BayesianForestRegressor()
    ET    extra trees                          BayesianForestRegressor(weights="none", splitter="random")
    SSF   sub-sample forest, 5 blocks          SubSampleForestRegressor(n_blocks=5)
    EBF   empirical Bayesian forest            EmpiricalBayesianForestRegressor(trunk_min_samples_leaf=3000)
    sklearn-RF  sklearn.ensemble.RandomForestRegressor(min_samples_leaf=2, n_estimators=100, n_jobs=2)
    BCART Bayesian CART by MCMC (issue: Chipman et al. 1998)
          BayesianCARTRegressor(chains=--bcart-chains, random_state=seed) on --bcart-rows training
          rows drawn at random (all of them with 0), posterior mean over every chain's draws

``--max-bins`` sets the library's feature binning (default 1024, the library default; most of
California's features have more distinct values than that, so they are quantile-binned);
``--extra-bins 255`` adds a ``BF-bins255`` row (the same BF with 255 bins) fitted in the same run.
``--methods`` may also name ``sklearn-BF``: the same Bayesian forest built from
scikit-learn's ``DecisionTreeRegressor`` with Exp(1) ``sample_weight`` (exact
thresholds, float64), a reference that separates the method from the engine;
and ``BF-float64`` (the library's BF in float64, which switches on ``jax_enable_x64``
for the whole run: use it in a run of its own).

Results are appended, one JSON line per (fold, method), to
``benchmarks/results/forest_california.jsonl``; ``--resume`` skips the pairs
already there, ``--table`` only prints the table from that file.

    python benchmarks/forest_california.py                 # full run (long)
    python benchmarks/forest_california.py --quick         # smoke run
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from forest_common import RESULTS, cv_table, parser, read_jsonl, run_folds  # noqa: E402

SEED = 5807
ORDER = ["BF", "sklearn-RF", "EBF", "SSF", "DT", "RF", "ET"]


def load(data_dir):
    df = pd.read_csv(Path(data_dir) / "california_housing.csv")
    y = df.pop("medianHouseValue").to_numpy(float)
    df["medianIncome"] = df["medianIncome"] * 1e4
    return df.to_numpy(float), y, list(df.columns)


class SklearnBayesianForest:
    """The Bayesian forest built from scikit-learn parts: ``DecisionTreeRegressor`` fitted with
    Exp(1) ``sample_weight`` per tree (a reference for the library's engine)."""

    def __init__(self, n_estimators=100, min_samples_leaf=2, n_jobs=2, random_state=0):
        self.n_estimators, self.min_samples_leaf, self.n_jobs, self.random_state = \
            n_estimators, min_samples_leaf, n_jobs, random_state

    def fit(self, X, y):
        from joblib import Parallel, delayed
        from sklearn.tree import DecisionTreeRegressor
        rng = np.random.default_rng(self.random_state)
        W = rng.exponential(size=(self.n_estimators, len(y)))
        seeds = rng.integers(2**31, size=self.n_estimators)

        def one(w, s):
            return DecisionTreeRegressor(min_samples_leaf=self.min_samples_leaf, random_state=int(s)).fit(
                X, y, sample_weight=w)
        self.trees_ = Parallel(n_jobs=self.n_jobs, prefer="threads")(delayed(one)(w, s) for w, s in zip(W, seeds))
        return self

    def predict(self, X):
        return np.mean([t.predict(X) for t in self.trees_], axis=0)


BCART = {"chains": 16, "rows": 0}
BCART_BINS = 32  # BayesianCARTRegressor's default max_bins


class Subsampled:
    """An estimator fitted on ``rows`` training rows drawn at random (``seed``), predicting as usual."""

    def __init__(self, est, rows, seed):
        self.est, self.rows, self.seed = est, rows, seed

    def fit(self, X, y):
        idx = np.random.default_rng(self.seed).choice(len(y), min(self.rows, len(y)), replace=False)
        self.est.fit(X[idx], y[idx])
        return self

    def predict(self, X):
        return self.est.predict(X)


def make(method, n_trees, msl, max_bins, n_jobs, seed):
    import bayestrees as bt
    common = dict(min_samples_leaf=msl, max_bins=max_bins, n_jobs=n_jobs, random_state=seed)
    if method == "DT":
        return bt.BayesianForestRegressor(1, weights="none", **common)
    if method == "RF":
        return bt.BayesianForestRegressor(n_trees, weights="multinomial", **common)
    if method == "BF":
        return bt.BayesianForestRegressor(n_trees, **common)
    if method == "BF-float64":  # needs jax_enable_x64 (switched on by main when this method is asked for)
        return bt.BayesianForestRegressor(n_trees, dtype="float64", **common)
    if method.startswith("BF-bins"):
        common["max_bins"] = int(method[len("BF-bins"):])
        return bt.BayesianForestRegressor(n_trees, **common)
    if method == "ET":
        return bt.BayesianForestRegressor(n_trees, weights="none", splitter="random", **common)
    if method == "SSF":
        return bt.SubSampleForestRegressor(n_trees, n_blocks=5, **common)
    if method == "EBF":
        return bt.EmpiricalBayesianForestRegressor(n_trees, trunk_min_samples_leaf=3000, **common)
    if method == "sklearn-BF":
        return SklearnBayesianForest(n_trees, min_samples_leaf=msl, n_jobs=2, random_state=seed)
    if method == "BCART":
        est = bt.BayesianCARTRegressor(chains=BCART["chains"], random_state=seed)
        return Subsampled(est, BCART["rows"], seed) if BCART["rows"] else est
    if method == "sklearn-RF":
        from sklearn.ensemble import RandomForestRegressor
        return RandomForestRegressor(n_estimators=n_trees, min_samples_leaf=msl, n_jobs=2, random_state=seed)
    raise ValueError(method)


def main(argv=None):
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--folds", default=None, help="comma-separated fold indices to run (default all 10)")
    p.add_argument("--methods", default=",".join(ORDER), help="comma-separated methods, in run order")
    p.add_argument("--extra-bins", type=int, default=None, help="also fit BF with this max_bins (row BF-bins<N>)")
    p.add_argument("--max-bins", type=int, default=1024, help="the library default")
    p.add_argument("--n-trees", type=int, default=100)
    p.add_argument("--min-samples-leaf", type=int, default=2)
    p.add_argument("--n-jobs", type=int, default=2)
    p.add_argument("--bcart-chains", type=int, default=16, help="chains of the BCART method")
    p.add_argument("--bcart-rows", type=int, default=0, help="BCART fits on this many training rows (0: all)")
    p.add_argument("--resume", action="store_true", help="skip (fold, method) pairs already in the results file")
    p.add_argument("--table", action="store_true", help="only print the table from the results file")
    a = p.parse_args(argv)
    out = Path(a.out or RESULTS / ("forest_california_quick.jsonl" if a.quick else "forest_california.jsonl"))
    methods = a.methods.split(",")
    BCART.update(chains=a.bcart_chains, rows=a.bcart_rows)
    if a.extra_bins:
        methods.insert(1, f"BF-bins{a.extra_bins}")
    if a.table:
        print(cv_table(read_jsonl(out), methods))
        return

    from sklearn.model_selection import KFold
    if "BF-float64" in methods:
        import jax
        jax.config.update("jax_enable_x64", True)
    X, y, names = load(a.data_dir)
    n_trees = a.n_trees
    folds = list(KFold(10, shuffle=True, random_state=SEED).split(X))
    todo = [int(f) for f in a.folds.split(",")] if a.folds else list(range(10))
    if a.quick:  # 2 folds on a 4,000-row subsample, 10 trees
        rng = np.random.default_rng(0)
        keep = rng.choice(len(y), 4000, replace=False)
        X, y = X[keep], y[keep]
        folds = list(KFold(10, shuffle=True, random_state=SEED).split(X))
        todo, n_trees = todo[:2], 10
    if not a.resume and out.exists():
        out.unlink()
    print(f"California housing: n={len(y)}, d={X.shape[1]}, 10-fold KFold(shuffle=True, random_state={SEED}), "
          f"{n_trees} trees, min_samples_leaf={a.min_samples_leaf}, max_bins={a.max_bins}, n_jobs={a.n_jobs}",
          flush=True)
    run_folds("california", X, y, folds, todo, methods,
              lambda m, f: make(m, n_trees, a.min_samples_leaf, a.max_bins, a.n_jobs, SEED + f), out,
              n_trees=n_trees, min_samples_leaf=a.min_samples_leaf,
              max_bins_of=lambda m: (None if m == "sklearn-RF" else BCART_BINS if m == "BCART"
                                     else int(m[7:]) if m.startswith("BF-bins") else a.max_bins),
              extra={"cv_seed": SEED})
    print("\nFinal table (mean over the folds every method finished):")
    print(cv_table(read_jsonl(out), methods))


if __name__ == "__main__":
    main()
