"""``bt.BayesianForest``: the Bayesian-forest family as a model-context random variable.

>>> with bt.Model():
...     X = bt.Data("X", X_train)
...     f = bt.BayesianForest("f", X, y_train, min_samples_leaf=3)
...     idata = bt.sample(draws=100, chains=1, random_seed=0)      # 100 trees
...     bt.set_data({"X": X_test})
...     bt.sample_posterior_predictive(idata, extend_inferencedata=True, predictions=True)

The variable calls :func:`bayestrees.inference.forest.fit.fit_bayesian_forest`, as the
scikit-learn style estimators do; it never builds an estimator.
"""
from __future__ import annotations

from ..inference.forest import FAMILY
from .base import TreeRV

__all__ = ["BayesianForest"]


class BayesianForest(TreeRV):
    """A forest posterior over trees (draw = tree), Taddy et al. (2015).

    Parameters
    ----------
    name : str
        The variable's name: ``observed_data[name]``, and ``name`` / ``name_mu`` /
        ``name_proba`` in the predictive groups.
    X : bt.Data or array (n_samples, n_features)
    y : array (n_samples,)
    kind : {"bf", "ebf", "ssf"}
        Bayesian forest, empirical Bayesian forest (``trunk_min_samples_leaf``, default 1000)
        or sub-sample forest (``n_blocks``, default 5).
    task : {"auto", "regression", "classification"}
        "auto": :func:`bayestrees.data.infer_task` (labels, or whole numbers with at most 20
        distinct values, are classification; other numbers regression).
    model : Model, optional
        The model to register the variable in; default the innermost active ``with bt.Model()``.
    dtype : {"float32", "float64"}, default "float32"
        Precision of the fit; "float64" needs ``jax.config.update("jax_enable_x64", True)``
        first (``ValueError`` otherwise).
    **params
        The estimators' parameters (``weights``, ``min_samples_leaf``, ``max_depth``,
        ``max_features``, ``min_weight_fraction_leaf``, ``splitter``, ``criterion``
        (classification), ``max_bins``, ``categorical_features``, ``max_nodes``, ``chunk_size``,
        ``n_jobs``, ``trunk_min_samples_leaf``, ``n_blocks``), as for
        :class:`bayestrees.BayesianForestRegressor`; ``n_estimators`` is ``draws * chains``.

    Raises
    ------
    ValueError
        When no model is active, the model already has a variable named ``name``, ``task`` is not
        one the family fits, a parameter is unknown or invalid, or a run setting (``draws``,
        ``chains``, ``n_estimators``, ...) is given here instead of to :func:`bayestrees.sample`.

    Notes
    -----
    ``bt.sample(draws, chains)`` fits ``draws * chains`` trees; tree ``c * draws + j`` is draw
    ``j`` of chain ``c`` (the chains are independent batches of trees).  ``posterior["mu"]`` is
    each tree's prediction at the training rows.  There is no ``log_likelihood`` group: the
    Bayesian bootstrap defines no likelihood, so ``bt.loo`` raises a ``ValueError``.

    ``bt.sample_posterior_predictive`` writes, for regression, ``name`` and ``name_mu``, both
    each tree's prediction: the Bayesian bootstrap has no noise model, so a draw of the
    response from a tree is its prediction.  For classification it writes ``name``, a label
    drawn from each tree's class probabilities, and ``name_proba`` (dims ``obs, class``).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(size=(40, 2))
    >>> y = np.sin(6 * X[:, 0]) + 0.1 * rng.normal(size=40)
    >>> with bt.Model():
    ...     features = bt.Data("X", X)
    ...     f = bt.BayesianForest("f", features, y, min_samples_leaf=3)
    ...     idata = bt.sample(draws=10, random_seed=0)        # 10 trees
    ...     bt.set_data({"X": X[:5]})
    ...     pred = bt.sample_posterior_predictive(idata, predictions=True, random_seed=0)
    >>> f.kind, f.task
    ('bf', 'regression')
    >>> idata.posterior["mu"].shape                          # each tree at the training rows
    (1, 10, 40)
    >>> pred.predictions["f"].shape                          # each tree at the five new rows
    (1, 10, 5)
    """

    family = FAMILY

    def __init__(self, name, X, y, *, kind: str = "bf", task: str = "auto", model=None, **params):
        if "n_estimators" in params:
            raise ValueError("n_estimators is set by bt.sample: the forest has draws * chains trees")
        super().__init__(name, X, y, task=task, model=model, kind=kind, **params)
        self.kind = self.config.kind
