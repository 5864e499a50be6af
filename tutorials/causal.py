# %% [markdown]
# # Causal effects with trees: Bayesian causal forests
#
# A treatment `z` (0 or 1), an outcome `y` and covariates `x` measured before
# the treatment. Under no unmeasured confounding and overlap, the conditional
# average treatment effect `tau(x) = E[y | x, z = 1] - E[y | x, z = 0]` is
# what a regression of `y` on `x` and `z` can learn. The Bayesian causal forest
# (BCF; Hahn, Murray & Carvalho 2020, *Bayesian Analysis*) writes it as
#
#     y = mu(x, pihat) + tau(x) z + e
#
# with two sums of trees: a prognostic function `mu` (200 trees) that also
# sees an estimate `pihat(x)` of the propensity `P(z = 1 | x)`, and an effect
# function `tau` (50 trees) with a stronger depth prior (most of its trees are
# stumps, so a homogeneous effect is the prior's centre) and a scale of its
# own. Giving `mu` the propensity guards against *regularisation-induced
# confounding*: where treatment is targeted at those with a high (or low)
# prognosis, a model that shrinks `mu` would otherwise credit part of it to
# the effect.
#
# `bt.BCFRegressor` fits it from arrays, at the paper's defaults
# (`bt.causal`), and the model itself is a NumPyro model with
# `bt.bart_function`, so a multilevel BCF (group intercepts and group-varying
# effects, by NUTS) is a few lines more. Three parts:
#
# 1. a simulated design of the paper with known effects: targeted selection, a
#    nonlinear prognosis, a heterogeneous effect;
# 2. a real observational study: smoking cessation and weight gain (NHEFS,
#    shipped with the package: `bayestrees.datasets.load_nhefs`);
# 3. a multilevel BCF written in NumPyro: sites with their own intercepts and
#    effects.
#
# `BAYESTREES_TUTORIAL_QUICK=1` runs few trees and short chains on fewer rows;
# figures go to `tutorials/output/causal/` (or `$BAYESTREES_TUTORIAL_OUT/causal/`).

# %%
import math
import os
import time
import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import numpyro
import numpyro.distributions as dist
import pandas as pd
from scipy.stats import norm

import bayestrees as bt
from bayestrees.convergence import ConvergenceWarning
from bayestrees.datasets import load_nhefs

QUICK = os.environ.get("BAYESTREES_TUTORIAL_QUICK", "0") not in ("", "0")
HERE = Path(__file__).resolve().parent if "__file__" in globals() else Path.cwd()
OUT = Path(os.environ.get("BAYESTREES_TUTORIAL_OUT", HERE / "output")) / "causal"
OUT.mkdir(parents=True, exist_ok=True)
pd.set_option("display.width", 160)
if QUICK:   # few trees, short single chains, fewer rows
    N, SIZE, RUN = 120, dict(m_mu=10, m_tau=5), dict(draws=40, tune=40, chains=1)
else:       # the paper's trees, 4 chains of 1,000 + 1,000
    N, SIZE, RUN = 500, dict(), dict(draws=1000, tune=1000, chains=4)
# every fit prints its convergence table (est.convergence_), so the warning is not repeated
warnings.simplefilter("ignore", ConvergenceWarning)


def save(fig, name):
    fig.savefig(OUT / name, dpi=110)
    if "__file__" not in globals():  # run as a notebook: show it here too
        from IPython.display import display
        display(fig)
    plt.close(fig)
    print(f"figure: {OUT / name}")


def interval(draws, prob=0.95):
    return np.quantile(draws, [(1 - prob) / 2, (1 + prob) / 2], axis=0)


# %% [markdown]
# ## 1. A simulated design with known effects
#
# The paper's section 6: `x1, x2, x3 ~ N(0, 1)`, `x4 ~ Bernoulli(1/2)`, `x5` one
# of three levels; the prognosis `mu(x) = -6 + g(x5) + 6 |x3 - 1|` (nonlinear),
# the effect `tau(x) = 1 + 2 x2 x4`, and treatment targeted at those with a
# high prognosis: `pi(x) = 0.8 Phi(3 mu(x) / s - 0.5 x1) + 0.05 + u / 10`. The
# difference of the arms' means is then far from the average effect. The
# propensity is estimated (`fit` without `pihat`: a 50-tree BART classifier,
# plugged in as the paper does, so its own uncertainty is not carried).

# %%
rng = np.random.default_rng(1)
x = rng.normal(size=(N, 3))
x4 = rng.binomial(1, 0.5, N)
x5 = rng.integers(1, 4, N)
g = np.where(x5 == 1, 2.0, np.where(x5 == 2, -1.0, -4.0))
mu_true = -6 + g + 6 * np.abs(x[:, 2] - 1)
tau_true = 1 + 2 * x[:, 1] * x4
pi_true = 0.8 * norm.cdf(3 * mu_true / mu_true.std() - 0.5 * x[:, 0]) + 0.05 + rng.uniform(size=N) / 10
z = rng.binomial(1, pi_true)
y = mu_true + tau_true * z + rng.normal(size=N)
X = np.column_stack([x, x4, x5]).astype(float)

t0 = time.perf_counter()
bcf = bt.BCFRegressor(**SIZE, **RUN, random_state=0).fit(X, y, z)
print(f"BCF: {RUN['chains']} chains x ({RUN['tune']} + {RUN['draws']}) in {time.perf_counter() - t0:.1f}s "
      f"(propensity model and compilation included)")
if bcf.convergence_ is not None:   # (none with one chain)
    print(bcf.convergence_)
lo, hi = bcf.ate_interval(0.95)
naive = y[z > 0].mean() - y[z == 0].mean()
print(pd.DataFrame({"sample ATE": [tau_true.mean()], "difference of means": [naive], "BCF mean": [bcf.ate_],
                    "BCF 95% low": [lo], "BCF 95% high": [hi]}).round(3).to_string(index=False))
cate = bcf.effect_draws(X)
band = interval(cate, 0.9)
covered = np.mean((tau_true >= band[0]) & (tau_true <= band[1]))
print(f"CATE at the training rows: RMSE {np.sqrt(np.mean((cate.mean(0) - tau_true) ** 2)):.3f}, "
      f"90% bands cover the truth at {covered:.0%} of the rows")

# %%
fig, axes = plt.subplots(1, 3, figsize=(14, 4), layout="constrained")
order = np.argsort(tau_true)
axes[0].fill_between(np.arange(N), band[0][order], band[1][order], alpha=0.3, label="90% band")
axes[0].plot(cate.mean(0)[order], lw=1, label="posterior mean")
axes[0].plot(tau_true[order], "k.", ms=2, label="true tau(x)")
axes[0].set_xlabel("rows, by their true effect")
axes[0].set_title("CATE at every row")
axes[0].legend(fontsize=7)
for arm, colour in ((0, "C0"), (1, "C1")):
    axes[1].scatter(x[x4 == arm, 1], cate.mean(0)[x4 == arm], s=5, color=colour, label=f"x4 = {arm}")
    axes[1].plot(np.sort(x[:, 1]), 1 + 2 * arm * np.sort(x[:, 1]), color=colour, lw=1)
axes[1].set_xlabel("x2")
axes[1].set_ylabel("posterior mean of tau(x)")
axes[1].set_title("tau(x) = 1 + 2 x2 x4 (lines: truth)")
axes[1].legend(fontsize=7)
ate_draws = np.asarray(bcf.idata_.posterior["ate"]).ravel()
axes[2].hist(ate_draws, bins=40, alpha=0.7, label="posterior of the ATE")
axes[2].axvline(tau_true.mean(), color="k", ls=":", label="sample ATE")
axes[2].axvline(naive, color="C3", ls="--", label="difference of means")
axes[2].set_title("average effect")
axes[2].legend(fontsize=7)
save(fig, "simulated.png")

# %% [markdown]
# ## 2. Smoking cessation and weight gain (NHEFS)
#
# 1,566 smokers of the NHEFS cohort; 403 quit between 1971 and 1982. Did
# quitting change their weight, and for whom? The confounders are Hernan &
# Robins's (*Causal Inference: What If*, chapters 12-15): sex, race, age,
# education, cigarettes a day, years of smoking, exercise, activity and weight
# in 1971. Their inverse-probability-weighted and standardised estimates of the
# average effect are about 3.5 kg. The propensity is estimated as above.

# %%
Xn, yn, zn, names = load_nhefs()
if QUICK:
    Xn, yn, zn = Xn[:300], yn[:300], zn[:300]
t0 = time.perf_counter()
nhefs = bt.BCFRegressor(**SIZE, **RUN, random_state=0).fit(Xn, yn, zn)
print(f"NHEFS ({len(yn)} rows): {time.perf_counter() - t0:.1f}s")
if nhefs.convergence_ is not None:
    print(nhefs.convergence_)
lo, hi = nhefs.ate_interval(0.95)
print(f"difference of means {yn[zn > 0].mean() - yn[zn == 0].mean():.2f} kg; BCF: ATE {nhefs.ate_:.2f} kg "
      f"(95% interval {lo:.2f} to {hi:.2f}), CATT {nhefs.catt_:.2f} kg")
print(f"propensity estimates from {nhefs.propensity_.min():.2f} to {nhefs.propensity_.max():.2f} (overlap)")

# %% [markdown]
# The effect by age and by cigarettes a day: posterior means at every person
# with their 90% bands. A wide band says the data hold little about that
# group's effect; the average over everyone is much better known.

# %%
cate_n = nhefs.effect_draws(Xn)
band_n = interval(cate_n, 0.9)
fig, axes = plt.subplots(1, 2, figsize=(11, 4), layout="constrained")
for ax, col in zip(axes, ("age", "smokeintensity")):
    j = names.index(col)
    ax.errorbar(Xn[:, j], cate_n.mean(0), yerr=[cate_n.mean(0) - band_n[0], band_n[1] - cate_n.mean(0)], fmt="o",
                ms=2, lw=0.4, alpha=0.4)
    ax.axhline(nhefs.ate_, color="k", ls=":", label=f"ATE {nhefs.ate_:.2f} kg")
    ax.set_xlabel(col)
    ax.set_ylabel("effect of quitting on weight change (kg)")
    ax.legend(fontsize=7)
axes[0].set_title("CATE by age (90% bands)")
axes[1].set_title("CATE by cigarettes a day")
save(fig, "nhefs.png")

# %% [markdown]
# ## 3. A multilevel BCF in NumPyro
#
# Data from `J` sites: each has its own baseline `alpha_j` and its own shift of
# the effect `gamma_j`, `y = mu(x) + alpha_j + (tau(x) + gamma_j) z + e`.
# The model is BCF's (`bt.causal.bcf_model` is the same in one function)
# written with two `bt.bart_function`s and the group terms as NUTS sites,
# non-centred. The treatment enters linearly, so the trees of `tau` still take
# the conjugate step (the likelihood is quadratic in them, with row weights
# `z_i^2 / sigma^2`: rows with `z = 0` say nothing of `tau`). The trees and the
# group terms share one constant each (`mu` and the mean of `alpha`, `tau` and
# the mean of `gamma`), so the sites' effects are compared as `gamma_j` minus
# their mean.
#
# The library fits the full BCF with these group terms in one call,
# `bt.BCFRegressor().fit(X, y, z, groups=site)` (its `group_ate_` holds each
# site's average effect); writing the model out, as here, is how to change it.

# %%
def multilevel_bcf(X_mu, X_tau, z, site, n_sites, y=None):
    c = bt.causal
    m_mu, m_tau = SIZE.get("m_mu", c.M_MU), SIZE.get("m_tau", c.M_TAU)
    mu = bt.bart_function("mu", X_mu, m=m_mu, prior=c.MU_PRIOR, leaf_sd=c.MU_SD / math.sqrt(m_mu))
    tau = bt.bart_function("tau", X_tau, m=m_tau, prior=c.TAU_PRIOR, leaf_sd=c.TAU_SD / math.sqrt(m_tau))
    s_alpha = numpyro.sample("s_alpha", dist.HalfNormal(1.0))
    s_gamma = numpyro.sample("s_gamma", dist.HalfNormal(0.5))
    with numpyro.plate("sites", n_sites):
        alpha = numpyro.deterministic("alpha", s_alpha * numpyro.sample("alpha_raw", dist.Normal(0.0, 1.0)))
        gamma = numpyro.deterministic("gamma", s_gamma * numpyro.sample("gamma_raw", dist.Normal(0.0, 1.0)))
    sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
    numpyro.deterministic("effect", tau + gamma[site])
    numpyro.sample("y", dist.Normal(mu + alpha[site] + (tau + gamma[site]) * z, sigma), obs=y)


J = 6
rng = np.random.default_rng(2)
site = rng.integers(0, J, N)
xm = rng.normal(size=(N, 2))
alpha_true = rng.normal(0, 0.6, J)
gamma_true = rng.normal(0, 0.4, J)
pi_m = norm.cdf(0.6 * xm[:, 0])
zm = rng.binomial(1, pi_m)
tau_m = 0.5 + 0.5 * (xm[:, 1] > 0)
ym = np.sin(2 * xm[:, 0]) + alpha_true[site] + (tau_m + gamma_true[site]) * zm + 0.5 * rng.normal(size=N)
centre, scale = ym.mean(), ym.std()          # the model sees the standardised outcome
X_mu = np.column_stack([xm, pi_m])           # the propensity, known here, given to mu
t0 = time.perf_counter()
fit = bt.sample_model(multilevel_bcf, X_mu, xm, zm, site, J, y=(ym - centre) / scale, random_seed=0, **RUN)
print(f"multilevel BCF: {time.perf_counter() - t0:.1f}s")
if fit.convergence is not None:
    print(fit.convergence)
gamma_d = scale * np.asarray(fit.idata.posterior["gamma"]).reshape(-1, J)
contrast = gamma_d - gamma_d.mean(1, keepdims=True)
truth = gamma_true - gamma_true.mean()
lo, hi = interval(contrast, 0.9)
print(pd.DataFrame({"rows": np.bincount(site, minlength=J), "treated": np.bincount(site[zm > 0], minlength=J),
                    "truth": truth, "mean": contrast.mean(0), "q05": lo, "q95": hi},
                   index=[f"gamma[{j}] - mean" for j in range(J)]).round(3))
eff = scale * np.asarray(fit.idata.posterior["effect"]).reshape(-1, N)
print(f"average effect: truth {np.mean(tau_m + gamma_true[site]):.3f}, posterior mean {eff.mean():.3f}, "
      f"95% interval {np.quantile(eff.mean(1), 0.025):.3f} to {np.quantile(eff.mean(1), 0.975):.3f}")

# %%
fig, axes = plt.subplots(1, 2, figsize=(11, 4), layout="constrained")
axes[0].errorbar(np.arange(J), contrast.mean(0), yerr=[contrast.mean(0) - lo, hi - contrast.mean(0)], fmt="o",
                 label="posterior mean, 90% interval")
axes[0].plot(np.arange(J), truth, "kx", ms=8, label="truth")
axes[0].set_xlabel("site j")
axes[0].set_title("site shifts of the effect, gamma_j minus their mean")
axes[0].legend(fontsize=7)
tau_d = scale * np.asarray(fit.idata.posterior["tau"]).reshape(-1, N)
step = tau_d[:, xm[:, 1] > 0].mean(1) - tau_d[:, xm[:, 1] <= 0].mean(1)
axes[1].hist(step, bins=40, alpha=0.7, label="posterior")
axes[1].axvline(0.5, color="k", ls=":", label="truth")
axes[1].set_title("tau(x): mean over x2 > 0 minus over x2 <= 0")
axes[1].legend(fontsize=7)
save(fig, "multilevel.png")
