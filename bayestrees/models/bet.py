"""``bt.BETMixture``: BET (a Dirichlet-process mixture of trees) as a model-context random variable.

>>> with bt.Model():
...     X = bt.Data("X", X_train)
...     bt.BETMixture("f", X, y_train, alpha_dp=1.0, delta=2.0, min_leaf_rows=5, max_trees=10)
...     idata = bt.sample(draws=1000, tune=1000, chains=1, random_seed=0)
...     bt.set_data({"X": X_test})
...     bt.sample_posterior_predictive(idata, extend_inferencedata=True, predictions=True)

The variable calls :func:`bayestrees.inference.bet.fit.fit_bet`, as the estimators do.
"""
from __future__ import annotations

from ..inference.bet import FAMILY
from .base import TreeRV

__all__ = ["BETMixture"]


class BETMixture(TreeRV):
    """BET (Duan, Clancy & Szczesniak): a Dirichlet-process mixture of trees fit by a slice sampler.

    Parameters
    ----------
    name : str
        The variable's name (``observed_data``, ``log_likelihood`` and predictive variables).
    X : bt.Data or array (n_samples, n_features); missing values (NaN) allowed
    y : array (n_samples,)
    **params
        The fields of :class:`~bayestrees.inference.bet.fit.BETConfig` (``alpha_dp``, ``delta``,
        ``min_leaf_rows``, ``max_trees``, ``active_trees``, ``init_trees``, ``leaf_concentration``,
        ``leaf_prior``, ``max_depth``, ``dtype``, ...), as for :class:`bayestrees.BETRegressor` /
        :class:`bayestrees.BETClassifier`
    task : {"auto", "regression", "classification"}
        "auto": :func:`bayestrees.data.infer_task`.
    model : Model, optional
        The model to register the variable in; default the innermost active ``with bt.Model()``.
    max_bins : int, default 32
    categorical_features : list of int, optional
        Columns of ``X`` split by subsets of their categories (as for :class:`bayestrees.BETRegressor`;
        DataFrame columns of ``category``, ``object`` or ``string`` dtype without it)

    Raises
    ------
    ValueError
        When no model is active, the model already has a variable named ``name``, ``task`` is not
        one the family fits, a parameter is unknown or invalid, or a run setting (``draws``,
        ``chains``, ``tune``, ...) is given here instead of to :func:`bayestrees.sample`.

    Notes
    -----
    ``bt.sample(draws, tune=1000, chains=1, thin=1, random_seed=...)``.  Predictive draws at new
    rows: a component ``j`` is drawn with probability ``w_j`` among the occupied components
    (renormalised), then regression ``name = theta_mean + sigma * eps`` of that tree's leaf
    (``name_mu`` is the ensemble estimator ``sum_j w~_j E(theta | T_j)``), classification a label
    from the ensemble class probabilities (``name_proba``).

    Examples
    --------
    A short run (a real fit needs the defaults' ``draws`` and ``tune``, or more):

    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(size=(40, 2))
    >>> y = np.sin(6 * X[:, 0]) + 0.1 * rng.normal(size=40)
    >>> with bt.Model():
    ...     f = bt.BETMixture("f", X, y, alpha_dp=1.0, max_trees=10)
    ...     idata = bt.sample(draws=20, tune=10, random_seed=0)
    >>> idata.posterior["n_trees"].shape                      # trees per draw, (chain, draw)
    (1, 20)
    """

    family = FAMILY
    _renamed = {"alpha_leaves": "leaf_concentration"}
