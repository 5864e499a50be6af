"""Bayesian causal forests (BCF; Hahn, Murray & Carvalho 2020, *Bayesian Analysis* 15(3)).

The model, on the standardised outcome ``y~ = (y - y_loc) / y_scale``:

    y~_i = mu(x_i, pihat_i) + tau(x_i) z_i + e_i,    e_i ~ N(0, sigma^2 / w_i)

written, as in the paper (section 5.2-5.3) and the ``bcf`` R package's defaults, with two sums of
trees inside a NumPyro model (:func:`bayestrees.bart_function`), sampled by
:func:`bayestrees.sample_model` (the trees by the BART family's step, every scalar by NUTS):

* **the prognostic function** ``mu(x, pihat) = s_mu mu~(x, pihat)``: ``mu~`` a sum of
  :data:`M_MU` = 200 trees with the Chipman prior ``(0.95, 2)`` that also sees the propensity
  estimate ``pihat`` (the paper's remedy for regularisation-induced confounding) and leaves of sd
  ``MU_SD / sqrt(200)`` (``MU_SD = 2``: the function's prior sd twice the outcome's); its scale
  ``s_mu ~ C+(0, 1)``, half-Cauchy, so the scale of ``mu`` has prior median ``2 sd(y)``
  (``use_muscale``);
* **the effect function** ``tau(x) = (b1 - b0) tau~(x)``: ``tau~`` a sum of :data:`M_TAU` = 50 trees
  with the stronger depth prior ``(0.25, 3)`` (most of its trees stumps: a homogeneous effect is
  the prior's centre), and the treatment coding ``b_z``, ``b0, b1 ~ N(0, 1/2)`` (section 5.3), that
  enters the likelihood as ``b_{z_i} tau~(x_i)`` in place of ``tau(x_i) z_i`` (the paper's
  "adaptive coding": the ``b0 tau~(x)`` of the control rows is absorbed by ``mu``).  ``b1 - b0 ~
  N(0, 1)``, so ``|b1 - b0|`` is half-Normal with median 0.674 and the leaves of ``tau~`` have sd
  ``TAU_SD / (0.674 sqrt(50))`` (``TAU_SD = 1``): the scale of ``tau`` has prior median ``sd(y)``
  (``use_tauscale``);
* **the noise**: ``sigma^2 ~ nu lambda / chi2_nu`` (``nu = 3``, ``lambda`` from ``sigma_hat``, the
  residual sd of a linear fit, with ``P(sigma < sigma_hat) = 0.9``: the BART family's prior).

Both functions enter the Normal likelihood linearly with a factor that does not depend on them
(``s_mu`` and ``b_{z_i}``), so the likelihood is quadratic in each with a diagonal Hessian: the tree
moves take the conjugate path, with row precisions ``s_mu^2 w_i / sigma^2`` for ``mu~`` and
``b_{z_i}^2 w_i / sigma^2`` for ``tau~``.

The posterior contract (deterministic sites of the model, in the outcome's units): ``mu`` and
``tau`` at the rows, ``ate`` (the mean of ``tau`` over the rows: the sample average effect),
``catt`` (over the treated rows), ``sigma``.  :class:`bayestrees.BCFRegressor` fits it from arrays.

**Binary outcomes** (``outcome="probit"``, :class:`bayestrees.BCFClassifier`): ``P(y = 1) = Phi(o +
mu(x, pihat) + tau(x) z)`` with the same two sums of trees and priors on the probit's latent scale
(noise sd 1, in place of the standardised outcome's), ``o = Phi^-1(mean y)``; the effect is reported
on the probability scale, ``Phi(o + mu + tau) - Phi(o + mu)`` at each row.  The trees take the
probit path (truncated-normal latents, then the conjugate step; the coding ``b_z`` multiplies
``tau~`` row by row, which that path takes).

**Groups (multilevel BCF).** Given a group per row (sites, schools, clinics: ``group``, ``n_groups``),
the model adds a group intercept and a group shift of the effect, both by NUTS, non-centred:

    y~_i = mu(x_i, pihat_i) + alpha_{g_i} + (tau(x_i) + gamma_{g_i}) z_i + e_i,
    alpha_j = s_alpha a_j,  gamma_j = s_gamma c_j,  a_j, c_j ~ N(0, 1),
    s_alpha ~ N+(0, GROUP_SD^2),  s_gamma ~ N+(0, GROUP_EFFECT_SD^2)

(standardised scale; half-Normal scales of 1 and 0.5 outcome sd: a group's intercept may move the
outcome by about its sd, a group's effect by about half of it).  The trees and the group terms
share one constant each (``mu`` and the mean of ``alpha``, ``tau`` and the mean of ``gamma``), so
what the data identify are the sums: the effect at a row, ``tau(x_i) + gamma_{g_i}`` (the ``tau``
site), and the groups' average effects ``group_ate`` (the mean of ``tau`` over each group's rows).
The treatment still enters the likelihood linearly, so both sums of trees keep the conjugate step.

A user who wants more (another likelihood, other group structures) writes the model in NumPyro with
:func:`bayestrees.bart_function` directly, starting from :func:`bcf_model` (the guide, "Causal
effects").
"""
from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

from jax.scipy.special import ndtr

from .distributions import BernoulliProbit
from .inference.treefn import bart_function
from .priors import ChipmanPrior, sigma_prior_lambda

__all__ = ["bcf_model", "bcf_settings", "standardise", "M_MU", "M_TAU", "MU_PRIOR", "TAU_PRIOR", "MU_SD", "TAU_SD",
           "HALF_NORMAL_MEDIAN", "GROUP_SD", "GROUP_EFFECT_SD"]

#: trees of the prognostic function (the paper's and ``bcf``'s ``ntree_control``)
M_MU = 200
#: trees of the effect function (``ntree_moderate``)
M_TAU = 50
#: depth prior of the prognostic trees (``base_control``, ``power_control``)
MU_PRIOR = ChipmanPrior(0.95, 2.0)
#: depth prior of the effect trees (``base_moderate``, ``power_moderate``): most trees are stumps
TAU_PRIOR = ChipmanPrior(0.25, 3.0)
#: prior sd of ``mu~``, in sd of the outcome (``sd_control = 2 sd(y)``)
MU_SD = 2.0
#: prior median of the effect's scale, in sd of the outcome (``sd_moderate = sd(y)``)
TAU_SD = 1.0
#: the median of ``|N(0, 1)|``: the leaves of ``tau~`` are widened by it so that ``TAU_SD`` is a median
HALF_NORMAL_MEDIAN = 0.6745
#: scale of the half-Normal prior of the group intercepts' sd ``s_alpha``, in sd of the outcome
GROUP_SD = 1.0
#: scale of the half-Normal prior of the group effect shifts' sd ``s_gamma``, in sd of the outcome
GROUP_EFFECT_SD = 0.5


def bcf_model(X_mu, X_tau, z, y=None, *, weights=None, y_loc: float = 0.0, y_scale: float = 1.0,
              nu: float = 3.0, lam: float = 1.0, m_mu: int = M_MU, m_tau: int = M_TAU,
              mu_prior=MU_PRIOR, tau_prior=TAU_PRIOR, mu_sd: float = MU_SD, tau_sd: float = TAU_SD,
              max_depth: int = 5, min_leaf_rows: int = 5, max_bins: int = 100, cuts_mu=None, cuts_tau=None,
              outcome: str = "normal", group=None, n_groups: int = 0, group_sd: float = GROUP_SD,
              group_effect_sd: float = GROUP_EFFECT_SD, categorical_features=None):
    """The Bayesian causal forest as a NumPyro model (the module docstring).

    Parameters
    ----------
    X_mu : array (n, d_mu)
        The prognostic function's features: the covariates and, by the paper's default, the
        propensity estimate as a last column.
    X_tau : array (n, d_tau)
        The effect function's features (the covariates).  Both may hold NaN for a missing value: each
        rule also says where one goes (:func:`bayestrees.bart_function`, "Missing values").
    z : array (n,) of 0 and 1
        The treatment.
    y : array (n,), optional
        The outcome, standardised (``(y - y_loc) / y_scale``); ``None`` to draw it (prediction).
    weights : array (n,), optional
        Row weights: row ``i``'s noise sd is ``sigma / sqrt(w_i)``.
    y_loc, y_scale : float
        The standardisation, to write ``mu``, ``tau``, ``ate``, ``catt`` and ``sigma`` in the outcome's units.
    nu, lam : float
        The noise prior ``sigma^2 ~ nu lam / chi2_nu`` on the standardised scale
        (:func:`bayestrees.priors.sigma_prior_lambda`).
    m_mu, m_tau, mu_prior, tau_prior, mu_sd, tau_sd
        The two sums of trees (module docstring; defaults the paper's).
    max_depth, min_leaf_rows, max_bins, cuts_mu, cuts_tau
        As :func:`bayestrees.bart_function`; ``cuts_*`` the training rows' cut tables, to evaluate the
        model at new rows with the training fit's rules.
    outcome : {"normal", "probit"}
        ``"probit"``: a binary ``y`` (0 or 1) with ``P(y = 1) = Phi(y_loc + mu + tau z)`` (the latent's
        noise sd is 1, which takes the place of the standardised outcome's; ``y_loc`` the offset
        ``Phi^-1(mean y)``, ``y_scale`` unused, no ``sigma``); ``mu`` is then the control rows'
        probability and ``tau``, ``ate``, ``catt`` differences of probabilities.
    group : int array (n,), optional
        Each row's group, ``0 .. n_groups - 1`` (multilevel BCF, the module docstring): group
        intercepts ``alpha`` and group shifts of the effect ``gamma`` (sites in the outcome's units,
        the probit's latent scale for ``"probit"``) and ``group_ate``, the mean effect over each
        group's rows.
    n_groups : int
        The number of groups (a Python integer: the size of the group sites).
    group_sd, group_effect_sd : float, default 1 and 0.5
        Scales of the half-Normal priors of the two groups' sds, in sd of the outcome.
    categorical_features : sequence of int, optional
        Columns of ``X_tau`` (and the same columns of ``X_mu``) that hold category codes and split
        by subsets of their categories in both functions (:func:`bayestrees.bart_function`).
    """
    z = jnp.asarray(z)
    grouped = group is not None
    if grouped != (int(n_groups) > 0):
        raise ValueError("give group and n_groups > 0 together (or neither)")
    mu_t = bart_function("mu_tilde", X_mu, m=m_mu, prior=mu_prior, leaf_sd=mu_sd / math.sqrt(m_mu),
                         max_depth=max_depth, min_leaf_rows=min_leaf_rows, max_bins=max_bins, cuts=cuts_mu,
                         categorical_features=categorical_features)
    tau_t = bart_function("tau_tilde", X_tau, m=m_tau, prior=tau_prior,
                          leaf_sd=tau_sd / (HALF_NORMAL_MEDIAN * math.sqrt(m_tau)),
                          max_depth=max_depth, min_leaf_rows=min_leaf_rows, max_bins=max_bins, cuts=cuts_tau,
                          categorical_features=categorical_features)
    mu_scale = numpyro.sample("mu_scale", dist.HalfCauchy(1.0))
    b0 = numpyro.sample("b0", dist.Normal(0.0, math.sqrt(0.5)))
    b1 = numpyro.sample("b1", dist.Normal(0.0, math.sqrt(0.5)))
    treated = z > 0
    control = mu_scale * mu_t + b0 * tau_t      # the control rows' mean (the probit: its latent)
    shift = (b1 - b0) * tau_t                   # the effect on the model's scale
    eta = mu_scale * mu_t + jnp.where(treated, b1, b0) * tau_t
    if grouped:
        group = jnp.asarray(group, jnp.int32)
        unit = 1.0 if outcome == "probit" else y_scale
        s_alpha = numpyro.sample("s_alpha", dist.HalfNormal(float(group_sd)))
        s_gamma = numpyro.sample("s_gamma", dist.HalfNormal(float(group_effect_sd)))
        with numpyro.plate("groups", int(n_groups)):
            alpha = s_alpha * numpyro.sample("alpha_raw", dist.Normal(0.0, 1.0))
            gamma = s_gamma * numpyro.sample("gamma_raw", dist.Normal(0.0, 1.0))
        numpyro.deterministic("alpha", unit * alpha)
        numpyro.deterministic("gamma", unit * gamma)
        control = control + alpha[group]
        shift = shift + gamma[group]
        eta = eta + alpha[group] + jnp.where(treated, gamma[group], 0.0)
    if outcome == "probit":   # the effect on the probability of a 1
        mu = ndtr(y_loc + control)
        tau = ndtr(y_loc + control + shift) - mu
    else:
        mu = y_loc + y_scale * control
        tau = y_scale * shift if grouped else y_scale * (b1 - b0) * tau_t
    numpyro.deterministic("mu", mu)
    numpyro.deterministic("tau", tau)
    numpyro.deterministic("ate", jnp.mean(tau))
    if grouped:
        rows = jnp.zeros(int(n_groups), tau.dtype).at[group].add(1.0)
        numpyro.deterministic("group_ate", jnp.zeros(int(n_groups), tau.dtype).at[group].add(tau) / jnp.maximum(rows, 1.0))
    numpyro.deterministic("catt", jnp.sum(jnp.where(treated, tau, 0.0)) / jnp.maximum(jnp.sum(treated), 1))
    if outcome == "probit":
        numpyro.sample("y", BernoulliProbit(y_loc + eta), obs=y)
        return
    if outcome != "normal":
        raise ValueError(f"outcome must be 'normal' or 'probit', got {outcome!r}")
    sigma2 = numpyro.sample("sigma2", dist.InverseGamma(nu / 2.0, nu * lam / 2.0))
    numpyro.deterministic("sigma", y_scale * jnp.sqrt(sigma2))
    sd = jnp.sqrt(sigma2) if weights is None else jnp.sqrt(sigma2 / jnp.asarray(weights))
    numpyro.sample("y", dist.Normal(eta, sd), obs=y)


def standardise(y, weights=None) -> tuple[float, float]:
    """``(loc, scale)`` of the outcome: its (weighted) mean and sd (1 where the sd is 0)."""
    y = np.asarray(y, np.float64)
    w = np.ones_like(y) if weights is None else np.asarray(weights, np.float64)
    loc = float(np.sum(w * y) / np.sum(w))
    sd = float(np.sqrt(np.sum(w * (y - loc) ** 2) / np.sum(w)))
    return loc, (sd if sd > 0 else 1.0)


def bcf_settings(X_mu, X_tau, y, z, weights=None, *, nu: float = 3.0, q: float = 0.9, sigma_hat=None,
                 m_mu: int = M_MU, m_tau: int = M_TAU, mu_prior=None, tau_prior=None, mu_sd: float = MU_SD,
                 tau_sd: float = TAU_SD, max_depth: int = 5, min_leaf_rows: int = 5, max_bins: int = 100,
                 outcome: str = "normal", group=None, categorical_features=()):
    """``(y~, settings)``: the standardised outcome and the keyword arguments of :func:`bcf_model` for
    these training rows: the standardisation, the noise prior's ``lambda`` (from ``sigma_hat``, in the
    outcome's units, default the residual sd of the least-squares fit of ``y`` on ``X_tau``, ``z``
    and, given ``group`` (codes ``0 .. J - 1``), the groups' indicators; a column of
    ``categorical_features`` enters it as its categories' indicators; a missing value of an ordered
    column as the column's mean and an indicator, of a categorical one as one more category), the
    trees' settings and the cut tables of the training rows (new rows are split by them).
    ``outcome="probit"``: ``y`` holds 0 and 1, kept as it is, and ``y_loc`` is the offset
    ``Phi^-1(mean y)``."""
    from scipy.special import ndtri

    from .inference.treefn.site import MISSING_CATEGORY, cut_table

    y = np.asarray(y, np.float64)
    X_tau = np.asarray(X_tau, np.float64)
    n = y.shape[0]
    w = None if weights is None else np.asarray(weights, np.float64)
    if outcome == "probit":
        rate = float(np.clip(np.average(y, weights=w), 0.01, 0.99))
        loc, scale, ys = float(ndtri(rate)), 1.0, y
    else:
        loc, scale = standardise(y, w)
        ys = (y - loc) / scale
    if outcome == "probit":
        sigma = 1.0
    elif sigma_hat is None:
        cat = list(categorical_features or ())
        ordered = np.delete(X_tau, cat, axis=1)
        # a missing value: its column's mean and an indicator (ordered), one more category (categorical)
        gone = np.isnan(ordered)
        means = np.array([c[~np.isnan(c)].mean() if (~np.isnan(c)).any() else 0.0 for c in ordered.T])
        ordered = np.where(gone, means, ordered)
        flags = gone[:, gone.any(0)].astype(np.float64)
        coded = [np.where(np.isnan(X_tau[:, j]), float(MISSING_CATEGORY), X_tau[:, j]) for j in cat]
        dummies = [(c[:, None] == np.unique(c)[None, 1:]).astype(np.float64) for c in coded]
        A = np.column_stack([np.ones(n), ordered, flags, *dummies, np.asarray(z, np.float64)])
        if group is not None:   # the groups' indicators (the first group the intercept's)
            g = np.asarray(group)
            A = np.column_stack([A, (g[:, None] == np.arange(1, int(g.max()) + 1)[None, :]).astype(np.float64)])
        live = np.ones(n, bool) if w is None else w > 0
        sigma = 1.0
        if int(live.sum()) > A.shape[1]:
            sw = np.sqrt(np.ones(n) if w is None else w)[live]
            beta, *_ = np.linalg.lstsq(A[live] * sw[:, None], ys[live] * sw, rcond=None)
            r = (ys - A @ beta)[live]
            sigma = float(np.sqrt(np.sum((sw * r) ** 2) / (live.sum() - A.shape[1])))
    else:
        sigma = float(sigma_hat) / scale
    settings = dict(y_loc=loc, y_scale=scale, nu=float(nu), lam=sigma_prior_lambda(max(sigma, 1e-6), nu, q),
                    m_mu=int(m_mu), m_tau=int(m_tau), mu_prior=MU_PRIOR if mu_prior is None else mu_prior,
                    tau_prior=TAU_PRIOR if tau_prior is None else tau_prior, mu_sd=float(mu_sd), tau_sd=float(tau_sd),
                    max_depth=int(max_depth), min_leaf_rows=int(min_leaf_rows), max_bins=int(max_bins),
                    cuts_mu=cut_table(np.asarray(X_mu, np.float64), max_bins), cuts_tau=cut_table(X_tau, max_bins),
                    outcome=outcome)
    if categorical_features:
        settings["categorical_features"] = tuple(int(j) for j in categorical_features)
    return ys, settings
