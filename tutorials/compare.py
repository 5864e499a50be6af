# %% [markdown]
# # Comparing families on one data set
#
# Every family returns the same ArviZ InferenceData: `posterior` holds
# `n_leaves`, `depth`, `split_counts` (per feature) and `mu` (the fitted
# function at the training rows); families with a likelihood (BCART-PCFG,
# safe-Bayes, Bayesian CART, BET) add a pointwise `log_likelihood`, so `az.loo` and
# `az.compare` rank them on the same rows. The Bayesian forest defines no
# likelihood (it is a Bayesian bootstrap of the CART functional), so all
# families are also compared on held-out rows.
#
# Data: Haberman's breast-cancer survival (306 patients, shipped with the
# package); label 1 = survived five years, 2 = died.
# `BAYESTREES_TUTORIAL_QUICK=1` shrinks every fit; figures go to
# `tutorials/output/compare/`.

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
OUT = Path(os.environ.get("BAYESTREES_TUTORIAL_OUT", HERE / "output")) / "compare"
OUT.mkdir(parents=True, exist_ok=True)
pd.set_option("display.width", 160)
pd.set_option("display.max_columns", 20)


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
print(f"{len(ytr)} training rows, {len(yte)} test rows, features {names}")

models = {
    "Bayesian forest": bt.BayesianForestClassifier(draws=8 if QUICK else 200, min_samples_leaf=5,
                                                   random_state=0),
    "BCART-PCFG": bt.PCFGTreeClassifier(log_phi=2.0, max_bins=5 if QUICK else 10, draws=50 if QUICK else 500,
                                        predict_with="posterior", random_state=0),
    "safe-Bayes": bt.SafeBayesForestClassifier(draws=100 if QUICK else 1000, max_internal=63 if QUICK else 511,
                                              random_state=0),
    "Bayesian CART": bt.BayesianCARTClassifier(draws=40 if QUICK else 700, tune=40 if QUICK else 300,
                                               chains=2 if QUICK else 4, random_state=0),
    "BET": bt.BETClassifier(max_trees=10, draws=20 if QUICK else 1000, tune=20 if QUICK else 1000,
                            chains=2 if QUICK else 4, random_state=0),
}

# %% [markdown]
# ## Held-out rows
#
# Accuracy and mean log predictive probability of the true label (higher is
# better) on the test rows, and the fit time.

# %%
rows = []
for name, est in models.items():
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # BET's short quick-mode chains may ask for more tree slots
        est.fit(Xtr, ytr)
    sec = time.perf_counter() - t0
    p = np.clip(est.predict_proba(Xte), 1e-12, 1)
    idx = np.searchsorted(est.classes_, yte)
    rows.append({"family": name, "test accuracy": np.mean(est.classes_[p.argmax(1)] == yte),
                 "mean log predictive": np.mean(np.log(p[np.arange(len(yte)), idx])), "fit s": sec,
                 "mean leaves": float(est.idata_.posterior.n_leaves.mean())})
print(pd.DataFrame(rows).round(3).to_string(index=False))
print(f"(always predicting the majority class: accuracy {np.mean(yte == 1):.3f})")

# %% [markdown]
# ## LOO on the training rows: `az.compare`
#
# For the families with a likelihood. `bt.compare` is `az.compare` with a clear
# error for a family without one (try adding the Bayesian forest).

# %%
idatas = {name: est.idata_ for name, est in models.items()}
with_lik = {k: v for k, v in idatas.items() if "log_likelihood" in v.groups()}
cmp = az.compare(with_lik)
print(cmp[["rank", "elpd_loo", "p_loo", "elpd_diff", "weight", "se", "dse", "warning"]].round(2))
try:
    bt.compare(idatas)
except ValueError as e:
    print("bt.compare with the forest:", str(e).split(",")[0])
ax = az.plot_compare(cmp, figsize=(7, 2.6))
ax.figure.set_layout_engine("constrained")
save(ax.figure, "compare_loo.png")

# %% [markdown]
# ## The posteriors side by side
#
# `az.plot_forest` of the tree size and the splits per feature in the
# posterior of every family with one tree per draw (94% HDI, thick line:
# interquartile range), the library's
# leaf-count plot for all of them (BET: its occupied trees), and Bayesian
# CART's trace (the MCMC families, Bayesian CART and BET, have correlated draws).

# %%
# BET's n_leaves and split_counts are per tree slot of its mixture (dim "component"), so the forest plot
# shows the families with one tree per draw; BET's own summaries are in tutorials/bet.py
single = {k: v for k, v in idatas.items() if "component" not in v.posterior["n_leaves"].dims}
axes = az.plot_forest(list(single.values()), model_names=list(single), var_names=["n_leaves", "split_counts"],
                      combined=True, figsize=(8, 5))
leg = axes[0].get_legend()
if leg is not None:  # move ArviZ's legend off the intervals
    handles, labels = leg.legend_handles, [t.get_text() for t in leg.texts]
    leg.remove()
    axes[0].legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, fontsize=9)
axes[0].figure.set_layout_engine("constrained")
axes[0].set_title("tree size and splits per feature (families with one tree per draw)")
save(axes[0].figure, "compare_forest.png")
# the safe-Bayes forest's resampled trees reach hundreds of leaves; drawn to 60 leaves, the small trees
# of the MCMC families stay visible, and the title gives each family's share of draws beyond
LIMIT = 60
ax = bt.plots.plot_n_leaves(idatas, max_leaves=LIMIT)
beyond = {k: float((np.asarray(v.posterior["n_leaves"]) > LIMIT).mean()) for k, v in single.items()}
tail = ", ".join(f"{k} {p:.0%}" for k, p in beyond.items() if p > 0) or "none"
ax.set_title(f"posterior of the number of leaves\n(share of draws above {LIMIT}: {tail})", fontsize=10)
save(ax.figure, "compare_n_leaves.png")
axes = az.plot_trace(idatas["Bayesian CART"], var_names=["n_leaves", "depth"],
                     backend_kwargs={"layout": "constrained"})
save(np.asarray(axes).ravel()[0].figure, "compare_bcart_trace.png")

# %% [markdown]
# Variable importance (share of each draw's splits per feature, 90% interval)
# and the partial dependence of the probability of death on the number of
# positive nodes, for three families with posterior draws of the function.

# %%
ncols = 3
nrows = -(-len(idatas) // ncols)
fig, axes = plt.subplots(nrows, ncols, figsize=(14, 2.8 * nrows), layout="constrained", squeeze=False)
for ax, (name, idata) in zip(axes.ravel(), idatas.items()):
    bt.plots.plot_variable_importance(idata, ax=ax)
    ax.set_title(name)
for ax in axes.ravel()[len(idatas):]:
    ax.set_axis_off()
save(fig, "compare_importance.png")
fig, ax = plt.subplots(figsize=(9, 3.8), layout="constrained")
for j, name in enumerate(("Bayesian forest", "Bayesian CART", "BET")):
    bt.plots.plot_partial_dependence(models[name], Xtr, "positive_nodes", ax=ax, grid_resolution=10 if QUICK else 25,
                                     color=f"C{j}", label=name, rug=j == 2)
ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
ax.set_title("partial dependence with 90% credible bands")
save(fig, "compare_partial_dependence.png")
