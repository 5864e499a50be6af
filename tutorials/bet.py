# %% [markdown]
# # BET: a Dirichlet-process mixture of trees
#
# BET (Duan, Clancy & Szczesniak) lets every row belong to one of several
# decision trees: a Dirichlet-process prior (stick-breaking weights `w`) over
# trees drawn from a depth-decay prior (a node at depth `d` splits with
# probability `exp(-d / δ)`), each tree with its own *variable-ranking
# probabilities* `ξ_j` (how likely each feature is chosen for a split). The number of occupied trees is random and learnt; `ξ̄ = Σ_j w_j ξ_j`
# ranks the features for the whole mixture. A blocked Gibbs / slice sampler
# runs the chains. Predictions are the *ensemble estimator* `Σ_j w_j E(θ | T_j)`
# averaged over draws; the model has a likelihood, so LOO works.
#
# Data: Haberman's breast-cancer survival (306 patients, shipped with the
# package); label 1 = survived five years, 2 = died.
# `BAYESTREES_TUTORIAL_QUICK=1` runs short chains; figures go to
# `tutorials/output/bet/`.

# %%
import os
import time
import warnings
from pathlib import Path

import arviz as az
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

import bayestrees as bt
from bayestrees.datasets import load_haberman

QUICK = os.environ.get("BAYESTREES_TUTORIAL_QUICK", "0") not in ("", "0")
HERE = Path(__file__).resolve().parent if "__file__" in globals() else Path.cwd()
OUT = Path(os.environ.get("BAYESTREES_TUTORIAL_OUT", HERE / "output")) / "bet"
OUT.mkdir(parents=True, exist_ok=True)
pd.set_option("display.width", 160)
pd.set_option("display.max_columns", 20)
DRAWS, TUNE, CHAINS = (20, 20, 2) if QUICK else (1000, 1000, 4)


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
t0 = time.perf_counter()
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # short chains in the quick mode can ask for more tree slots than max_trees
    clf = bt.BETClassifier(alpha_dp=1.0, delta=2.0, max_trees=10, draws=DRAWS, tune=TUNE, chains=CHAINS,
                           random_state=0).fit(Xtr, ytr)
print(f"{CHAINS} chains x ({TUNE} tuning + {DRAWS} kept) steps in {time.perf_counter() - t0:.1f}s "
      "(first run: mostly JIT compilation)")
p = clf.predict_proba(Xte)
idx = np.searchsorted(clf.classes_, yte)
print(f"test accuracy {np.mean(clf.predict(Xte) == yte):.3f}, mean log predictive "
      f"{np.mean(np.log(p[np.arange(len(yte)), idx])):.3f} (majority class: {np.mean(yte == 1):.3f})")
print(f"trees (components of at least min_leaf_rows rows) per draw: {clf.n_trees_.mean():.2f} on average "
      f"({clf.n_components_.mean():.2f} occupied components); best ensemble: {clf.best_ensemble_['n_trees']} trees")

# %% [markdown]
# Convergence of the number of trees and of `ξ̄` (R-hat and ESS), and the
# two BET plots: the number of occupied trees per draw (one line per chain) and
# `ξ̄` per feature with a 90% interval.

# %%
print(az.summary(clf.idata_, var_names=["n_trees", "xi_bar"]))
fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), layout="constrained", width_ratios=[3, 2])
bt.plots.plot_n_trees(clf.idata_, ax=axes[0])
axes[0].set_title("occupied trees per draw")
bt.plots.plot_xi_bar(clf.idata_, ax=axes[1])
axes[1].set_title("variable ranking")
save(fig, "bet_n_trees_xi_bar.png")

# %% [markdown]
# The trees themselves: the heaviest tree of the last draw of chain 0, and the
# leaves of the occupied trees over all draws.

# %%
fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), layout="constrained")
bt.plots.plot_tree(clf.idata_, chain=0, draw=DRAWS - 1, ax=axes[0], binner=clf.binner_,
                   title=f"heaviest tree of chain 0, draw {DRAWS - 1}")
bt.plots.plot_n_leaves(clf.idata_, ax=axes[1])
axes[1].set_title("leaves of the occupied trees")
save(fig, "bet_trees.png")

# %% [markdown]
# The ensemble estimator as a function of the number of positive nodes
# (partial dependence with a 90% credible band), and LOO.

# %%
ax = bt.plots.plot_partial_dependence(clf, Xtr, "positive_nodes", grid_resolution=10 if QUICK else 25)
ax.set_title("BET: partial dependence")
save(ax.figure, "bet_partial_dependence.png")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    print(bt.loo(clf.idata_))
