"""``bt.BART``: BART (a sum of trees) as a model-context random variable.

>>> with bt.Model():
...     X = bt.Data("X", X_train)
...     bt.BART("f", X, y_train, m=200)
...     idata = bt.sample(draws=1000, tune=1000, chains=4, random_seed=0)
...     bt.set_data({"X": X_test})
...     bt.sample_posterior_predictive(idata, extend_inferencedata=True, predictions=True)

The variable calls :func:`bayestrees.inference.bart.fit.fit_bart`, as the estimators do.
"""
from __future__ import annotations

from ..data import check_new_rows
from ..inference.bart import FAMILY
from .base import TreeRV, data_value

__all__ = ["BART"]


class BART(TreeRV):
    """BART (Chipman, George & McCulloch 2010): a posterior over sums of ``m`` trees by MCMC.

    Parameters
    ----------
    name : str
        The variable's name (``observed_data``, ``log_likelihood`` and predictive variables).
    X : bt.Data or array (n_samples, n_features), no missing values
    y : array (n_samples,): real values, or two classes (probit)
    task : {"auto", "regression", "classification"}
        "auto": :func:`bayestrees.data.infer_task`.
    model : Model, optional
        The model to register the variable in; default the innermost active ``with bt.Model()``.
    **params
        The fields of :class:`~bayestrees.inference.bart.fit.BARTConfig` (``m``, ``prior``, ``k``,
        ``nu``, ``q``, ``sigma_hat``, ``fixed_sigma``, ``max_depth``, ``move_probs``, ``sparse`` and its
        ``sparse_a``, ``sparse_b``, ``sparse_rho``, ``dtype``, ``keep_trees``), as for
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
        one the family fits, a parameter is unknown or invalid, or a run setting (``draws``,
        ``chains``, ``tune``, ...) is given here instead of to :func:`bayestrees.sample`.

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

    def _fit_args(self, data) -> dict:
        """``predict_codes``: the rows of ``X_predict``, validated and binned like the training rows."""
        rows = self.params.get("X_predict")
        if rows is None:
            return {}
        rows = data_value(rows)
        check_new_rows(rows, data.binner.n_features_in_, allow_nan=False, owner=type(self).__name__)
        return {"predict_codes": data.binner.transform(rows)}

    def _config_params(self, params: dict) -> dict:
        """``prior=None`` is the config's default prior, ``ChipmanPrior(0.95, 2.0)``."""
        out = {k: v for k, v in params.items() if not (k == "prior" and v is None)}
        if "move_probs" in out:
            out["move_probs"] = tuple(out["move_probs"])
        return out
