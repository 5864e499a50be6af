"""Motorcycle data figure (Taddy et al. 2015, Figure 1): CART, one Bayesian tree, the forest.

``mcycle.csv`` (times -> accel).  Three panels:

1. the CART fit (one tree, unit weights: ``BayesianForestRegressor(1, weights="none")``);
2. one Bayesian-forest tree, a single posterior draw: the tree grown on one
   Exp(1) weight draw, with each point drawn with size proportional to its weight
   (``bayestrees.inference.forest.bootstrap.fit_forest(..., return_weights=True)``);
3. the Bayesian forest posterior mean with a 90% equal-tailed interval band
   (``predict`` and ``predict_interval(prob=0.9)``).

Writes ``benchmarks/results/forest_mcycle.png`` and one JSON line of summary
numbers to ``benchmarks/results/forest_mcycle.jsonl``.

    python benchmarks/forest_mcycle.py [--quick]
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from forest_common import RESULTS, Timer, append_jsonl, machine, parser, rmse  # noqa: E402


def main(argv=None):
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--min-samples-leaf", type=int, default=5)
    p.add_argument("--n-trees", type=int, default=500)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args(argv)
    import jax
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import bayestrees as bt
    from bayestrees.inference.forest.bootstrap import fit_forest
    from bayestrees.tree import index_tree, predict

    df = pd.read_csv(Path(a.data_dir) / "mcycle.csv")
    X, y = df[["times"]].to_numpy(float), df["accel"].to_numpy(float)
    n_trees = 50 if a.quick else a.n_trees
    msl = a.min_samples_leaf
    grid = np.linspace(X.min(), X.max(), 400)[:, None]

    cart = bt.BayesianForestRegressor(1, weights="none", min_samples_leaf=msl, random_state=a.seed).fit(X, y)
    with Timer() as t:
        bf = bt.BayesianForestRegressor(n_trees, min_samples_leaf=msl, random_state=a.seed).fit(X, y)

    # One posterior draw with its weights: grow one tree on one Exp(1) draw, with the
    # fitted forest's binning and configuration.
    codes = bf._codes(X)
    mu, sd = float(y.mean()), float(y.std())
    trees, W = fit_forest(jax.random.PRNGKey(a.seed), codes, ((y - mu) / sd).astype(np.float32), bf.config_, 1,
                          "exponential", y_shift=mu, y_scale=sd, return_weights=True)
    one = index_tree(trees, 0)
    w = np.asarray(W[0])
    one_grid = np.asarray(predict(one, bf._codes(grid), bf.config_.missing))[:, 0]
    one_train = np.asarray(predict(one, codes, bf.config_.missing))[:, 0]
    # weighted leaf means: the draw's leaf values are the Exp-weighted means of its leaf rows
    leaves = np.asarray(bt.tree.apply(one, codes, bf.config_.missing))
    wmean_err = max(abs(np.sum(w[leaves == k] * y[leaves == k]) / np.sum(w[leaves == k]) - one_train[leaves == k][0])
                    for k in np.unique(leaves))

    mean = bf.predict(grid)
    band = bf.predict_interval(grid, prob=0.9)
    cart_grid = cart.predict(grid)
    rec = dict(benchmark="mcycle", n=len(y), n_trees=n_trees, min_samples_leaf=msl, seed=a.seed,
               cart_leaves=int(cart.n_leaves_[0]), draw_leaves=int(np.asarray(bt.tree.n_leaves(one))),
               forest_mean_leaves=float(np.mean(bf.n_leaves_)), weight_min=float(w.min()), weight_max=float(w.max()),
               draw_leaf_value_vs_weighted_mean_max_abs_err=float(wmean_err),
               train_rmse_cart=rmse(cart.predict(X), y), train_rmse_bf=rmse(bf.predict(X), y),
               train_rmse_one_draw=rmse(one_train, y), mean_band_width=float(np.mean(band[:, 1] - band[:, 0])),
               forest_fit_s=t.s, **machine())
    out = Path(a.out or RESULTS / "forest_mcycle.jsonl")
    if out.exists():
        out.unlink()
    append_jsonl(out, rec)

    fig, axes = plt.subplots(1, 3, figsize=(11, 3.4), sharey=True)
    for ax in axes:
        ax.set_xlabel("time (ms)")
    ax = axes[0]
    ax.scatter(X[:, 0], y, s=8, c="0.5")
    ax.plot(grid[:, 0], cart_grid, c="C3", lw=1.5)
    ax.set_title(f"CART ({rec['cart_leaves']} leaves)")
    ax.set_ylabel("acceleration (g)")
    ax = axes[1]
    ax.scatter(X[:, 0], y, s=12 * w / w.mean(), c="0.4", alpha=0.7)
    ax.plot(grid[:, 0], one_grid, c="C0", lw=1.5)
    ax.set_title("one Bayesian tree (point size = Exp(1) weight)")
    ax = axes[2]
    ax.scatter(X[:, 0], y, s=8, c="0.5")
    ax.fill_between(grid[:, 0], band[:, 0], band[:, 1], color="C2", alpha=0.3, lw=0, label="90% interval")
    ax.plot(grid[:, 0], mean, c="C2", lw=1.5, label="posterior mean")
    ax.set_title(f"Bayesian forest ({n_trees} trees)")
    ax.legend(loc="lower right", fontsize=8, frameon=False)
    fig.tight_layout()
    png = RESULTS / "forest_mcycle.png"
    fig.savefig(png, dpi=80)
    print(f"mcycle: n={len(y)}, min_samples_leaf={msl}, {n_trees} trees, seed={a.seed}")
    for k, v in rec.items():
        if k not in ("machine", "cpus", "python", "benchmark"):
            print(f"  {k:<45} {v:.4g}" if isinstance(v, float) else f"  {k:<45} {v}")
    print(f"wrote {png} and {out}")


if __name__ == "__main__":
    main()
