# %% [markdown]
# # BART: Bayesian additive regression trees
#
# Chipman, George & McCulloch (2010): the function is a sum of `m` small trees,
# `f(x) = g(x; T_1, M_1) + ... + g(x; T_m, M_m)`, and the response is
# `y = f(x) + N(0, sigma^2)`. Each tree's prior (a node at depth `d` splits with
# probability `0.95 (1 + d)^-2`) and the leaf prior `N(0, sigma_mu^2)`,
# `sigma_mu = 0.5 / (k sqrt(m))` on the response scaled to `[-0.5, 0.5]`, keep
# every tree a weak learner; `sigma^2` has the scaled inverse chi-squared prior
# calibrated on a linear fit. The sampler is Bayesian backfitting: every step
# moves each tree once (grow, prune, change, swap) on the residual of the other
# trees, draws its leaf values, then draws `sigma`. The defaults are the
# paper's (`m = 200`, `k = 2`, `nu = 3`, `q = 0.9`); `docs/lab-notes/bart.md` lists them
# with their sources.
#
# What a fit gives: `predict` (the posterior mean of `f`), `predict_draws` (one
# `f` per kept draw), `predict_interval`, `idata_` (ArviZ: `sigma`, leaves and
# depth per tree, `split_counts` per feature, pointwise log-likelihood) and
# `convergence_` (R-hat and ESS, as every MCMC family).
#
# Data: Friedman's (1991) function, where the truth is known, and California
# housing (shipped with the package: `bayestrees.datasets.load_california_housing`).
# `BAYESTREES_TUTORIAL_QUICK=1` runs few trees and short
# chains on fewer rows; figures go to `tutorials/output/bart/` (or
# `$BAYESTREES_TUTORIAL_OUT/bart/`).

# %%
import os
import time
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

import bayestrees as bt
from bayestrees.datasets import load_california_housing

QUICK = os.environ.get("BAYESTREES_TUTORIAL_QUICK", "0") not in ("", "0")
HERE = Path(__file__).resolve().parent if "__file__" in globals() else Path.cwd()
OUT = Path(os.environ.get("BAYESTREES_TUTORIAL_OUT", HERE / "output")) / "bart"
OUT.mkdir(parents=True, exist_ok=True)
pd.set_option("display.width", 160)
pd.set_option("display.max_columns", 20)
# chain lengths: tuning steps, kept draws, thinning, chains (a step moves every tree once)
if QUICK:
    M, LENGTHS, N_BF, PD_ROWS, PD_GRID = 20, dict(tune=100, draws=100, thin=1, chains=2), 20, 40, 10
else:
    M, LENGTHS, N_BF, PD_ROWS, PD_GRID = 200, dict(tune=1000, draws=500, thin=2, chains=4), 200, 100, 20


def save(fig, name):
    fig.savefig(OUT / name, dpi=110)
    if "__file__" not in globals():  # run as a notebook (Jupyter, the documentation site): show it here too
        from IPython.display import display
        display(fig)
    plt.close(fig)
    print(f"figure: {OUT / name}")


def rmse(a, b):
    return float(np.sqrt(np.mean((np.asarray(a) - np.asarray(b)) ** 2)))


# %% [markdown]
# ## 1. Friedman's function
#
# `f(x) = 10 sin(pi x1 x2) + 20 (x3 - 1/2)^2 + 10 x4 + 5 x5`; `x6 ... x10` are
# noise, every `x` uniform on [0, 1], and the noise sd is 1. We fit BART and,
# for scale, this library's Bayesian forest (Exp(1)-weighted CART trees), and
# measure both against the true `f` on 1,000 new rows.

# %%
def friedman_f(X):
    return 10 * np.sin(np.pi * X[:, 0] * X[:, 1]) + 20 * (X[:, 2] - 0.5) ** 2 + 10 * X[:, 3] + 5 * X[:, 4]


def friedman(rng, n, p=10):
    X = rng.random((n, p))
    return pd.DataFrame(X, columns=[f"x{j + 1}" for j in range(p)]), friedman_f(X)


rng = np.random.default_rng(0)
N = 200 if QUICK else 500
X, f = friedman(rng, N)
y = f + rng.normal(size=N)
Xt, ft = friedman(rng, 1000)
t0 = time.perf_counter()
reg = bt.BARTRegressor(m=M, random_state=0, **LENGTHS).fit(X, y)
print(f"BART, m = {M} trees, {LENGTHS['chains']} chains x ({LENGTHS['tune']} tuning + "
      f"{LENGTHS['draws'] * LENGTHS['thin']} steps, one in {LENGTHS['thin']} kept) in "
      f"{time.perf_counter() - t0:.1f}s (first run: JIT compilation included)")
bf = bt.BayesianForestRegressor(draws=N_BF, min_samples_leaf=5, random_state=0).fit(X, y)
sigma = reg.idata_.posterior["sigma"]
print(pd.DataFrame({"test RMSE against f": [rmse(reg.predict(Xt), ft), rmse(bf.predict(Xt), ft)]},
                   index=["BART", f"Bayesian forest ({N_BF} trees)"]).round(3))
print(f"posterior of sigma (true 1): mean {float(sigma.mean()):.3f}, "
      f"90% interval {np.round(np.quantile(sigma.values, [0.05, 0.95]), 3)}")
print("acceptance per move type:", {k: round(v, 3) for k, v in reg.acceptance_.items()})

# %% [markdown]
# ### Convergence
#
# `convergence_` holds R-hat and bulk ESS of `sigma` and of the log joint
# density `lp` across the chains (a fit warns when R-hat > 1.01 or the ESS is
# below 100 per chain). `sigma` is the slowest quantity of BART to mix with
# local tree moves: look at its trace. The trees themselves are not
# identifiable one by one (any permutation of the `m` trees is the same sum), so
# the per-tree sizes are summarised by their mean over the trees of a draw.

# %%
print(reg.convergence_)
post = reg.idata_.posterior
fig, axes = plt.subplots(1, 3, figsize=(13, 3.4), layout="constrained")
for c in range(post.sizes["chain"]):
    axes[0].plot(post["sigma"].values[c], lw=0.7, label=f"chain {c}")
    axes[1].plot(post["n_leaves"].values[c].mean(-1), lw=0.7)
axes[0].axhline(1.0, color="k", ls=":", label="true sigma")
axes[0].set_title("sigma, per kept draw")
axes[0].legend(fontsize=7)
axes[1].set_title("leaves per tree (mean over the m trees)")
for ax in axes[:2]:
    ax.set_xlabel("kept draw")
leaves = np.bincount(post["n_leaves"].values.ravel())
axes[2].bar(np.arange(len(leaves)), leaves / leaves.sum(), color="C0", alpha=0.7)
axes[2].set_xlabel("leaves of one tree")
axes[2].set_title("posterior share of trees by leaf count")
save(fig, "friedman_convergence.png")

# %% [markdown]
# ### Variable importance and partial dependence
#
# `split_counts` counts each draw's splits per feature over all `m` trees; the
# share of splits per feature, with a 90% interval over draws, should put
# `x1 ... x5` ahead of the noise features (with many trees every feature is
# split on somewhere, so the *share* says more than inclusion does).
#
# The partial dependence of the function on one feature averages each draw's
# `f` over the rows with that feature set to a grid value; the band is the 90%
# interval over draws. The dotted line is the same average of the true `f` over
# the same rows.

# %%
rows = X.sample(PD_ROWS, random_state=0)
feats = ["x3", "x4", "x5", "x8"]
fig, axes = plt.subplots(1, 1 + len(feats), figsize=(4 + 3.3 * len(feats), 3.6), layout="constrained")
bt.plots.plot_variable_importance(reg.idata_, ax=axes[0])
axes[0].set_title("share of splits per feature")
for ax, name in zip(axes[1:], feats):
    bt.plots.plot_partial_dependence(reg, rows, name, ax=ax, grid_resolution=PD_GRID, max_rows=PD_ROWS)
    grid = np.asarray(ax.lines[0].get_xdata(), float)  # the grid values (x of the posterior-mean line)
    truth = []
    for v in grid:
        Z = rows.to_numpy().copy()
        Z[:, int(name[1:]) - 1] = v
        truth.append(friedman_f(Z).mean())
    ax.plot(grid, truth, "k:", lw=2, label="true f, same average")
    ax.legend(fontsize=6)
    ax.set_title(f"partial dependence on {name}")
save(fig, "friedman_importance_pd.png")

# %% [markdown]
# ## 2. California housing
#
# 20,640 census blocks, 8 features, median house value in dollars (capped at
# 500,001). We fit BART on a random subset of the rows and hold out others,
# against the Bayesian forest on the same rows. BART has a noise model, so
# besides the credible interval of the function it gives a predictive interval
# for a new response: each draw's `f` plus `N(0, sigma^2)` noise of the same
# draw. Its coverage of the held-out responses is a check of the model (the
# noise here is far from constant across blocks, which one `sigma` cannot
# follow).

# %%
X_cal, y_cal, cal_names = load_california_housing()
cal = pd.DataFrame(X_cal, columns=cal_names).assign(medianHouseValue=y_cal).sample(1000 if QUICK else 7000, random_state=0)
yc = cal.pop("medianHouseValue").to_numpy()
n_train = 800 if QUICK else 5000
Xtr, Xte, ytr, yte = cal.iloc[:n_train], cal.iloc[n_train:], yc[:n_train], yc[n_train:]
t0 = time.perf_counter()
bart_cal = bt.BARTRegressor(m=M, random_state=0, **LENGTHS).fit(Xtr, ytr)
t_bart = time.perf_counter() - t0
t0 = time.perf_counter()
bf_cal = bt.BayesianForestRegressor(draws=N_BF, min_samples_leaf=5, random_state=0).fit(Xtr, ytr)
t_bf = time.perf_counter() - t0
iv_bf = bf_cal.predict_interval(Xte, prob=0.9)
f_draws = bart_cal.predict_draws(Xte)                                    # (chains * draws, rows)
sig = bart_cal.idata_.posterior["sigma"].values.reshape(-1, 1)           # the same order of draws
y_new = f_draws + sig * np.random.default_rng(1).normal(size=f_draws.shape)
lo, hi = np.quantile(y_new, [0.05, 0.95], axis=0)
lo_f, hi_f = bart_cal.predict_interval(Xte, prob=0.9).T
table = pd.DataFrame({
    "test RMSE ($)": [rmse(bart_cal.predict(Xte), yte), rmse(bf_cal.predict(Xte), yte)],
    "fit s": [t_bart, t_bf],
    "90% interval of f covers y": [np.mean((yte >= lo_f) & (yte <= hi_f)),
                                   np.mean((yte >= iv_bf[:, 0]) & (yte <= iv_bf[:, 1]))],
    "90% predictive interval covers y": [np.mean((yte >= lo) & (yte <= hi)), np.nan],
}, index=[f"BART (m = {M})", f"Bayesian forest ({N_BF} trees)"])
print(f"{len(ytr)} training rows, {len(yte)} held-out rows")
print(table.round(3).to_string())
print(f"posterior mean of sigma: ${float(bart_cal.idata_.posterior['sigma'].mean()):,.0f}")
print(bart_cal.convergence_)

# %% [markdown]
# Which features carry the function, and how the value depends on median
# income: BART's band and the Bayesian forest's on one axis.

# %%
fig, axes = plt.subplots(1, 2, figsize=(11.5, 3.9), layout="constrained")
bt.plots.plot_variable_importance(bart_cal.idata_, ax=axes[0])
axes[0].set_title("BART: share of splits per feature")
rows = Xtr.sample(PD_ROWS, random_state=0)
bt.plots.plot_partial_dependence(bart_cal, rows, "medianIncome", ax=axes[1], grid_resolution=PD_GRID,
                                 max_rows=PD_ROWS, color="C0", label="BART")
bt.plots.plot_partial_dependence(bf_cal, rows, "medianIncome", ax=axes[1], grid_resolution=PD_GRID,
                                 max_rows=PD_ROWS, color="C1", label="Bayesian forest", rug=False)
axes[1].set_ylabel("median house value ($)")
axes[1].set_title("partial dependence on median income")
save(fig, "california_importance_pd.png")

# %% [markdown]
# BART has a likelihood, so LOO (PSIS) estimates its out-of-sample log
# predictive density from the fit alone; `bt.compare` ranks it against the other
# families that have one (Bayesian CART, BET, PCFG) on the same rows.

# %%
print(bt.loo(bart_cal.idata_))

# %% [markdown]
# ## 3. Several classes
#
# With three or more classes `BARTClassifier` fits a multinomial logit
# (log-linear BART, Murray 2021): `P(y = c | x)` is proportional to
# `exp(o_c + f_c(x))`, one sum of trees per class. Here three classes whose
# true probabilities move with `x0` (a step) and `x1` (a ramp); `x2`, `x3` are
# noise. We compare the held-out log loss with Bayesian CART's (one tree), the
# true probabilities' own log loss as the floor, and draw the posterior of
# `P(y = c | x)` along `x1` with 90% bands.

# %%
def three_class_probs(X):
    f = np.stack([2.0 * (X[:, 0] > 0.5), 3.0 * X[:, 1], np.zeros(len(X))], 1)
    p = np.exp(f - f.max(1, keepdims=True))
    return p / p.sum(1, keepdims=True)


rng3 = np.random.default_rng(3)
N3 = 200 if QUICK else 600
X3 = rng3.uniform(size=(N3 + 1000, 4))
P3 = three_class_probs(X3)
y3 = np.array(["a", "b", "c"])[[rng3.choice(3, p=p) for p in P3]]
clf3 = bt.BARTClassifier(m=max(M // 4, 10), random_state=0, **LENGTHS).fit(X3[:N3], y3[:N3])
cart3 = bt.BayesianCARTClassifier(random_state=0, **LENGTHS).fit(X3[:N3], y3[:N3])
held = np.searchsorted(clf3.classes_, y3[N3:])


def log_loss(p):
    return float(-np.mean(np.log(np.clip(p[np.arange(len(held)), held], 1e-12, 1))))


print(pd.Series({"BART (multinomial logit)": log_loss(clf3.predict_proba(X3[N3:])),
                 "Bayesian CART": log_loss(cart3.predict_proba(X3[N3:])),
                 "the true probabilities": log_loss(P3[N3:])}, name="held-out log loss").round(3).to_string())
print(bt.compare({"BART": clf3.idata_, "Bayesian CART": cart3.idata_}).round(2).to_string())

# %%
grid = np.full((50, 4), 0.25)
grid[:, 1] = np.linspace(0, 1, 50)
draws3 = clf3.predict_draws(grid)                                   # (draws, 50, 3)
fig, ax = plt.subplots(figsize=(6, 3.6), layout="constrained")
for c, name in enumerate(clf3.classes_):
    lo3, hi3 = np.quantile(draws3[..., c], [0.05, 0.95], axis=0)
    ax.fill_between(grid[:, 1], lo3, hi3, color=f"C{c}", alpha=0.25)
    ax.plot(grid[:, 1], draws3[..., c].mean(0), color=f"C{c}", label=f"P(y = {name})")
    ax.plot(grid[:, 1], three_class_probs(grid)[:, c], color=f"C{c}", ls="--", lw=1)
ax.set_xlabel("x1 (x0 = x2 = x3 = 0.25)")
ax.set_ylabel("probability")
ax.set_title("BART, three classes: posterior mean, 90% band, truth dashed")
ax.legend()
save(fig, "three_classes.png")

# %% [markdown]
# ## 4. A messy table: missing values and categories
#
# Real tables have gaps and unordered categorical columns. BART takes both as
# they are. A missing value (NaN) is routed by each rule, which also says where
# the missing rows go (missingness incorporated in attributes), so nothing is
# imputed and the uncertainty about the gaps stays in the posterior. A
# categorical column (a pandas `category`, or `categorical_features=`) of at
# most 23 categories splits by subsets of its categories, with a prior uniform
# over the subsets. Here `region` has 12 categories whose effect is one half
# of them where `x1 > 0.5` and another half elsewhere (no one ordering of the
# regions serves both), and `x0` is missing in 20% of the rows. We compare
# with what one does without these: the mean imputed and the regions one-hot
# encoded.

# %%
rng4 = np.random.default_rng(4)
N4 = 300 if QUICK else 1000
n4 = N4 + 2000
region = rng4.integers(0, 12, n4)
half_a, half_b = np.zeros(12), np.zeros(12)
half_a[rng4.permutation(12)[:6]] = 2.0
half_b[rng4.permutation(12)[:6]] = 2.0
x4 = rng4.uniform(size=(n4, 3))
f4 = np.where(x4[:, 1] > 0.5, half_a[region], half_b[region]) + np.sin(2 * np.pi * x4[:, 0])
y4 = f4 + 0.5 * rng4.normal(size=n4)
x4[rng4.random(n4) < 0.2, 0] = np.nan
table = pd.DataFrame({"region": pd.Categorical([f"r{k:02d}" for k in region]), "x0": x4[:, 0], "x1": x4[:, 1],
                      "x2": x4[:, 2]})
messy = bt.BARTRegressor(m=M, random_state=0, **LENGTHS).fit(table[:N4], y4[:N4])
plain = pd.get_dummies(table, columns=["region"], dtype=float)
plain["x0"] = plain["x0"].fillna(plain["x0"][:N4].mean())
imputed = bt.BARTRegressor(m=M, random_state=0, **LENGTHS).fit(plain[:N4], y4[:N4])
print(pd.Series({"missing values and subsets of categories as they are": messy.predict(table[N4:]),
                 "mean imputed, regions one-hot": imputed.predict(plain[N4:])}).map(
    lambda p: float(np.sqrt(np.mean((p - f4[N4:]) ** 2)))).rename("held-out RMSE of f").round(3).to_string())
print("split by subsets:", messy.idata_.posterior.attrs["subset_split_features"])
print("interval width where x0 is missing / observed:",
      *(round(float(np.mean(np.diff(messy.predict_interval(table[N4:][m]), axis=1))), 3)
        for m in (table["x0"][N4:].isna().values, table["x0"][N4:].notna().values)))
