"""``bt.BART``: BART (a sum of trees) as a model-context random variable.

>>> with bt.Model():
...     X = bt.Data("X", X_train)
...     bt.BART("f", X, y_train, m=200)
...     idata = bt.sample(draws=1000, tune=1000, chains=4, random_seed=0)
...     bt.set_data({"X": X_test})
...     bt.sample_posterior_predictive(idata, extend_inferencedata=True, predictions=True)

Known precision weights of the rows: ``bt.BART("f", X, y_train, sample_weight=bt.Data("w", w))``
(row ``i``'s noise sd ``sigma / sqrt(w_i)``, as ``BARTRegressor().fit(X, y, sample_weight=w)``).

The variable calls :func:`bayestrees.inference.bart.fit.fit_bart`, as the estimators do.
"""
from __future__ import annotations

import numpy as np

from ..data import check_new_rows
from ..inference.bart import FAMILY, check_sample_weight, check_weights
from .base import DataContainer, Model, TreeRV, data_value

__all__ = ["BART"]


class BART(TreeRV):
    """BART (Chipman, George & McCulloch 2010): a posterior over sums of ``m`` trees by MCMC.

    Parameters
    ----------
    name : str
        The variable's name (``observed_data``, ``log_likelihood`` and predictive variables).
    X : bt.Data or array (n_samples, n_features); missing values (NaN) allowed (each rule says where
        the missing rows go: :mod:`bayestrees.inference.missing`)
    y : array (n_samples,): real values, or two classes (probit)
    sample_weight : bt.Data or array (n_samples,) of floats >= 0, optional
        Known precision weights of the rows, passed to
        :func:`~bayestrees.inference.bart.fit.fit_bart` as :class:`bayestrees.BARTRegressor`'s and
        :class:`bayestrees.BARTClassifier`'s ``fit(X, y, sample_weight=w)`` pass them (the same
        draws for the same data, seed and settings), with their meaning: row ``i``'s noise sd is
        ``sigma / sqrt(w_i)`` (probit: the latent's sd is ``1 / sqrt(w_i)``, ``P(y_i = 1) =
        Phi(sqrt(w_i) (offset + f(x_i)))``), a row of weight 0 carries no likelihood, and with
        ``sigma`` sampled only the ratios of the weights matter (the estimators' ``fit`` says
        more).  Checked as theirs (one finite number >= 0 per row, not all zero: a
        ``ValueError``) when the variable is made and again by ``bt.sample``.  Default: all 1.
        Named ``sample_weight``, not ``weights``, because in the model context ``weights`` is
        ``bt.BayesianForest``'s bootstrap weighting (``"exponential"``, ...), and ``bt.BART``'s
        other inputs take the estimators' names (``X_predict``).
        Predictive draws (:func:`bayestrees.sample_posterior_predictive`): with a ``bt.Data``
        container, every current row has the container's current weight (``bt.set_data({"X":
        X_new, "w": w_new})`` changes both; a ``ValueError`` when its length is not the rows',
        or, for regression, a weight is 0: such a row has no predictive distribution), so
        ``name`` is ``mu + sigma / sqrt(w) * eps``, or a label drawn with ``Phi(sqrt(w) (offset +
        f))`` (``name_proba``); ``name_mu`` is the function whatever the weights.  With an array
        (or none) every current row, the training rows included, has weight 1, as the
        estimators' predictive draws: give a ``bt.Data`` container to draw at the training
        rows' own weights.
    task : {"auto", "regression", "classification"}
        "auto": :func:`bayestrees.data.infer_task`.
    model : Model, optional
        The model to register the variable in; default the innermost active ``with bt.Model()``.
    **params
        The fields of :class:`~bayestrees.inference.bart.fit.BARTConfig` (``m``, ``prior``, ``k``,
        ``nu``, ``q``, ``sigma_hat``, ``fixed_sigma``, ``max_depth``, ``move_probs``, ``slide``, ``sparse`` and its
        ``sparse_a``, ``sparse_b``, ``sparse_rho``, ``dtype``, ``keep_trees``, ``local_moves``, ``particles``,
        ``temperatures``, ``data_devices``), as for
        :class:`bayestrees.BARTRegressor` / :class:`bayestrees.BARTClassifier`; ``max_bins``
        (default 100); and ``X_predict`` (array, DataFrame or ``bt.Data``, ``(n_new, n_features)``):
        rows at which every draw's function is computed during sampling, written to the
        ``predictions`` group of ``bt.sample``'s result (``name_mu``, or ``name_proba``).  With
        ``keep_trees=False`` the InferenceData has no ``trees`` group, and
        :func:`bayestrees.sample_posterior_predictive` answers for those rows only (``bt.set_data``
        them first), with a ``ValueError`` for others.

    Raises
    ------
    ValueError
        When no model is active, the model already has a variable named ``name``, ``task`` is not
        one the family fits, a parameter is unknown or invalid (``sample_weight`` of the wrong
        length, negative, not finite or all zero), or a run setting (``draws``, ``chains``,
        ``tune``, ...) is given here instead of to :func:`bayestrees.sample`.

    Notes
    -----
    ``bt.sample(draws, tune=1000, chains=4, thin=1, random_seed=...)`` runs ``chains`` chains of
    ``tune + draws * thin`` steps, each updating every tree once.  Posterior predictive draws at
    new rows: regression ``name`` = ``mu + sigma * eps``, ``name_mu`` the drawn function;
    classification ``name`` a drawn label and ``name_proba`` the class probabilities.

    Examples
    --------
    A short run of a small sum (a real fit needs the defaults: 200 trees, 4 chains of 1,000
    tuning steps and 1,000 draws):

    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(size=(40, 2))
    >>> y = np.sin(6 * X[:, 0]) + 0.1 * rng.normal(size=40)
    >>> with bt.Model():
    ...     f = bt.BART("f", X, y, m=5, max_depth=3)
    ...     idata = bt.sample(draws=20, tune=10, chains=1, random_seed=0)
    >>> idata.posterior["sigma"].shape                        # (chain, draw)
    (1, 20)
    >>> idata.log_likelihood["f"].shape
    (1, 20, 40)
    """

    family = FAMILY
    _fit_inputs = ("X_predict",)

    def __init__(self, name: str, X, y, *, sample_weight=None, task: str = "auto", model: Model | None = None,
                 **params):
        if "weights" in params:
            raise ValueError("bt.BART takes row weights as sample_weight= (as the estimators' fit); there is no "
                             "'weights' parameter (bt.BayesianForest's 'weights' is its bootstrap's kind)")
        if sample_weight is not None:   # checked before the variable is registered; again by bt.sample
            n = np.shape(data_value(y))
            if n:
                check_sample_weight(data_value(sample_weight), n[0])
        super().__init__(name, X, y, task=task, model=model, **params)
        self.sample_weight = sample_weight

    def _fit_args(self, data) -> dict:
        """``weights``: ``sample_weight``'s current value, checked as the estimators' (the same
        array they pass); ``predict_codes``: the rows of ``X_predict``, validated and binned like
        the training rows."""
        out = {}
        if self.sample_weight is not None:
            out["weights"] = check_sample_weight(data_value(self.sample_weight), data.n)
        rows = self.params.get("X_predict")
        if rows is not None:
            rows = data_value(rows)
            check_new_rows(rows, data.binner.n_features_in_, allow_nan=False, owner=type(self).__name__)
            out["predict_codes"] = data.binner.transform(rows)
        return out

    def _predictive(self, idata, X, key) -> dict:
        """The family's predictive draws at rows ``X``, at the weights of ``_row_weights``."""
        fit = self.fitted_
        codes = self._codes(X)
        return self.family.predictive(key, fit.result, fit.data, idata, codes,
                                      weights=self._row_weights(len(codes)))

    def _row_weights(self, n_rows: int):
        """The current rows' weights: a ``bt.Data`` ``sample_weight``'s current value (checked), else
        None (weight 1)."""
        if not isinstance(self.sample_weight, DataContainer):
            return None
        name = f"sample_weight (bt.Data {self.sample_weight.name!r})"
        x_name = self.X.name if isinstance(self.X, DataContainer) else "X"
        try:
            w = check_weights(self.sample_weight.get_value(), n_rows, name)
        except ValueError as err:
            raise ValueError(f"{err}; the predictive draws are for the current rows of X at the current "
                             f"sample_weight: change both with bt.set_data({{{x_name!r}: rows, "
                             f"{self.sample_weight.name!r}: weights}})") from None
        if self.task == "regression" and np.any(w == 0):
            raise ValueError(f"{name} has {int(np.sum(w == 0))} weight(s) of 0 at the current rows: a row of "
                             "weight 0 has no predictive distribution (noise sd sigma / sqrt(0)); give every "
                             "row a positive weight (bt.set_data)")
        return w

    def _config_params(self, params: dict) -> dict:
        """``prior=None`` is the config's default prior, ``ChipmanPrior(0.95, 2.0)``."""
        out = {k: v for k, v in params.items() if not (k == "prior" and v is None)}
        if "move_probs" in out:
            out["move_probs"] = tuple(out["move_probs"])
        return out
