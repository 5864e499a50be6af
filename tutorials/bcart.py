# %% [markdown]
# # Bayesian CART by MCMC
#
# Chipman, George & McCulloch (1998): a prior on single trees (a node at depth
# `d` splits with probability `α (1 + d)^-β`), conjugate leaves (a mean per leaf
# and one noise variance for regression; Dirichlet leaves for classes), and MCMC
# over trees. The default step makes 25 rounds of the paper's local moves
# (grow, prune, change, swap) on a ladder of 8 temperatures, then regrows the
# whole tree by particle Gibbs (conditional SMC with data-informed proposals);
# `scheme="moves"` gives the local moves alone, much cheaper per step but far
# slower to mix between tree shapes. Many chains run at once (on a CPU one per
# core, in threads; on a GPU in one vmapped program: `chain_method="auto"`
# picks); R-hat and ESS tell whether they agree, and a fit warns when they do
# not, so look at the traces. The model has a likelihood, so LOO works.
#
# Data: the motorcycle data (shipped with the package).
# `BAYESTREES_TUTORIAL_QUICK=1` runs short chains; figures go to
# `tutorials/output/bcart/`.

# %%
import os
import time
from pathlib import Path

import arviz as az
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

import bayestrees as bt
from bayestrees.datasets import load_mcycle

QUICK = os.environ.get("BAYESTREES_TUTORIAL_QUICK", "0") not in ("", "0")
HERE = Path(__file__).resolve().parent if "__file__" in globals() else Path.cwd()
OUT = Path(os.environ.get("BAYESTREES_TUTORIAL_OUT", HERE / "output")) / "bcart"
OUT.mkdir(parents=True, exist_ok=True)
pd.set_option("display.width", 160)
pd.set_option("display.max_columns", 20)
DRAWS, TUNE, CHAINS = (40, 40, 2) if QUICK else (1000, 500, 8)  # steps of the default scheme


def save(fig, name):
    fig.savefig(OUT / name, dpi=110)
    if "__file__" not in globals():  # run as a notebook (Jupyter, the documentation site): show it here too
        from IPython.display import display
        display(fig)
    plt.close(fig)
    print(f"figure: {OUT / name}")


# %%
X, y = load_mcycle()
X = pd.DataFrame({"time_ms": X[:, 0]})
t0 = time.perf_counter()
reg = bt.BayesianCARTRegressor(prior=bt.priors.ChipmanPrior(0.95, 1.0), draws=DRAWS, tune=TUNE, chains=CHAINS,
                               random_state=0).fit(X, y)
print(f"{CHAINS} chains x ({TUNE} tuning + {DRAWS} kept) steps in {time.perf_counter() - t0:.1f}s "
      "(first run: mostly JIT compilation)")
print("share of steps that changed the tree:", {k: round(v, 3) for k, v in reg.acceptance_.items() if np.isfinite(v)})

# %% [markdown]
# Convergence: `az.summary` with R-hat and bulk/tail ESS for the tree size and
# the noise scale, and the traces (one line per chain).

# %%
print(az.summary(reg.idata_, var_names=["n_leaves", "depth", "sigma"]))
axes = az.plot_trace(reg.idata_, var_names=["n_leaves", "sigma"], backend_kwargs={"layout": "constrained"})
save(np.asarray(axes).ravel()[0].figure, "bcart_trace.png")

# %% [markdown]
# The fitted function: the posterior mean and a 90% credible interval of the
# function (not of a new response), from every kept draw of every chain.

# %%
grid = pd.DataFrame({"time_ms": np.linspace(X.time_ms.min(), X.time_ms.max(), 300)})
lo, hi = reg.predict_interval(grid, prob=0.9).T
fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), layout="constrained")
ax = axes[0]
ax.scatter(X.time_ms, y, s=10, c="k", alpha=0.6, label="data")
ax.fill_between(grid.time_ms, lo, hi, color="C1", alpha=0.3, label="90% credible interval")
ax.plot(grid.time_ms, reg.predict(grid), "C1", lw=2, label="posterior mean")
ax.set_xlabel("time after impact (ms)")
ax.set_ylabel("head acceleration (g)")
ax.legend(fontsize=8, loc="lower right")
ax.set_title("Bayesian CART on the motorcycle data")
bt.plots.plot_n_leaves(reg.idata_, ax=axes[1])
axes[1].set_title("posterior of the number of leaves")
save(fig, "bcart_fit.png")

# %% [markdown]
# One posterior tree (the last draw of chain 0; leaf labels are the drawn leaf
# means in g), and LOO from the pointwise log-likelihood.

# %%
ax = bt.plots.plot_tree(reg, chain=0, draw=DRAWS - 1, title=f"chain 0, draw {DRAWS - 1}")
save(ax.figure, "bcart_tree.png")
print(bt.loo(reg.idata_))

# %% [markdown]
# ## A categorical column
#
# An unordered categorical column (a pandas `category`, or `categorical_features=`)
# of at most 23 categories splits by subsets of its categories, with Chipman et
# al.'s prior: at a node, a subset uniform among the nonempty proper subsets of
# the categories its rows hold. Here the response steps between two sets of 6
# shop types (`s0` to `s5`), with a numeric effect on top; as ordered codes (the categories
# sorted by their mean response) one tree needs several splits to say the same.

# %%
rng = np.random.default_rng(7)
n_c = 400
shop = rng.integers(0, 6, n_c + 1000)
size = rng.uniform(size=n_c + 1000)
f_c = np.where(np.isin(shop, [0, 2, 5]), 1.0, -1.0) * (1.0 + size)
y_c = f_c + 0.3 * rng.normal(size=n_c + 1000)
table = pd.DataFrame({"shop": pd.Categorical([f"s{k}" for k in shop]), "size": size})
fits = {
    "subsets of shops": bt.BayesianCARTRegressor(draws=DRAWS, tune=TUNE, chains=CHAINS, random_state=0),
    "shops as ordered codes": bt.BayesianCARTRegressor(draws=DRAWS, tune=TUNE, chains=CHAINS, random_state=0),
}
held = {}
for name, est in fits.items():
    Xc = table if name == "subsets of shops" else table.assign(shop=table["shop"].cat.codes.astype(float))
    est.fit(Xc[:n_c], y_c[:n_c])
    pred = est.predict(Xc[n_c:])
    held[name] = (float(np.sqrt(np.mean((pred - f_c[n_c:]) ** 2))),
                  float(np.asarray(est.idata_.posterior["n_leaves"]).mean()))
print(pd.DataFrame(held, index=["held-out RMSE of f", "mean leaves"]).T.round(3).to_string())
print("split by subsets:", fits["subsets of shops"].idata_.posterior.attrs["subset_split_features"])
ax = bt.plots.plot_tree(fits["subsets of shops"], chain=0, draw=DRAWS - 1, title="a tree with a subset rule",
                        ax=plt.subplots(figsize=(11, 5))[1])
save(ax.figure, "bcart_subsets_tree.png")
