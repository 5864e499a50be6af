"""``bt.BCF``: a Bayesian causal forest (:mod:`bayestrees.causal`) as a model-context random variable.

>>> with bt.Model():
...     X = bt.Data("X", X_train); z = bt.Data("z", z_train); p = bt.Data("pihat", pihat_train)
...     bt.BCF("y", X, y_train, z, pihat=p)
...     idata = bt.sample(draws=1000, tune=1000, chains=4, random_seed=0)
...     bt.set_data({"X": X_new, "z": z_new, "pihat": pihat_new})
...     bt.sample_posterior_predictive(idata, extend_inferencedata=True, predictions=True)

The variable is a :class:`~bayestrees.models.numpyro_model.NumPyroModel` of
:func:`bayestrees.causal.bcf_model`: ``bt.sample`` runs :func:`bayestrees.sample_model`, and the
predictive draws at new rows hold ``tau`` (the effect), ``mu`` (the control mean) and ``y``.
"""
from __future__ import annotations

import numpy as np

from ..causal import M_MU, M_TAU, MU_SD, TAU_SD, bcf_model, bcf_settings
from ..inference.treefn import check_categorical, check_category_codes
from .base import Model, data_value
from .numpyro_model import NumPyroModel

__all__ = ["BCF"]


class BCF(NumPyroModel):
    """Bayesian causal forest (Hahn, Murray & Carvalho 2020) for a continuous outcome and a binary treatment.

    Parameters
    ----------
    name : str
        The variable's name.
    X : bt.Data or array (n, d)
        Covariates: finite numbers, NaN for a missing value (routed by the rules of both functions).
    y : array (n,)
        The outcome.
    z : bt.Data or array (n,) of 0 and 1
        The treatment.
    pihat : bt.Data or array (n,)
        Propensity estimates ``P(z = 1 | x)`` at the rows of ``X``, given to the prognostic function
        (``bt.BCFRegressor`` estimates them when not given; here give them, for example from
        :func:`bayestrees.estimators.bcf.estimate_propensity`).  Swap them with ``X`` and ``z``
        for new rows (``bt.set_data``).
    sample_weight : array (n,), optional
        Row ``i``'s noise sd is ``sigma / sqrt(w_i)``.
    groups : bt.Data or array (n,) of integers 0 .. J - 1, optional
        Each row's group: multilevel BCF, a group intercept and a group shift of the effect
        (:mod:`bayestrees.causal`, "Groups"); new rows (``bt.set_data``) take the groups of the
        training rows.
    model : bt.Model, optional
    m_mu, m_tau : int, default 200 and 50
        Trees of the prognostic and the effect function.
    mu_prior, tau_prior : bt.priors.ChipmanPrior, optional
        Their depth priors (default ``(0.95, 2)`` and ``(0.25, 3)``).
    mu_sd, tau_sd : float, default 2 and 1
        Prior scales in sd of the outcome (:class:`bayestrees.BCFRegressor`).
    nu, q : float, default 3 and 0.9
        The noise prior ``sigma^2 ~ nu lambda / chi2_nu`` with ``P(sigma < sigma_hat) = q``.
    sigma_hat : float, optional
        The prior's guess of ``sigma`` (default: the residual sd of a linear fit).
    max_depth, min_leaf_rows, max_bins : int
        As :func:`bayestrees.bart_function`.
    categorical_features : sequence of int, optional
        Columns of ``X`` holding category codes, split by subsets of their categories
        (:class:`bayestrees.BCFRegressor`).

    Notes
    -----
    The posterior holds ``tau`` and ``mu`` at the training rows, ``ate``, ``catt``, ``sigma`` (the
    outcome's units) and the working parameters ``b0``, ``b1``, ``mu_scale`` (:mod:`bayestrees.causal`);
    with ``groups``, ``alpha``, ``gamma`` and ``group_ate`` too.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(60, 2)); z = rng.binomial(1, 0.5, size=60); y = X[:, 0] + z
    >>> with bt.Model():
    ...     rv = bt.BCF("y", X, y, z, pihat=np.full(60, 0.5), m_mu=5, m_tau=3)
    ...     idata = bt.sample(draws=20, tune=20, chains=1, random_seed=0)
    >>> idata.posterior["tau"].shape, idata.posterior["ate"].shape
    ((1, 20, 60), (1, 20))
    """

    def __init__(self, name: str, X, y, z, *, pihat, sample_weight=None, groups=None, model: Model | None = None,
                 m_mu: int = M_MU,
                 m_tau: int = M_TAU, mu_prior=None, tau_prior=None, mu_sd: float = MU_SD, tau_sd: float = TAU_SD,
                 nu: float = 3.0, q: float = 0.9, sigma_hat=None, max_depth: int = 5, min_leaf_rows: int = 5,
                 max_bins: int = 100, categorical_features=None):
        Xv = np.asarray(data_value(X), np.float64)
        zv = np.asarray(data_value(z))
        pv = np.asarray(data_value(pihat), np.float64).reshape(-1)
        n = Xv.shape[0]
        if Xv.ndim != 2 or np.isinf(Xv).any():
            raise ValueError(f"X must be a 2-d array of finite numbers (NaN for a missing value), got shape "
                             f"{Xv.shape}{' with infinite values' if np.isinf(Xv).any() else ''}")
        categorical = check_categorical(categorical_features, Xv.shape[1], "X")
        check_category_codes(Xv, categorical, "X")
        if zv.shape != (n,) or not np.all(np.isin(zv, (0, 1))) or zv.min() == zv.max():
            raise ValueError("z must be one treatment per row of X, coded 0 and 1, with both arms present")
        if pv.shape != (n,) or not np.all((pv >= 0) & (pv <= 1)):
            raise ValueError(f"pihat must be {n} probabilities in [0, 1]")
        w = None if sample_weight is None else np.asarray(sample_weight, np.float64)
        gv = None
        if groups is not None:
            gv = np.asarray(data_value(groups))
            if (gv.shape != (n,) or not np.issubdtype(gv.dtype, np.integer) or gv.min() < 0
                    or len(np.unique(gv)) < 2):
                raise ValueError(f"groups must be {n} integer codes 0 .. J - 1 of at least two groups")
        ys, self.settings = bcf_settings(np.column_stack([Xv, pv]), Xv, y, zv, w, nu=nu, q=q, sigma_hat=sigma_hat,
                                         m_mu=m_mu, m_tau=m_tau, mu_prior=mu_prior, tau_prior=tau_prior, mu_sd=mu_sd,
                                         tau_sd=tau_sd, max_depth=max_depth, min_leaf_rows=min_leaf_rows,
                                         max_bins=max_bins, group=gv, categorical_features=categorical)
        if gv is not None:
            self.settings["n_groups"] = int(gv.max()) + 1
        self.X, self.z, self.pihat, self.weights, self.groups = X, z, pihat, w, groups
        super().__init__(name, bcf_model, observed={"y": ys.astype(np.float32)}, model=model)

    def _call_args(self, with_observed: bool):
        X = np.asarray(data_value(self.X), np.float32)
        z = np.asarray(data_value(self.z), np.int32)
        p = np.asarray(data_value(self.pihat), np.float32).reshape(-1)
        if not (X.shape[0] == z.shape[0] == p.shape[0]):
            raise ValueError(f"X, z and pihat must have the same rows, got {X.shape[0]}, {z.shape[0]}, {p.shape[0]}: "
                             "change them together (bt.set_data)")
        kw = dict(self.settings)
        if self.groups is not None:
            g = np.asarray(data_value(self.groups), np.int32)
            if g.shape[0] != X.shape[0] or g.max() >= kw["n_groups"]:
                raise ValueError(f"groups must be one code per row of X among the {kw['n_groups']} groups of the "
                                 "training rows: change it with X (bt.set_data)")
            kw["group"] = g
        if with_observed:
            kw.update(self.observed)
            if self.weights is not None:
                kw["weights"] = self.weights.astype(np.float32)
        return (np.column_stack([X, p]), X, z), kw

    def __repr__(self) -> str:
        return f"BCF({self.name!r})"
