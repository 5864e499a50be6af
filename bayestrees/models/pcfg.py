"""``bt.PCFGTree``: the BCART-PCFG tree random variable for the model context.

>>> with bt.Model():
...     X = bt.Data("X", X_train)
...     t = bt.PCFGTree("t", X, y_train, log_phi=2.0, leaf_concentration=1.0, max_bins=10)
...     idata = bt.sample(draws=500, random_seed=0)      # exact independent posterior trees
...     bt.set_data({"X": X_test})
...     bt.sample_posterior_predictive(idata, extend_inferencedata=True, predictions=True)

The variable calls :func:`bayestrees.inference.pcfg.fit.fit_pcfg`, as the
scikit-learn style estimators do; it never builds an estimator.  The task is
``"classification"`` (Dirichlet leaves; labels of any type) or ``"regression"``
(a Normal mean and variance per leaf); ``"auto"`` uses
:func:`bayestrees.data.infer_task`.  After sampling, ``t.posterior_`` holds the
exact posterior (MAP tree, evidence, exact predictive).
"""
from __future__ import annotations

import warnings

from ..inference.pcfg import FAMILY
from .base import TreeRV

__all__ = ["PCFGTree"]


class PCFGTree(TreeRV):
    """Exact posterior over decision trees (Sullivan et al.) as a model variable.

    Parameters
    ----------
    name : str
        The variable's name: ``observed_data[name]``, ``log_likelihood[name]``, and
        ``name`` / ``name_mu`` / ``name_proba`` in the predictive groups.
    X : Data or array (n, d)
        No missing values.
    y : array (n,)
    log_phi : float, default 2.0
        log of the prior's leaf penalty: ``Pr[T | X] ∝ phi^-(leaves)``.
    leaf_concentration : float or array (n_classes,), default 1.0
        Dirichlet concentration of the class leaves (formerly ``alpha``, which warns).
    leaf_prior : NIGPrior or None, default None
        Normal-inverse-gamma leaf prior of a regression on the scale of ``y`` (formerly
        ``nig_prior``); None: :func:`bayestrees.leaves.default_nig_prior` of the training responses.
    max_bins : int, default 10
    task : {"auto", "classification", "regression"}, default "auto"
        "auto": :func:`bayestrees.data.infer_task` (labels, or whole numbers with
        at most 20 distinct values, are classes; other numbers regression).
    kind : {"classification", "regression", None}, default None
        The former name of ``task``; when given it is used instead (``FutureWarning``).
    model : Model, optional
        The model to register the variable in; default the innermost active ``with bt.Model()``.
    method : {"box", "row"}, default "box"
    memory_budget : int or None, default 4 GB
    dtype : {"float32", "float64"}, default "float32"
        Precision of the exact programme; float64 needs
        ``jax.config.update("jax_enable_x64", True)`` first (``ValueError`` otherwise).

    Raises
    ------
    ValueError
        When ``kind`` is not a task, no model is active, the model already has a variable named
        ``name``, ``task`` is not one the family fits, a parameter is unknown or invalid, or a run
        setting (``draws``, ``chains``, ...) is given here instead of to :func:`bayestrees.sample`.

    Notes
    -----
    ``bt.sample(draws, chains)`` draws ``chains * draws`` exact independent trees,
    each with its leaf parameters drawn from their posterior given the tree
    (:func:`~bayestrees.inference.pcfg.fit.pcfg_inferencedata`).
    ``bt.sample_posterior_predictive`` writes, for classification, ``name_proba``
    (each draw's class probabilities at the rows, dims ``obs, class``) and
    ``name`` (a label drawn from them); for regression ``name_mu`` (each draw's
    leaf mean) and ``name`` (a response drawn from ``N(mu, s2)``, ``s2`` drawn
    from its posterior given the draw's mean).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(size=(40, 2))
    >>> labels = (X[:, 0] > 0.5).astype(int)
    >>> with bt.Model():
    ...     t = bt.PCFGTree("t", X, labels, log_phi=2.0, max_bins=4)
    ...     idata = bt.sample(draws=10, random_seed=0)        # 10 exact posterior trees
    >>> t.task
    'classification'
    >>> idata.log_likelihood["t"].shape                       # (chain, draw, obs)
    (1, 10, 40)
    >>> t.posterior_.predict_exact(t.binner_.transform(X[:5])).shape   # exact predictive
    (5, 2)
    """

    family = FAMILY
    _renamed = {"alpha": "leaf_concentration", "nig_prior": "leaf_prior"}

    def __init__(self, name, X, y, *, task="auto", kind=None, model=None, **params):
        if kind is not None:
            if kind not in ("classification", "regression"):
                raise ValueError(f"kind must be 'classification', 'regression' or None, got {kind!r}")
            warnings.warn("PCFGTree: 'kind' is renamed 'task'; the old name will be removed in the next release",
                          FutureWarning, stacklevel=2)
            task = kind
        super().__init__(name, X, y, task=task, model=model, **params)
        self.posterior_ = None

    @property
    def kind_(self) -> str:
        """The task (``"classification"`` or ``"regression"``); kept under its former name."""
        return self.task

    def _after_fit(self, result, data) -> None:
        self.posterior_ = result.posterior
        self.binner_ = data.binner
        self.classes_ = data.classes

