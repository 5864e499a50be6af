"""``bt.BCFRegressor``: Bayesian causal forests (:mod:`bayestrees.causal`) in scikit-learn's style."""
from __future__ import annotations

import warnings

import numpy as np

from ..convergence import ConvergenceWarning, convergence_table, warn_convergence
from ..causal import M_MU, M_TAU, MU_SD, TAU_SD, bcf_model, bcf_settings
from ..data import check_y_regression
from ..inference.bart.fit import check_weights
from ..inference.treefn import check_categorical, check_category_codes, sample_model
from .base import EstimatorBase, NotFittedError, TreeEstimatorMixin, parameters_doc

__all__ = ["BCFRegressor", "BCFClassifier", "estimate_propensity"]


def estimate_propensity(X, z, random_state: int = 0, categorical_features=None):
    """``(pihat, model)``: the posterior mean of ``P(z = 1 | x)`` at the rows of ``X`` under a
    ``bt.BARTClassifier`` of 50 trees (2 chains of 500 + 500 steps; ``categorical_features`` split
    by subsets), and that fitted model (for new rows).  A plug-in estimate, as the paper's: a BCF
    fitted with it does not carry its uncertainty."""
    from .bart import BARTClassifier

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # the propensity model's own convergence is not the user's question
        model = BARTClassifier(m=50, draws=500, tune=500, chains=2, random_state=random_state,
                               categorical_features=categorical_features).fit(X, z)
    return model.predict_proba(X)[:, 1], model


def _features(X, name: str = "X", n_features: int | None = None) -> np.ndarray:
    if hasattr(X, "tocsr") or hasattr(X, "todense"):
        raise TypeError("sparse input is not supported: pass a dense array (X.toarray())")
    try:
        A = np.asarray(X, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be numbers (encode categorical columns first)") from None
    if A.ndim == 1:
        A = A[:, None]
    if A.ndim != 2 or A.shape[0] == 0:
        raise ValueError(f"{name} must be a 2-d array of rows, got shape {A.shape}")
    if np.isinf(A).any():
        raise ValueError(f"{name} holds infinite values (row {int(np.argwhere(np.isinf(A))[0][0])}); Bayesian "
                         "causal forests take finite features, and NaN for a missing value")
    if n_features is not None and A.shape[1] != n_features:
        raise ValueError(f"{name} has {A.shape[1]} features, but the model was fitted on {n_features}")
    return A


def _treatment(z, n: int, *, both: bool = True) -> np.ndarray:
    z = np.asarray(z)
    if z.ndim != 1 or z.shape[0] != n:
        raise ValueError(f"z must be one treatment per row ({n}), got shape {z.shape}")
    if not np.all(np.isin(z, (0, 1))):
        raise ValueError("z must be a binary treatment coded 0 (control) and 1 (treated)")
    z = z.astype(np.int32)
    if both and (z.min() == z.max()):
        raise ValueError("z holds one arm only; the effect needs treated and control rows")
    return z


def _propensity(pihat, n: int) -> np.ndarray:
    p = np.asarray(pihat, np.float64).reshape(-1)
    if p.shape[0] != n or not np.all(np.isfinite(p)) or np.any((p < 0) | (p > 1)):
        raise ValueError(f"pihat must be {n} probabilities in [0, 1]")
    return p


def _groups(groups, n: int):
    """``(labels, codes)`` of the rows' groups (sorted labels and each row's index among them), or
    ``(None, None)`` without groups."""
    if groups is None:
        return None, None
    groups = _one_per_row(groups, n)
    if any(v is None or (isinstance(v, float) and v != v) for v in groups.tolist()):
        raise ValueError("groups holds missing labels (None or NaN): give every row a group")
    labels, codes = np.unique(groups, return_inverse=True)
    if labels.shape[0] < 2:
        raise ValueError(f"groups must hold at least two groups, got {labels.shape[0]}")
    return labels, codes.reshape(-1)


def _one_per_row(groups, n: int) -> np.ndarray:
    groups = np.asarray(groups)
    if groups.ndim != 1 or groups.shape[0] != n:
        raise ValueError(f"groups must be one label per row ({n}), got shape {groups.shape}")
    return groups


def _no_groups(groups) -> None:
    if groups is not None:
        raise ValueError("this model was fitted without groups: fit with groups= to predict by group")


def _interval(draws: np.ndarray, prob: float) -> np.ndarray:
    """Equal-tailed ``prob`` interval of ``draws`` over their first axis, ends on the last axis."""
    if not 0 < prob < 1:
        raise ValueError(f"prob must be in (0, 1), got {prob}")
    return np.moveaxis(np.quantile(draws, [(1 - prob) / 2, (1 + prob) / 2], axis=0), 0, -1)


class BCFRegressor(EstimatorBase):
    """Bayesian causal forest for a continuous outcome and a binary treatment (Hahn, Murray & Carvalho 2020).

    ``y = mu(x, pihat) + tau(x) z + e``: a prognostic sum of trees that sees the propensity estimate,
    and an effect sum of trees with a stronger depth prior and its own scale; the defaults are the
    paper's (:mod:`bayestrees.causal`).  Sampled as a NumPyro model (:func:`bayestrees.sample_model`:
    the trees by the BART family's conjugate step, the scales, the treatment coding and ``sigma``
    by NUTS).

    Parameters
    ----------
    m_mu, m_tau : int, default 200 and 50
        Trees of the prognostic and the effect function.
    mu_prior, tau_prior : bt.priors.ChipmanPrior, optional
        Their depth priors (default ``(0.95, 2)`` and ``(0.25, 3)``).
    mu_sd, tau_sd : float, default 2 and 1
        Prior scales, in sd of the outcome: ``mu``'s prior sd before its half-Cauchy scale, and the
        prior median of the effect's scale.
    nu, q : float, default 3 and 0.9
        The noise prior ``sigma^2 ~ nu lambda / chi2_nu`` with ``P(sigma < sigma_hat) = q``.
    sigma_hat : float, optional
        The prior's guess of ``sigma`` (default: the residual sd of a linear fit of ``y`` on ``X``
        and ``z``).
    propensity : {"bart"}, default "bart"
        How ``pihat`` is estimated when ``fit`` is not given one: the posterior mean of
        ``P(z = 1 | x)`` under ``bt.BARTClassifier`` (50 trees, 2 chains of 500 + 500), plugged in as
        the paper does: its uncertainty is not carried into the effect's posterior.
    include_pi : {"mu", "none"}, default "mu"
        Give ``pihat`` to the prognostic function as a feature (the paper's default) or not.
    max_depth, min_leaf_rows, max_bins : int
        As :func:`bayestrees.bart_function`.
    categorical_features : sequence of int, optional
        Columns of ``X`` that hold category codes ``0 .. 22`` (integers: a site, a region, a
        diagnosis): both functions and the propensity model split them by subsets of their
        categories (:func:`bayestrees.bart_function`); a new row's category that no rule names goes
        right.
    draws, tune, chains : int, default 1000, 1000, 4
    random_state : int, optional
    progressbar : bool, default False

    Attributes
    ----------
    fit_ : bt.inference.treefn.ModelFit
        The sampled model.
    idata_ : arviz.InferenceData
        ``posterior``: ``tau`` and ``mu`` at the training rows (the CATE and the control mean),
        ``ate``, ``catt``, ``sigma``, ``b0``, ``b1``, ``mu_scale``, each function's ``n_leaves``,
        ``depth`` and ``split_counts`` (``mu_tilde_*``, ``tau_tilde_*``); ``log_likelihood``
        (pointwise); ``observed_data``.
    convergence_ : ConvergenceReport
    propensity_ : (n,) the training rows' ``pihat``
    cate_ : (n,) posterior mean effect at the training rows
    ate_ , catt_ : float
        Posterior means of the sample average effect and of the average effect on the treated.
    groups_ : (J,) the group labels of a fit on ``groups`` (sorted), else None
    group_ate_ : (J,) posterior mean effect over each group's rows (a fit on ``groups``), else None

    Notes
    -----
    The fit passes its data (features, cut tables, outcome, treatment, weights, the outcome's
    standardisation) as arguments of the compiled programs (:func:`bayestrees.sample_model`'s
    ``jit_data=True``), so a second fit on data of the same shapes (a replication, a
    cross-validation fold, a bootstrap) loads the programs the first compiled.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(100, 3)); z = rng.binomial(1, 0.5, size=100)
    >>> y = X[:, 0] + (1.0 + X[:, 1]) * z + 0.5 * rng.normal(size=100)
    >>> bcf = bt.BCFRegressor(m_mu=10, m_tau=5, draws=50, tune=50, chains=1, random_state=0)
    >>> bcf = bcf.fit(X, y, z, pihat=np.full(100, 0.5))
    >>> bcf.effect_interval(X[:3]).shape
    (3, 2)
    """

    def __init__(self, m_mu: int = M_MU, m_tau: int = M_TAU, *, mu_prior=None, tau_prior=None, mu_sd: float = MU_SD,
                 tau_sd: float = TAU_SD, nu: float = 3.0, q: float = 0.9, sigma_hat=None, propensity: str = "bart",
                 include_pi: str = "mu", max_depth: int = 5, min_leaf_rows: int = 5, max_bins: int = 100,
                 categorical_features=None, draws: int = 1000, tune: int = 1000, chains: int = 4, random_state=None,
                 progressbar: bool = False):
        self.m_mu = m_mu
        self.m_tau = m_tau
        self.mu_prior = mu_prior
        self.tau_prior = tau_prior
        self.mu_sd = mu_sd
        self.tau_sd = tau_sd
        self.nu = nu
        self.q = q
        self.sigma_hat = sigma_hat
        self.propensity = propensity
        self.include_pi = include_pi
        self.max_depth = max_depth
        self.min_leaf_rows = min_leaf_rows
        self.max_bins = max_bins
        self.categorical_features = categorical_features
        self.draws = draws
        self.tune = tune
        self.chains = chains
        self.random_state = random_state
        self.progressbar = progressbar

    # ---- fitting -------------------------------------------------------------------------------
    _outcome = "normal"

    @staticmethod
    def _check_outcome(y, n: int) -> np.ndarray:
        return check_y_regression(y, n)

    def _seed(self) -> int:
        rs = self.random_state
        return 0 if rs is None else int(rs)

    def _estimate_propensity(self, X, z) -> np.ndarray:
        if self.propensity != "bart":
            raise ValueError(f"propensity must be 'bart' (or give pihat to fit), got {self.propensity!r}")
        pihat, self.propensity_model_ = estimate_propensity(X, z, self._seed(),
                                                            list(self._categorical) or None)
        return pihat

    def _mu_features(self, X, pihat) -> np.ndarray:
        if self.include_pi == "mu":
            return np.column_stack([X, pihat])
        if self.include_pi == "none":
            return X
        raise ValueError(f"include_pi must be 'mu' or 'none', got {self.include_pi!r}")

    def fit(self, X, y, z, pihat=None, sample_weight=None, groups=None) -> "BCFRegressor":
        """Sample the posterior.

        Parameters
        ----------
        X : array-like (n, d)
            Covariates: finite numbers, NaN for a missing value (each rule of both functions and of
            the propensity model also says where a missing value goes: :func:`bayestrees.bart_function`,
            "Missing values").
        y : array-like (n,)
            The outcome.
        z : array-like (n,) of 0 and 1
            The treatment.
        pihat : array-like (n,), optional
            Propensity estimates ``P(z = 1 | x)``; default: estimated (``propensity``).
        sample_weight : array-like (n,), optional
            Row ``i``'s noise sd is ``sigma / sqrt(w_i)``.
        groups : array-like (n,), optional
            Each row's group (any labels: sites, schools, clinics): multilevel BCF, with a group
            intercept and a group shift of the effect, sampled by NUTS (:mod:`bayestrees.causal`,
            "Groups").  Adds ``alpha``, ``gamma`` and ``group_ate`` (the mean effect over each
            group's rows) to the posterior, and ``groups_`` and ``group_ate_``.

        Returns
        -------
        self
        """
        X = _features(X)
        n = X.shape[0]
        self._categorical = check_categorical(self.categorical_features, X.shape[1], "X")
        check_category_codes(X, self._categorical, "X")
        y = self._check_outcome(y, n)
        z = _treatment(z, n)
        self.groups_, group = _groups(groups, n)
        w = check_weights(sample_weight, n, "sample_weight", all_zero=False)
        for name in ("m_mu", "m_tau", "draws", "tune", "chains"):
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or v < (0 if name == "tune" else 1):
                raise ValueError(f"{name} must be an integer >= {0 if name == 'tune' else 1}, got {v!r}")
        self.propensity_model_ = None
        pihat = self._estimate_propensity(X, z) if pihat is None else _propensity(pihat, n)
        self.propensity_ = pihat
        X_mu = self._mu_features(X, pihat)
        ys, self._settings = bcf_settings(X_mu, X, y, z, w, nu=self.nu, q=self.q, sigma_hat=self.sigma_hat,
                                          m_mu=self.m_mu, m_tau=self.m_tau, mu_prior=self.mu_prior,
                                          tau_prior=self.tau_prior, mu_sd=self.mu_sd, tau_sd=self.tau_sd,
                                          max_depth=self.max_depth, min_leaf_rows=self.min_leaf_rows,
                                          max_bins=self.max_bins, outcome=self._outcome, group=group,
                                          categorical_features=self._categorical)
        grouping = {} if group is None else dict(group=group.astype(np.int32), n_groups=len(self.groups_))
        with warnings.catch_warnings():   # the sampler's table holds the unidentified b0, b1, mu_scale: see below
            warnings.simplefilter("ignore", ConvergenceWarning)
            # the data and what is computed from them (the standardisation, the noise prior's scale)
            # as arguments of the compiled programs: another fit of the same shapes compiles nothing
            from_data = {k: np.asarray(self._settings[k], np.float32) for k in ("y_loc", "y_scale", "lam")}
            fit = sample_model(bcf_model, X_mu.astype(np.float32), X.astype(np.float32), z, ys.astype(np.float32),
                               weights=None if w is None else w.astype(np.float32), draws=int(self.draws),
                               tune=int(self.tune), chains=int(self.chains), random_seed=self._seed(),
                               progressbar=self.progressbar, jit_data=True,
                               **{**self._settings, **from_data, **grouping})
        self.fit_ = fit
        self.idata_ = fit.idata
        self.convergence_ = None
        if int(self.chains) > 1:
            self.convergence_ = convergence_table(self._identified(), "bcf")
            warn_convergence(self.convergence_, stacklevel=2)
        self.n_features_in_ = X.shape[1]
        post = fit.idata.posterior
        self.cate_ = np.asarray(post["tau"]).reshape(-1, n).mean(0)
        self.ate_ = float(np.asarray(post["ate"]).mean())
        self.catt_ = float(np.asarray(post["catt"]).mean())
        self.group_ate_ = None if group is None else np.asarray(post["group_ate"]).reshape(-1, len(self.groups_)).mean(0)
        return self

    def _identified(self) -> dict:
        """The scalar summaries the data identify, ``{name: (chains, draws)}``: ``ate``, ``catt``,
        ``sigma``, the mean of ``mu`` over the rows, and each function's total leaves.  ``b0``,
        ``b1``, ``mu_scale`` and the functions ``mu~``, ``tau~`` are working parameters (``tau~``
        times ``c`` with ``b / c`` is the same model), so their own R-hat says nothing of the
        effect's and is left out."""
        post = self.idata_.posterior
        out = {v: np.asarray(post[v], np.float64) for v in ("ate", "catt", "sigma") if v in post}
        out["mu_mean"] = np.asarray(post["mu"], np.float64).mean(-1)
        for name in ("mu_tilde", "tau_tilde"):
            out[f"{name}_leaves"] = np.asarray(post[f"{name}_n_leaves"], np.float64).sum(-1)
        if getattr(self, "groups_", None) is not None:
            group_ate = np.asarray(post["group_ate"], np.float64)
            for j, label in enumerate(self.groups_):
                out[f"group_ate[{label}]"] = group_ate[..., j]
        return out

    def save(self, path) -> None:
        """Save the fitted model (a pickle: draws, InferenceData, settings); :func:`bayestrees.load` reads it."""
        self._check()
        TreeEstimatorMixin.save(self, path)

    # ---- the posterior at new rows ------------------------------------------------------------
    def _check(self):
        if getattr(self, "fit_", None) is None:
            raise NotFittedError(f"This {type(self).__name__} instance is not fitted yet. Call 'fit' with X, y and z first.")

    def _draws(self, name: str) -> np.ndarray:
        return np.asarray(self.fit_.samples[name], np.float64).reshape(-1)

    def _tilde(self, name: str, X) -> np.ndarray:
        f = self.fit_.function(name, X)            # (chain, draw, n)
        return np.asarray(f, np.float64).reshape(-1, f.shape[-1])

    def effect_draws(self, X, groups=None) -> np.ndarray:
        """Posterior draws of the conditional average treatment effect ``tau(x)``.

        Parameters
        ----------
        X : array-like (n, d)
            Rows of the training covariates' columns.
        groups : array-like (n,), optional
            With a fit on groups: the rows' groups (labels seen in ``fit``), whose effect shifts are
            added; ``None``: the rows of one new group, its shift drawn from the groups' prior given
            ``s_gamma``, so the draws carry the spread between groups.

        Returns
        -------
        np.ndarray
            ``(chains * draws, n)``, in the outcome's units.
        """
        self._check()
        X = _features(X, n_features=self.n_features_in_)
        return self._settings["y_scale"] * self._latents(X, None, groups, control=False)[1]

    def effect(self, X, groups=None) -> np.ndarray:
        """Posterior mean of the effect ``tau(x)``.

        Parameters
        ----------
        X : array-like (n, d)
        groups : array-like (n,), optional
            As :meth:`effect_draws`.

        Returns
        -------
        np.ndarray
            ``(n,)``.
        """
        return self.effect_draws(X, groups).mean(0)

    def effect_interval(self, X, prob: float = 0.9, groups=None) -> np.ndarray:
        """Equal-tailed credible interval of the effect ``tau(x)``.

        Parameters
        ----------
        X : array-like (n, d)
        prob : float in (0, 1), default 0.9
        groups : array-like (n,), optional
            As :meth:`effect_draws`.

        Returns
        -------
        np.ndarray
            ``(n, 2)``: lower and upper ends.
        """
        return _interval(self.effect_draws(X, groups), prob)

    def ate_interval(self, prob: float = 0.95) -> np.ndarray:
        """Equal-tailed credible interval of the sample average treatment effect (over the training rows).

        Parameters
        ----------
        prob : float in (0, 1), default 0.95

        Returns
        -------
        np.ndarray
            ``(2,)``: lower and upper ends.
        """
        self._check()
        return _interval(np.asarray(self.idata_.posterior["ate"]).ravel(), prob)

    def predict_draws(self, X, z, pihat=None, groups=None) -> np.ndarray:
        """Posterior draws of the mean outcome ``E[y | x, z] = mu(x, pihat) + tau(x) z``.

        Parameters
        ----------
        X : array-like (n, d)
        z : array-like (n,) of 0 and 1
            The treatment at which to predict each row.
        pihat : array-like (n,), optional
            Propensity estimates at ``X``; default the fitted propensity model's (``propensity``),
            required when ``fit`` was given ``pihat``.
        groups : array-like (n,), optional
            With a fit on groups: the rows' groups (their intercepts and effect shifts added), or
            ``None`` for the rows of one new group (both drawn from the groups' prior).

        Returns
        -------
        np.ndarray
            ``(chains * draws, n)``.
        """
        X, z = self._rows(X, z)
        control, effect = self._latents(X, pihat, groups)
        return self._settings["y_loc"] + self._settings["y_scale"] * (control + z * effect)

    def _rows(self, X, z):
        """New rows and their treatment, checked: ``(X, z[None, :])``."""
        self._check()
        X = _features(X, n_features=self.n_features_in_)
        return X, _treatment(z, X.shape[0], both=False)[None, :]

    def _pihat_at(self, X, pihat):
        """``pihat`` at new rows: given, else the fitted propensity model's (0 where unused)."""
        n = X.shape[0]
        if pihat is None and self.include_pi == "mu":
            if self.propensity_model_ is None:
                raise ValueError("the model was fitted with a given pihat: give pihat for these rows too")
            pihat = self.propensity_model_.predict_proba(X)[:, 1]
        return np.zeros(n) if pihat is None else _propensity(pihat, n)

    def _latents(self, X, pihat, groups=None, control: bool = True):
        """``(control, effect)`` draws at the rows of ``X`` on the model's scale (standardised, or the
        probit's latent without its offset): ``mu_scale mu~ + b0 tau~`` and ``(b1 - b0) tau~``, plus
        the groups' ``alpha`` and ``gamma`` after a fit on groups (:meth:`_group_terms`); ``control=False``
        leaves the control draws out (``None``)."""
        tau_t = self._tilde("tau_tilde", X)
        effect = (self._draws("b1") - self._draws("b0"))[:, None] * tau_t
        base = None
        if control:
            mu_t = self._tilde("mu_tilde", self._mu_features(X, self._pihat_at(X, pihat)))
            base = self._draws("mu_scale")[:, None] * mu_t + self._draws("b0")[:, None] * tau_t
        if getattr(self, "groups_", None) is None:
            _no_groups(groups)
            return base, effect
        alpha, gamma = self._group_terms(groups, X.shape[0])
        return (None if base is None else base + alpha), effect + gamma

    def _group_terms(self, groups, n: int):
        """``(alpha, gamma)`` draws ``(chains * draws, n)`` on the model's scale at rows of ``groups``
        (labels seen in ``fit``), or of one new group when ``groups`` is None (``s_alpha a``, ``s_gamma
        c`` with ``a, c ~ N(0, 1)`` drawn per posterior draw, seeded by ``random_state``)."""
        s_alpha, s_gamma = self._draws("s_alpha"), self._draws("s_gamma")
        if groups is None:
            rng = np.random.default_rng(self._seed())
            a, c = rng.standard_normal((2, s_alpha.shape[0]))
            return np.repeat((s_alpha * a)[:, None], n, 1), np.repeat((s_gamma * c)[:, None], n, 1)
        groups = _one_per_row(groups, n)
        index = {label: j for j, label in enumerate(self.groups_.tolist())}
        unseen = sorted({str(g) for g in groups.tolist() if g not in index})
        if unseen:
            raise ValueError(f"groups holds labels not seen in fit: {', '.join(unseen[:5])}; give groups=None for "
                             "the rows of one new group")
        codes = np.array([index[g] for g in groups.tolist()], np.int64)
        J = len(self.groups_)
        alpha = s_alpha[:, None] * np.asarray(self.fit_.samples["alpha_raw"], np.float64).reshape(-1, J)
        gamma = s_gamma[:, None] * np.asarray(self.fit_.samples["gamma_raw"], np.float64).reshape(-1, J)
        return alpha[:, codes], gamma[:, codes]

    def predict(self, X, z, pihat=None, groups=None) -> np.ndarray:
        """Posterior mean of the mean outcome ``E[y | x, z]``.

        Parameters
        ----------
        X : array-like (n, d)
        z : array-like (n,) of 0 and 1
        pihat, groups : array-like (n,), optional
            As :meth:`predict_draws`.

        Returns
        -------
        np.ndarray
            ``(n,)``.
        """
        return self.predict_draws(X, z, pihat, groups).mean(0)


class BCFClassifier(BCFRegressor):
    __doc__ = parameters_doc(
        """Bayesian causal forest for a binary outcome (probit) and a binary treatment.

        ``P(y = 1 | x, z) = Phi(o + mu(x, pihat) + tau(x) z)``: the model of :class:`BCFRegressor` on the
        probit's latent scale (:mod:`bayestrees.causal`, ``outcome="probit"``), the trees by the probit
        path of the tree functions.  The effect is reported as a difference of probabilities,
        ``Phi(o + mu + tau) - Phi(o + mu)``, which depends on ``mu`` as well as ``tau``: at new rows it
        needs ``pihat`` there (the fitted propensity model's by default).  ``nu``, ``q`` and
        ``sigma_hat`` are unused: the latent's sd is 1.""",
        BCFRegressor,
        examples="""
        >>> rng = np.random.default_rng(0)
        >>> X = rng.normal(size=(100, 2)); z = rng.binomial(1, 0.5, size=100)
        >>> y = (X[:, 0] + 0.8 * z + rng.normal(size=100) > 0).astype(int)
        >>> clf = bt.BCFClassifier(m_mu=10, m_tau=5, draws=50, tune=50, chains=1, random_state=0)
        >>> clf = clf.fit(X, y, z, pihat=np.full(100, 0.5))
        >>> clf.effect(X[:3], pihat=np.full(3, 0.5)).shape
        (3,)""")

    _outcome = "probit"

    @staticmethod
    def _check_outcome(y, n: int) -> np.ndarray:
        y = np.asarray(y)
        if y.ndim != 1 or y.shape[0] != n:
            raise ValueError(f"y must be one outcome per row ({n}), got shape {y.shape}")
        if not np.all(np.isin(y, (0, 1))):
            raise ValueError("y must be a binary outcome coded 0 and 1 (BCFRegressor takes a continuous one)")
        return y.astype(np.float64)

    def effect_draws(self, X, pihat=None, groups=None) -> np.ndarray:
        """Posterior draws of the effect on the probability of a 1, ``P(y = 1 | x, 1) - P(y = 1 | x, 0)``.

        Parameters
        ----------
        X : array-like (n, d)
        pihat : array-like (n,), optional
            Propensity estimates at ``X`` (default: the fitted propensity model's; required when
            ``fit`` was given ``pihat``).
        groups : array-like (n,), optional
            As :meth:`BCFRegressor.effect_draws`.

        Returns
        -------
        np.ndarray
            ``(chains * draws, n)``.
        """
        from scipy.special import ndtr

        self._check()
        X = _features(X, n_features=self.n_features_in_)
        control, effect = self._latents(X, pihat, groups)
        control = control + self._settings["y_loc"]
        return ndtr(control + effect) - ndtr(control)

    def effect(self, X, pihat=None, groups=None) -> np.ndarray:
        """Posterior mean of the effect on the probability of a 1.

        Parameters
        ----------
        X : array-like (n, d)
        pihat : array-like (n,), optional
        groups : array-like (n,), optional
            As :meth:`BCFRegressor.predict_draws`.

        Returns
        -------
        np.ndarray
            ``(n,)``.
        """
        return self.effect_draws(X, pihat, groups).mean(0)

    def effect_interval(self, X, prob: float = 0.9, pihat=None, groups=None) -> np.ndarray:
        """Equal-tailed credible interval of the effect on the probability of a 1.

        Parameters
        ----------
        X : array-like (n, d)
        prob : float in (0, 1), default 0.9
        pihat : array-like (n,), optional
        groups : array-like (n,), optional
            As :meth:`BCFRegressor.predict_draws`.

        Returns
        -------
        np.ndarray
            ``(n, 2)``.
        """
        return _interval(self.effect_draws(X, pihat, groups), prob)

    def predict_draws(self, X, z, pihat=None, groups=None) -> np.ndarray:
        """Posterior draws of ``P(y = 1 | x, z)``.

        Parameters
        ----------
        X : array-like (n, d)
        z : array-like (n,) of 0 and 1
        pihat : array-like (n,), optional
        groups : array-like (n,), optional
            As :meth:`BCFRegressor.predict_draws`.

        Returns
        -------
        np.ndarray
            ``(chains * draws, n)``.
        """
        from scipy.special import ndtr

        X, z = self._rows(X, z)
        control, effect = self._latents(X, pihat, groups)
        return ndtr(self._settings["y_loc"] + control + z * effect)

    def predict_proba(self, X, z, pihat=None, groups=None) -> np.ndarray:
        """Posterior mean class probabilities.

        Parameters
        ----------
        X : array-like (n, d)
        z : array-like (n,) of 0 and 1
        pihat : array-like (n,), optional
        groups : array-like (n,), optional
            As :meth:`BCFRegressor.predict_draws`.

        Returns
        -------
        np.ndarray
            ``(n, 2)``: ``P(y = 0)`` and ``P(y = 1)``.
        """
        p = self.predict_draws(X, z, pihat, groups).mean(0)
        return np.column_stack([1.0 - p, p])

    def predict(self, X, z, pihat=None, groups=None) -> np.ndarray:
        """The more probable outcome, 0 or 1.

        Parameters
        ----------
        X : array-like (n, d)
        z : array-like (n,) of 0 and 1
        pihat : array-like (n,), optional
        groups : array-like (n,), optional
            As :meth:`BCFRegressor.predict_draws`.

        Returns
        -------
        np.ndarray
            ``(n,)`` of 0 and 1.
        """
        return (self.predict_draws(X, z, pihat, groups).mean(0) > 0.5).astype(int)
