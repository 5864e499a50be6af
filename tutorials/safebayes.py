# %% [markdown]
# # Safe-Bayesian random forest
#
# Quadrianto & Ghahramani (2015) draw many trees from a prior that does not
# look at the labels (random splits on the probability-integral transform of
# each feature), weight each tree by its marginal likelihood raised to a power
# `β = m / N`, and average the trees by these weights. `m = N` is Bayesian model
# averaging (BMA), which puts nearly all weight on one tree; a small
# *effective sample size* `m` flattens the weights into a forest. By default
# `m` is chosen by cross-validation on the training rows; the operating curve
# shows accuracy and log predictive against `m`.
#
# Data: Haberman's survival (shipped with the package).
# `BAYESTREES_TUTORIAL_QUICK=1` draws fewer prior trees; figures go to
# `tutorials/output/safebayes/`.

# %%
import os
from pathlib import Path

import arviz as az
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

import bayestrees as bt
from bayestrees.datasets import load_haberman

QUICK = os.environ.get("BAYESTREES_TUTORIAL_QUICK", "0") not in ("", "0")
HERE = Path(__file__).resolve().parent if "__file__" in globals() else Path.cwd()
OUT = Path(os.environ.get("BAYESTREES_TUTORIAL_OUT", HERE / "output")) / "safebayes"
OUT.mkdir(parents=True, exist_ok=True)
pd.set_option("display.width", 160)
pd.set_option("display.max_columns", 20)
N_TREES = 100 if QUICK else 1000
MAX_INTERNAL = 63 if QUICK else 511  # node capacity of the prior trees (the default is 511)


def save(fig, name):
    fig.savefig(OUT / name, dpi=110)
    if "__file__" not in globals():  # run as a notebook (Jupyter, the documentation site): show it here too
        from IPython.display import display
        display(fig)
    plt.close(fig)
    print(f"figure: {OUT / name}")


# %%
X, y, names = load_haberman()
X = pd.DataFrame(X, columns=names)
rng = np.random.default_rng(0)
test = rng.uniform(size=len(y)) < 0.25
Xtr, Xte, ytr, yte = X[~test], X[test], y[~test], y[test]
clf = bt.SafeBayesForestClassifier(draws=N_TREES, max_internal=MAX_INTERNAL, random_state=0).fit(Xtr, ytr)
print(f"{N_TREES} prior trees; chosen m = {clf.effective_sample_size_:.3g} (beta = {clf.beta_:.3g}) "
      f"on the {clf.operating_curve_['on']} curve")

# %% [markdown]
# Held-out accuracy and log predictive: the safe-Bayes forest (chosen `m`)
# against BMA (`m = N`).

# %%
rows = []
for method in ("safe", "bma"):
    rows.append({"method": method, "test accuracy": np.mean(clf.predict(Xte, method=method) == yte),
                 "mean log predictive": clf.log_predictive(Xte, yte, method=method)})
print(pd.DataFrame(rows).round(4).to_string(index=False))

# %% [markdown]
# The operating curve (left: accuracy, right: mean log predictive, both on the
# cross-validation folds of the training rows; dotted: the chosen `m`) and the
# trees with the highest and lowest weights (the paper's Figure 3).

# %%
ax = bt.plots.plot_operating_curve(clf.operating_curve_, m_marker=clf.effective_sample_size_)
ax[0].figure.suptitle("Haberman: cross-validated operating curve")
save(ax[0].figure, "safebayes_operating_curve.png")
fig = bt.plots.plot_extreme_trees(clf, n=2)
save(fig, "safebayes_extreme_trees.png")

# %% [markdown]
# `idata_` holds equally weighted draws: prior trees resampled by their tempered
# weights. Few distinct trees survive the resampling, which shows in LOO's
# Pareto k diagnostics.

# %%
post = clf.idata_.posterior
print(f"distinct trees among the draws: {post.attrs['distinct_trees']}")
print(az.summary(clf.idata_, var_names=["n_leaves", "depth"], kind="stats"))
fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), layout="constrained")
bt.plots.plot_n_leaves(clf.idata_, ax=axes[0])
axes[0].set_title("leaves of the resampled trees")
bt.plots.plot_variable_importance(clf.idata_, ax=axes[1])
save(fig, "safebayes_posterior.png")
