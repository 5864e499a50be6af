# %% [markdown]
# # BCART-PCFG: exact Bayesian decision trees
#
# Sullivan et al. (2023) put a prior `Pr[T] ∝ φ^-leaves` on trees and read it as
# a probabilistic context-free grammar whose symbols are the sets of training
# rows a node can hold. A dynamic programme over those symbols then gives the
# **exact** posterior: the evidence `p(y | X)`, the MAP tree, independent
# posterior samples, exact predictive probabilities and exact posterior
# probabilities of the root split and of the number of leaves. No MCMC, so no
# mixing worries; the cost grows with the number of distinct boxes, so features
# are binned coarsely (`max_bins`). The model has a likelihood, so LOO works.
#
# Data: Haberman's breast-cancer survival (306 patients, shipped with the
# package): age, year of operation, number of positive axillary nodes; label 1 =
# survived five years, 2 = died. `BAYESTREES_TUTORIAL_QUICK=1` uses fewer bins
# and samples; figures go to `tutorials/output/pcfg/`.

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
OUT = Path(os.environ.get("BAYESTREES_TUTORIAL_OUT", HERE / "output")) / "pcfg"
OUT.mkdir(parents=True, exist_ok=True)
pd.set_option("display.width", 160)
pd.set_option("display.max_columns", 20)
MAX_BINS = 5 if QUICK else 10
N_SAMPLES = 50 if QUICK else 500
MAX_LEAVES = 12 if QUICK else 80  # leaf counts shown (the exact posterior is computed up to this many)


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
clf = bt.PCFGTreeClassifier(log_phi=2.0, max_bins=MAX_BINS, draws=N_SAMPLES, random_state=0).fit(Xtr, ytr)
print(f"log evidence log p(y | X) = {float(clf.log_evidence_):.2f}")
print(f"MAP tree: {int(bt.tree.n_leaves(clf.map_tree_))} leaves, log posterior probability "
      f"{float(clf.map_log_prob_):.2f}")

# %% [markdown]
# The exact posterior of the root split, and the exact posterior of the number
# of leaves next to the histogram of the sampled trees in `idata_`. The single
# most probable tree can be much smaller than a typical posterior tree: many
# large trees, each of small probability, carry most of the mass.

# %%
print(pd.DataFrame(clf.root_split_posterior()[:6], columns=["root split", "posterior probability"])
      .round(4).to_string(index=False))
exact = clf.n_leaves_posterior(MAX_LEAVES)
fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), layout="constrained")
bt.plots.plot_n_leaves({f"{N_SAMPLES} sampled trees": clf.idata_}, ax=axes[0], max_leaves=MAX_LEAVES)
axes[0].plot(np.arange(1, MAX_LEAVES + 1), exact, "o", color="C3", ms=4, label="exact posterior")
axes[0].legend(fontsize=8, loc="upper left")
axes[0].set_xlim(0.3, MAX_LEAVES + 0.7)
axes[0].set_title(f"number of leaves (exact mass above {MAX_LEAVES}: {1 - exact.sum():.2f})")
bt.plots.plot_tree(clf, ax=axes[1], title="the MAP tree (leaf colour: class mix; n = training rows)")
save(fig, "pcfg_n_leaves_map_tree.png")

# %% [markdown]
# Three ways to predict: the MAP tree, the exact average over all trees, and the
# average over the sampled trees; with held-out accuracy and mean log predictive.

# %%
rows = []
for how in ("map", "posterior", "samples"):
    p = clf.set_params(predict_with=how).predict_proba(Xte)
    idx = np.searchsorted(clf.classes_, yte)
    rows.append({"predict_with": how, "test accuracy": np.mean(clf.classes_[p.argmax(1)] == yte),
                 "mean log predictive": np.mean(np.log(p[np.arange(len(yte)), idx]))})
print(pd.DataFrame(rows).round(4).to_string(index=False))
clf.set_params(predict_with="map")

# %% [markdown]
# The prior's leaf penalty φ: larger `log_phi` favours smaller trees. The
# evidence compares the settings (a larger log evidence fits the data better
# for its complexity).

# %%
rows = []
for log_phi in ((1.0, 3.0) if QUICK else (0.5, 1.0, 2.0, 3.0, 5.0)):
    c = bt.PCFGTreeClassifier(log_phi=log_phi, max_bins=MAX_BINS, draws=N_SAMPLES, random_state=0).fit(Xtr, ytr)
    rows.append({"log_phi": log_phi, "log evidence": float(c.log_evidence_),
                 "mean leaves": float(c.idata_.posterior.n_leaves.mean()),
                 "test accuracy (MAP)": np.mean(c.predict(Xte) == yte)})
print(pd.DataFrame(rows).round(3).to_string(index=False))

# %% [markdown]
# The posterior as InferenceData: `az.summary`, LOO, and which features the
# posterior trees split on (inclusion probability: the share of posterior trees
# that use the feature at all).

# %%
print(az.summary(clf.idata_, var_names=["n_leaves", "depth", "split_counts"], kind="stats"))
print(bt.loo(clf.idata_))
ax = bt.plots.plot_variable_importance(clf.idata_, kind="inclusion")
ax.set_title("Haberman: posterior inclusion probability")
save(ax.figure, "pcfg_importance.png")
