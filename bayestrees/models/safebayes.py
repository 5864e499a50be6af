"""``bt.SafeBayesForest``: the safe-Bayesian random forest as a model random variable.

>>> with bt.Model():
...     X = bt.Data("X", X_train)
...     f = bt.SafeBayesForest("f", X, y_train, effective_sample_size=5)
...     idata = bt.sample(draws=1000, random_seed=0)   # 1000 prior trees, importance weighted
...     bt.set_data({"X": X_test})
...     bt.sample_posterior_predictive(idata, extend_inferencedata=True, predictions=True)

The draws are the prior trees (``chain x draw`` of them); they are *not*
equally weighted: ``sample_stats.log_weight`` holds the importance log weight
``log p(Y | X, T_k)`` and ``sample_stats.tempered_log_weight`` the normalised
``beta log w_k`` (``beta = m / N``) with which the forest averages them.
Posterior-predictive draws are per tree: ``<name>`` a label (or value) drawn
from each tree's leaf predictive and ``<name>_proba`` (classes) or
``<name>_mean`` (regression) the tree's predictive; weigh them with
``exp(tempered_log_weight)``.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..estimators.safebayes import SafeBayesForestClassifier, SafeBayesForestRegressor
from .base import TreeRV

__all__ = ["SafeBayesForest"]


def _is_regression(y, task: str) -> bool:
    if task == "classification":
        return False
    if task == "regression":
        return True
    if task != "auto":
        raise ValueError(f"task must be 'auto', 'classification' or 'regression', got {task!r}")
    arr = np.asarray(y)
    return arr.dtype.kind == "f" and not np.all(np.isfinite(arr) & (arr == np.round(arr)))


class SafeBayesForest(TreeRV):
    """Safe-Bayesian random forest random variable.

    Parameters
    ----------
    name : str
    X : DataContainer or array (n, d)
    y : array (n,)  labels (classification) or real targets (regression)
    task : "auto", "classification" or "regression"
        ``"auto"``: regression when ``y`` holds non-integer floats.
    split_prob, effective_sample_size, alpha, max_internal, validation_fraction, auto_criterion, leaf_prior
        As for :class:`bayestrees.SafeBayesForestClassifier` / ``Regressor``
        (``alpha`` for classes only, ``leaf_prior`` for regression only).

    ``bt.sample(draws, chains)`` draws ``draws * chains`` prior trees.
    """

    family = "safe-bayes"

    def __init__(self, name, X, y, *, task: str = "auto", split_prob=0.475, effective_sample_size=5,
                 alpha=1.0, max_internal=511, validation_fraction=0.2, auto_criterion="log_predictive",
                 leaf_prior=None, model=None):
        super().__init__(name, X, y, model=model, task=task, split_prob=split_prob,
                         effective_sample_size=effective_sample_size, alpha=alpha, max_internal=max_internal,
                         validation_fraction=validation_fraction, auto_criterion=auto_criterion,
                         leaf_prior=leaf_prior)
        self.regression = _is_regression(self.y_value, task)

    def _estimator(self, n_trees, key):
        p = dict(self.params)
        common = dict(n_estimators=n_trees, split_prob=p["split_prob"],
                      effective_sample_size=p["effective_sample_size"], max_internal=p["max_internal"],
                      validation_fraction=p["validation_fraction"], auto_criterion=p["auto_criterion"],
                      random_state=key)
        if self.regression:
            return SafeBayesForestRegressor(leaf_prior=p["leaf_prior"], **common)
        return SafeBayesForestClassifier(alpha=p["alpha"], **common)

    def _fit(self, key, draws: int, chains: int, progressbar: bool, **kwargs):
        if kwargs:
            raise ValueError(f"unexpected sample() arguments for SafeBayesForest: {sorted(kwargs)}")
        est = self._estimator(draws * chains, key).fit(self.X_value, self.y_value)
        self.fitted_ = est
        from ..convert import trees_to_inferencedata
        from ..tree import Tree

        def cd(a):
            a = np.asarray(a)
            return a.reshape((chains, draws) + a.shape[1:])

        trees = Tree(*[cd(a) for a in est.trees_])
        lw = np.asarray(est.log_weights_)
        tlw = np.asarray(est._log_w("safe"))
        obs = np.asarray(self.y_value)
        return trees_to_inferencedata(
            trees,
            sample_stats={"log_weight": cd(lw), "tempered_log_weight": cd(tlw)},
            observed_data={self.name: obs} if obs.dtype.kind in "biuf" else None,
            attrs={"family": self.family, "task": est._task, "effective_sample_size": float(est.effective_sample_size_),
                   "beta": float(est.beta_), "n_train": int(est.n_train_),
                   "truncated_mass": float(est.truncated_mass_)},
            output_names=est._output_names(),
        )

    def _predict_draws(self, idata, X, key):
        est = self.fitted_
        chains = idata.posterior.sizes["chain"]
        draws = idata.posterior.sizes["draw"]
        codes = jnp.asarray(est._codes(X))
        key_y = key
        if self.regression:
            mean, scale2, df = est._t_params(None, codes)
            t = jax.random.t(key_y, df)
            ydraw = mean + jnp.sqrt(scale2) * t
            out = {self.name: np.asarray(ydraw), f"{self.name}_mean": np.asarray(mean)}
            out = {k: v.reshape((chains, draws) + v.shape[1:]) for k, v in out.items()}
            return out, {self.name: ["obs"], f"{self.name}_mean": ["obs"]}
        probs = est._tree_probs(X)  # (K, n, C)
        yc = jax.random.categorical(key_y, jnp.log(probs), axis=-1)
        labels = np.asarray(est.classes_)[np.asarray(yc)]
        out = {self.name: labels, f"{self.name}_proba": np.asarray(probs)}
        out = {k: v.reshape((chains, draws) + v.shape[1:]) for k, v in out.items()}
        return out, {self.name: ["obs"], f"{self.name}_proba": ["obs", "class"]}
