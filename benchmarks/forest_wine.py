"""Wine quality 10-fold CV (Taddy et al. 2015, Section 5).

``wine_quality.csv``: red and white wines together (6,497 rows), 11 numeric
features plus ``color`` (red/white), passed as a categorical column (the
library codes it as a category; with two levels this is a binary split);
``quality`` (0-10) treated as a real response.  Shuffled 10-fold CV with
``KFold(10, shuffle=True, random_state=5807)`` (the seed of the California
protocol).  100 trees, ``min_samples_leaf=2`` for every method:

    DT    one CART                        BayesianForestRegressor(1, weights="none")
    SSF   sub-sample forest, 5 blocks     SubSampleForestRegressor(n_blocks=5)
    BF    Bayesian forest                 BayesianForestRegressor()
    EBF   empirical Bayesian forest       EmpiricalBayesianForestRegressor(trunk_min_samples_leaf=1000)

One JSON line per (fold, method) goes to ``benchmarks/results/forest_wine.jsonl``.

    python benchmarks/forest_wine.py [--quick]
"""
from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from forest_common import RESULTS, cv_table, parser, read_jsonl, run_folds  # noqa: E402

SEED = 5807
ORDER = ["BF", "EBF", "SSF", "DT"]


def load(data_dir):
    df = pd.read_csv(Path(data_dir) / "wine_quality.csv")
    y = df.pop("quality").to_numpy(float)
    df["color"] = df["color"].astype("category")
    return df, y


def make(method, n_trees, msl, max_bins, n_jobs, seed):
    import bayestrees as bt
    common = dict(min_samples_leaf=msl, max_bins=max_bins, n_jobs=n_jobs, random_state=seed)
    if method == "DT":
        return bt.BayesianForestRegressor(1, weights="none", **common)
    if method == "BF":
        return bt.BayesianForestRegressor(n_trees, **common)
    if method == "SSF":
        return bt.SubSampleForestRegressor(n_trees, n_blocks=5, **common)
    if method == "EBF":
        return bt.EmpiricalBayesianForestRegressor(n_trees, trunk_min_samples_leaf=1000, **common)
    raise ValueError(method)


def main(argv=None):
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--folds", default=None, help="comma-separated fold indices (default all 10)")
    p.add_argument("--methods", default=",".join(ORDER))
    p.add_argument("--max-bins", type=int, default=1024, help="the library default")
    p.add_argument("--n-trees", type=int, default=100)
    p.add_argument("--min-samples-leaf", type=int, default=2)
    p.add_argument("--n-jobs", type=int, default=2)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--table", action="store_true", help="only print the table from the results file")
    a = p.parse_args(argv)
    out = Path(a.out or RESULTS / ("forest_wine_quick.jsonl" if a.quick else "forest_wine.jsonl"))
    methods = a.methods.split(",")
    if a.table:
        print(cv_table(read_jsonl(out), methods, fmt="{:.4f}"))
        return
    from sklearn.model_selection import KFold
    X, y = load(a.data_dir)
    n_trees = 10 if a.quick else a.n_trees
    folds = list(KFold(10, shuffle=True, random_state=SEED).split(X))
    todo = [int(f) for f in a.folds.split(",")] if a.folds else list(range(10))
    if a.quick:
        todo = todo[:2]
    if not a.resume and out.exists():
        out.unlink()
    print(f"Wine quality (red+white): n={len(y)}, d={X.shape[1]} (color categorical), 10-fold "
          f"KFold(shuffle=True, random_state={SEED}), {n_trees} trees, min_samples_leaf={a.min_samples_leaf}, "
          f"max_bins={a.max_bins}", flush=True)
    run_folds("wine", X, y, folds, todo, methods,
              lambda m, f: make(m, n_trees, a.min_samples_leaf, a.max_bins, a.n_jobs, SEED + f), out,
              n_trees=n_trees, min_samples_leaf=a.min_samples_leaf, max_bins_of=lambda m: a.max_bins, fmt="{:.4f}",
              extra={"cv_seed": SEED})
    print("\nTable (mean over the folds every method finished):")
    print(cv_table(read_jsonl(out), methods, fmt="{:.4f}"))


if __name__ == "__main__":
    main()
