"""``bt.SafeBayesForest``: the safe-Bayesian random forest as a model random variable.

>>> with bt.Model():
...     X = bt.Data("X", X_train)
...     f = bt.SafeBayesForest("f", X, y_train)
...     idata = bt.sample(draws=1000, random_seed=0)   # 1000 prior trees, resampled to equal weights
...     bt.set_data({"X": X_test})
...     bt.sample_posterior_predictive(idata, extend_inferencedata=True, predictions=True)

The variable calls :func:`bayestrees.inference.safebayes.fit.fit_safebayes`, as the
scikit-learn style estimators do; it never builds an estimator.  ``bt.sample``
draws ``chains * draws`` prior trees, weighs them, and writes that many equally
weighted posterior draws (:func:`~bayestrees.inference.safebayes.fit.safebayes_inferencedata`):
the trees resampled by their tempered weights ``w^beta`` (``beta = m / N``), each
with its leaf parameters drawn from their posterior given the tree.
"""
from __future__ import annotations

from ..inference.safebayes import FAMILY
from .base import TreeRV

__all__ = ["SafeBayesForest"]


class SafeBayesForest(TreeRV):
    """Safe-Bayesian random forest random variable (Quadrianto & Ghahramani 2015).

    Parameters
    ----------
    name : str
        The variable's name: ``observed_data[name]``, ``log_likelihood[name]``, and
        ``name`` / ``name_mu`` / ``name_proba`` in the predictive groups.
    X : bt.Data or array (n, d)
    y : array (n,)  labels (classification) or real targets (regression)
    task : {"auto", "classification", "regression"}, default "auto"
        "auto": :func:`bayestrees.data.infer_task` (labels, or whole numbers with at
        most 20 distinct values, are classes; other numbers regression).
    model : Model, optional
        The model to register the variable in; default the innermost active ``with bt.Model()``.
    **params
        The fields of :class:`~bayestrees.inference.safebayes.fit.SafeBayesConfig` (``split_prob``,
        ``effective_sample_size``, ``leaf_concentration``, ``leaf_prior``, ``root_splits``,
        ``max_internal``, ``cv``, ``validation_fraction``, ``auto_criterion``, ``dtype``), as for
        :class:`bayestrees.SafeBayesForestClassifier` / ``Regressor``, with the same defaults
        (``effective_sample_size="auto"``: ``m`` by 5-fold cross-validation);
        ``leaf_concentration`` is used for classes only, ``leaf_prior`` for regression only;
        ``auto_criterion=None`` is the task's default (``"accuracy"`` for classes,
        ``"log_predictive"`` for regression).

    Raises
    ------
    ValueError
        When no model is active, the model already has a variable named ``name``, ``task`` is not
        one the family fits, a parameter is unknown or invalid, or a run setting (``draws``,
        ``chains``, ``tune``, ...) is given here instead of to :func:`bayestrees.sample`.

    Notes
    -----
    ``bt.sample(draws, chains)`` weighs ``draws * chains`` prior trees and writes as
    many equally weighted draws, draw ``j`` of chain ``c`` being draw
    ``c * draws + j``.  ``sample_stats`` holds each draw's ``log_weight``,
    ``tempered_log_weight`` and ``tree_index``; the unresampled weights are
    ``fitted_.result.log_weights``.  ``bt.sample_posterior_predictive`` writes, for
    classification, ``name_proba`` (each draw's class probabilities at the rows, dims
    ``obs, class``) and ``name`` (a label drawn from them); for regression
    ``name_mu`` (each draw's leaf mean) and ``name`` (a response drawn from
    ``N(mu, s2)``, ``s2`` drawn from its posterior given the draw's mean).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(size=(40, 2))
    >>> labels = (X[:, 0] > 0.5).astype(int)
    >>> with bt.Model():
    ...     f = bt.SafeBayesForest("f", X, labels)
    ...     idata = bt.sample(draws=50, random_seed=0)   # 50 prior trees, resampled by their weights
    >>> f.regression
    False
    >>> sorted(idata.sample_stats.data_vars)
    ['log_weight', 'tempered_log_weight', 'tree_index']
    >>> f.fitted_.result.log_weights.shape                  # the weights of the 50 prior trees
    (50,)
    """

    family = FAMILY
    _renamed = {"alpha": "leaf_concentration"}

    def _check(self) -> None:
        self.config.criterion(self.task)

    @property
    def regression(self) -> bool:
        """Whether the variable is a real response (``task == "regression"``)."""
        return self.task == "regression"
