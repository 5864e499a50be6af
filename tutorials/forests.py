# %% [markdown]
# # Bayesian and empirical Bayesian forests
#
# A **Bayesian forest** (Taddy et al. 2015) is a posterior sample of CART trees:
# each tree is CART grown on the training rows weighted by one draw of
# independent Exp(1) weights (the Bayesian bootstrap), so every tree is a
# posterior draw of the "CART functional" under a nonparametric model of the
# data. The mean over trees is the prediction and their spread gives credible
# intervals. An **empirical Bayesian forest** fixes a CART *trunk* with large
# leaves (stable under the posterior) and grows a Bayesian forest in every
# trunk leaf, which is what lets it scale. The family defines no likelihood,
# so compare it with others on held-out data, not by LOO.
#
# Run as a script (`python tutorials/forests.py`) or open it as a notebook.
# `BAYESTREES_TUTORIAL_QUICK=1` shrinks the data and the number of trees;
# figures go to `tutorials/output/forests/` (or `$BAYESTREES_TUTORIAL_OUT/forests/`).

# %%
import os
import time
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

import bayestrees as bt
from bayestrees.datasets import load_california_housing, load_mcycle

QUICK = os.environ.get("BAYESTREES_TUTORIAL_QUICK", "0") not in ("", "0")
HERE = Path(__file__).resolve().parent if "__file__" in globals() else Path.cwd()
OUT = Path(os.environ.get("BAYESTREES_TUTORIAL_OUT", HERE / "output")) / "forests"
OUT.mkdir(parents=True, exist_ok=True)
pd.set_option("display.width", 160)
pd.set_option("display.max_columns", 20)
N_TREES = 8 if QUICK else 200


def save(fig, name):
    fig.savefig(OUT / name, dpi=110)
    if "__file__" not in globals():  # run as a notebook (Jupyter, the documentation site): show it here too
        from IPython.display import display
        display(fig)
    plt.close(fig)
    print(f"figure: {OUT / name}")


# %% [markdown]
# ## 1. One feature: the motorcycle data
#
# Head acceleration (g) against time after impact (ms), 133 rows shipped with
# the package. We fit a Bayesian forest, a single CART tree and a random forest
# (classical bootstrap weights: the same estimator with `weights="multinomial"`;
# not in the quick mode).

# %%
X, y = load_mcycle()
X = pd.DataFrame({"time_ms": X[:, 0]})
t0 = time.perf_counter()
bf = bt.BayesianForestRegressor(draws=N_TREES, min_samples_leaf=3, random_state=0).fit(X, y)
cart = bt.BayesianForestRegressor(draws=1, weights="none", min_samples_leaf=3).fit(X, y)
# the random forest is left out of the quick mode (one compilation less)
rf = None if QUICK else bt.BayesianForestRegressor(draws=N_TREES, weights="multinomial", min_samples_leaf=3,
                                                   random_state=0).fit(X, y)
print(f"fitted {N_TREES} trees in {time.perf_counter() - t0:.1f}s (first run: mostly JIT compilation)")
print(f"leaves per tree: {bf.n_leaves_.mean():.1f} on average, depth {bf.depth_.mean():.1f}")

# %% [markdown]
# The posterior mean and a 90% credible interval of the function, from the
# draws (`predict_draws` gives one prediction per tree).

# %%
grid = pd.DataFrame({"time_ms": np.linspace(X.time_ms.min(), X.time_ms.max(), 300)})
draws = bf.predict_draws(grid)
lo, hi = bf.predict_interval(grid, prob=0.9).T
fig, ax = plt.subplots(figsize=(7, 4.2), layout="constrained")
ax.scatter(X.time_ms, y, s=10, c="k", alpha=0.6, label="data")
ax.fill_between(grid.time_ms, lo, hi, color="C0", alpha=0.25, label="90% credible interval")
ax.plot(grid.time_ms, draws.mean(0), "C0", lw=2, label="Bayesian forest mean")
ax.plot(grid.time_ms, cart.predict(grid), "C3", lw=1, label="CART")
ax.set_xlabel("time after impact (ms)")
ax.set_ylabel("head acceleration (g)")
ax.set_title("Bayesian forest on the motorcycle data")
ax.legend(loc="lower right", fontsize=8)
save(fig, "mcycle_fit.png")

# %% [markdown]
# Every fit returns ArviZ InferenceData by the same contract: one draw per tree.
# `az.summary` summarises the tree sizes; the library's plots read the same object.

# %%
import arviz as az  # noqa: E402

print(az.summary(bf.idata_, var_names=["n_leaves", "depth"], kind="stats"))
fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), layout="constrained")
fits = {"Bayesian forest": bf.idata_} if rf is None else {"Bayesian forest": bf.idata_, "random forest": rf.idata_}
bt.plots.plot_n_leaves(fits, ax=axes[0])
axes[0].set_title("leaves per tree")
bt.plots.plot_tree(bf, index=0, ax=axes[1], title="tree 0 of the Bayesian forest")
save(fig, "mcycle_trees.png")

# %% [markdown]
# ## 2. Many features: California housing
#
# 20,640 census blocks, 8 features, median house value in dollars (shipped
# with the package: `bayestrees.datasets.load_california_housing`). We hold out
# a fifth of the rows and compare CART (not in the quick mode), the Bayesian
# forest and the empirical Bayesian forest, whose trunk has leaves of at least
# `trunk_min_samples_leaf` rows.

# %%
X_cal, y_cal, cal_names = load_california_housing()
cal = pd.DataFrame(X_cal, columns=cal_names).assign(medianHouseValue=y_cal)
if QUICK:
    cal = cal.sample(1500, random_state=0)
yc = cal.pop("medianHouseValue").to_numpy()
rng = np.random.default_rng(0)
test = rng.uniform(size=len(cal)) < 0.2
Xtr, Xte, ytr, yte = cal[~test], cal[test], yc[~test], yc[test]
trunk = 300 if QUICK else 3000
models = {} if QUICK else {"CART": bt.BayesianForestRegressor(draws=1, weights="none", min_samples_leaf=5)}
models |= {
    "Bayesian forest": bt.BayesianForestRegressor(draws=N_TREES, min_samples_leaf=5, random_state=0),
    f"EBF (trunk leaves >= {trunk})": bt.EmpiricalBayesianForestRegressor(
        draws=N_TREES, trunk_min_samples_leaf=trunk, min_samples_leaf=5, random_state=0),
}
rows = []
for name, est in models.items():
    t0 = time.perf_counter()
    est.fit(Xtr, ytr)
    sec = time.perf_counter() - t0
    iv = est.predict_interval(Xte) if est.draws > 1 else None
    cover = np.mean((yte >= iv[:, 0]) & (yte <= iv[:, 1])) if iv is not None else np.nan
    rows.append({"model": name, "test RMSE ($)": np.sqrt(np.mean((est.predict(Xte) - yte) ** 2)),
                 "fit s": sec, "90% interval covers y": cover})
print(pd.DataFrame(rows).round(3).to_string(index=False))
print("(the interval is for the function, not for a new response: it need not cover 90% of the responses)")

# %% [markdown]
# Which features do the trees split on? The share of each tree's splits per
# feature, with a 90% interval over trees; then the partial dependence of the
# value on median income, averaged over rows, with a 90% credible band.

# %%
bf_cal = models["Bayesian forest"]
fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), layout="constrained")
bt.plots.plot_variable_importance(bf_cal.idata_, ax=axes[0])
bt.plots.plot_partial_dependence(bf_cal, Xtr, "medianIncome", ax=axes[1], grid_resolution=12 if QUICK else 30,
                                 max_rows=100 if QUICK else 300)
axes[1].set_ylabel("median house value ($)")
save(fig, "california_importance_pd.png")

# %%
ax = bt.plots.plot_partial_dependence(bf_cal, Xtr, ["medianIncome", "housingMedianAge"],
                                      grid_resolution=6 if QUICK else 15, max_rows=60 if QUICK else 200)
save(ax[0].figure, "california_pd2.png")
