"""``bt.BayesianCART``: Bayesian CART by MCMC as a model-context random variable.

>>> with bt.Model():
...     X = bt.Data("X", X_train)
...     bt.BayesianCART("f", X, y_train, prior=bt.priors.ChipmanPrior(0.95, 2.0), max_depth=6)
...     idata = bt.sample(draws=700, tune=300, chains=4, random_seed=0)
...     bt.set_data({"X": X_test})
...     bt.sample_posterior_predictive(idata, extend_inferencedata=True, predictions=True)

The variable calls :func:`bayestrees.inference.bcart.fit.fit_bcart`, as the
estimators do.
"""
from __future__ import annotations

from ..inference.bcart import FAMILY
from .base import TreeRV

__all__ = ["BayesianCART"]


class BayesianCART(TreeRV):
    """Bayesian CART (Chipman, George & McCulloch 1998): a posterior over single trees by MCMC.

    Parameters
    ----------
    name : str
        The variable's name (``observed_data``, ``log_likelihood`` and predictive variables).
    X : bt.Data or array (n_samples, n_features); missing values (NaN) allowed
    y : array (n_samples,)
    prior : a bt.priors object, default ``ChipmanPrior(0.95, 2.0)``
    leaf_model : "auto", "common_variance", "normal", "dirichlet" or a bayestrees.leaves model
    task : {"auto", "regression", "classification"}  ("auto": :func:`bayestrees.data.infer_task`)
    model : Model, optional
        The model to register the variable in; default the innermost active ``with bt.Model()``.
    max_depth : int, default 6
    max_bins : int, default 32
    categorical_features : list of int, optional
        Columns of ``X`` split by subsets of their categories (as for :class:`bayestrees.BayesianCARTRegressor`;
        DataFrame columns of ``category``, ``object`` or ``string`` dtype without it)
    leaf_concentration, move_probs, scheme, particles, temperatures, dtype :
        as for :class:`bayestrees.BayesianCARTRegressor` / :class:`bayestrees.BayesianCARTClassifier`
        (``alpha_leaves``, the former name of ``leaf_concentration``, warns)

    Raises
    ------
    ValueError
        When no model is active, the model already has a variable named ``name``, ``task`` is not
        one the family fits, a parameter is unknown or invalid, or a run setting (``draws``,
        ``chains``, ``tune``, ...) is given here instead of to :func:`bayestrees.sample`.

    Notes
    -----
    ``bt.sample(draws, tune=300, chains=4, thin=1, random_seed=...)`` runs ``chains``
    vmapped chains of ``tune + draws * thin`` steps.  Posterior predictive draws at
    new rows: regression ``name`` = ``mu + sigma * eps`` (a draw of the response),
    ``name_mu`` the drawn function; classification ``name`` a drawn label and
    ``name_proba`` the drawn class probabilities.

    Examples
    --------
    A short run (a real fit needs the defaults' ``draws``, ``tune`` and ``chains``, or more):

    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(size=(40, 2))
    >>> y = np.sin(6 * X[:, 0]) + 0.1 * rng.normal(size=40)
    >>> with bt.Model():
    ...     f = bt.BayesianCART("f", X, y, max_depth=3, scheme="moves")
    ...     idata = bt.sample(draws=20, tune=10, chains=1, random_seed=0)
    >>> idata.posterior["sigma"].shape                        # (chain, draw)
    (1, 20)
    >>> idata.log_likelihood["f"].shape
    (1, 20, 40)
    """

    family = FAMILY
    _renamed = {"alpha_leaves": "leaf_concentration"}

    def _config_params(self, params: dict) -> dict:
        """``prior=None`` is the config's default prior, ``ChipmanPrior(0.95, 2.0)``."""
        out = {k: v for k, v in params.items() if not (k == "prior" and v is None)}
        if "move_probs" in out:
            out["move_probs"] = tuple(out["move_probs"])
        return out

    def _check(self) -> None:
        if isinstance(self.config.leaf_model, str):
            self.config.leaf_model_for(self.task, 2)  # a leaf model that does not fit the task fails here
