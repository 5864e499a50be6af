"""scikit-learn style BET (Duan, Clancy & Szczesniak): a Dirichlet-process mixture of trees.

>>> clf = bt.BETClassifier(alpha_dp=1.0, delta=2.0, min_leaf_rows=5, max_trees=10, draws=1000, tune=1000,
...                        random_state=0).fit(X, y)
>>> clf.predict(X_test)             # ensemble estimator sum_j w_j E(theta | T_j), averaged over draws
>>> clf.predict_cluster()           # cluster-specific in-sample estimator E(theta | T_{Z_i})
>>> clf.best_ensemble_              # the draw with the highest [Y, Z | T]
>>> clf.idata_                      # n_trees, w, Z, xi, xi_bar, ...; log_likelihood (mixture density)

Missing values (NaN) in X are routed by rules that also say where a missing value goes
(:mod:`bayestrees.inference.missing`).  Regression responses are standardised inside; every
output is in the response's units.
"""
from __future__ import annotations

import numpy as np

from ..inference.bet import FAMILY, best_ensemble, component_rows
from .base import RENAMED, ClassifierBase, DrawsMixin, FamilyEstimator, RegressorBase, parameters_doc

__all__ = ["BETRegressor", "BETClassifier"]


class _BETMixin(DrawsMixin, FamilyEstimator):
    _family = FAMILY

    def _fitted(self) -> None:
        self.trees_ = self.result_.trees

    @property
    def best_ensemble_(self) -> dict:
        """The draw with the highest ``[Y, Z | T]``: ``trees`` (J,), ``w``, ``occupied``, ``xi``, ``chain``,
        ``draw``, ``log_lik_y_z``, ``n_trees`` (components of at least ``min_leaf_rows`` rows) and
        ``n_components`` (occupied components)."""
        self._check_fitted()
        best = best_ensemble(self.result_)
        best["n_components"] = best["n_trees"]
        best["n_trees"] = int(self.n_trees_[best["chain"], best["draw"]])
        return best

    @property
    def n_trees_(self) -> np.ndarray:
        """Trees per draw, the components holding at least ``min_leaf_rows`` rows: ``(chains, draws)``."""
        self._check_fitted()
        rows = component_rows(self.result_.draws.z, self.result_.config.max_trees)
        return (rows >= self.result_.config.min_leaf_rows).sum(-1)

    @property
    def n_components_(self) -> np.ndarray:
        """Occupied components per draw (any number of rows): ``(chains, draws)``."""
        self._check_fitted()
        return np.asarray(self.result_.draws.n_trees)

    @property
    def xi_bar_(self) -> np.ndarray:
        """Posterior mean variable-ranking probability ``xi_bar = sum_j w_j xi_j``: ``(n_features,)``."""
        self._check_fitted()
        return np.asarray(self.result_.draws.xi_bar).reshape(-1, self.n_features_in_).mean(0)

    def _cluster_values(self) -> np.ndarray:
        self._check_fitted()
        mu = np.asarray(self.result_.draws.mu)
        return mu.reshape((-1,) + mu.shape[2:]).mean(0)                   # (n, V)


def _init(self, alpha_dp, delta, min_leaf_rows, max_trees, active_trees, draws, tune, chains, thin, max_depth,
          max_bins, random_state, dtype, progressbar, chain_method, categorical_features):
    self.alpha_dp, self.delta, self.min_leaf_rows, self.max_trees = alpha_dp, delta, min_leaf_rows, max_trees
    self.active_trees = active_trees
    self.draws, self.tune, self.chains, self.thin = draws, tune, chains, thin
    self.max_depth, self.max_bins = max_depth, max_bins
    self.random_state, self.dtype, self.progressbar = random_state, dtype, progressbar
    self.chain_method = chain_method
    self.categorical_features = categorical_features


class BETRegressor(_BETMixin, RegressorBase):
    """BET regressor: a Dirichlet-process mixture of regression trees (Normal leaves, objective prior).

    Parameters
    ----------
    alpha_dp : float > 0, default 1.0
        Dirichlet-process concentration (more trees for larger values).
    delta : float > 0, default 2.0
        Depth decay: a node at depth ``d`` splits with probability ``exp(-d / delta)``.
    min_leaf_rows : int >= 2, default 5
        ``q``: every node of a tree holds at least this many of its rows.
    max_trees : int >= 1, default 10
        ``J_max``, the fixed number of tree slots; if the slice needs more, the fit warns with the count.
    active_trees : int >= 1, default 4
        Occupied trees swept per step (all when at most this many are occupied).
    init_trees : int >= 1, default 4
        The chain starts with the rows spread uniformly at random over this many trees.
    leaf_prior : "objective" or bayestrees.leaves.NIGPrior, default "objective"
        ``p(mu, s2) ∝ 1/s2`` (the paper), or a proper Normal-inverse-gamma prior on the standardised response.
    particles : int, 0 or >= 2, default 10
        Particles of the particle Gibbs regrowth of a swept tree after its node-by-node sweep, which
        changes the tree's root where the sweep alone stays on one (a chain of the paper's sampler can
        keep a root of small posterior probability for thousands of steps).  0: the paper's sweep alone.
    regrow_rate : float in (0, 1], default 0.1
        The probability that a step regrows its swept trees (one draw per step): at 0.1 a step costs
        about twice the sweep alone, at 1 about 13 times (``max_depth=5``).
    draws, tune, chains, thin : int, default 1000, 1000, 1, 1
    max_depth : int, default 5
    max_bins : int, default 32
    random_state : int, numpy Generator or JAX key, optional
    dtype : {"float32", "float64"}, default "float32"
    progressbar : bool, default False
    chain_method : {"auto", "vectorized", "parallel"}, default "auto"
        How several chains run: "vectorized" steps them in one vmapped program (the choice on a
        GPU), "parallel" runs each chain's own program in threads, one per CPU core (faster on a
        multi-core CPU); "auto" picks "parallel" for several chains on a CPU.  Same draws either way.
    categorical_features : list of int, optional
        Columns of an array ``X`` to treat as unordered categories (DataFrame columns of
        ``category``, ``object`` or ``string`` dtype are categorical without it).  A categorical
        feature of at most 23 categories (a missing value counting as one) splits by subsets of its
        categories, the subset uniform among the nonempty proper subsets of the categories the
        node's rows hold (as Bayesian CART); a category the node's rows do not hold goes right.  One
        of more categories splits as values ordered by their mean response (with a warning).

    Attributes
    ----------
    result_ : BETResult
    trees_ : Tree (chains, draws, max_trees)
    idata_ : arviz.InferenceData
    best_ensemble_ : dict, the draw with the highest ``[Y, Z | T]``
    n_trees_ : (chains, draws) trees (components of at least ``min_leaf_rows`` rows)
    n_components_ : (chains, draws) occupied components
    xi_bar_ : (n_features,) posterior mean of ``xi_bar``

    Examples
    --------
    A short run (a real fit needs the defaults' draws and tuning steps, or more):

    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(size=(40, 2))
    >>> y = np.sin(6 * X[:, 0]) + 0.1 * rng.normal(size=40)
    >>> reg = bt.BETRegressor(draws=20, tune=10, random_state=0).fit(X, y)
    >>> reg.predict(X[:5]).shape                   # the ensemble estimator, averaged over draws
    (5,)
    >>> reg.predict_cluster().shape                # cluster-specific, at the training rows
    (40,)
    >>> reg.n_trees_.shape                         # trees per draw, (chains, draws)
    (1, 20)
    >>> reg.xi_bar_.shape                          # variable-ranking probabilities
    (2,)
    """

    _task = "regression"

    def __init__(self, alpha_dp=1.0, delta=2.0, min_leaf_rows=5, max_trees=10, *, active_trees=4, init_trees=4,
                 leaf_prior="objective", particles=10, regrow_rate=0.1, draws=1000, tune=1000, chains=1, thin=1, max_depth=5, max_bins=32,
                 random_state=None, dtype="float32", progressbar=False, chain_method="auto",
                 categorical_features=None):
        _init(self, alpha_dp, delta, min_leaf_rows, max_trees, active_trees, draws, tune, chains, thin, max_depth,
              max_bins, random_state, dtype, progressbar, chain_method, categorical_features)
        self.leaf_prior, self.init_trees, self.particles = leaf_prior, init_trees, particles
        self.regrow_rate = regrow_rate

    def predict(self, X) -> np.ndarray:
        """Ensemble estimator at ``X``, averaged over draws.

        Parameters
        ----------
        X : array-like or DataFrame (n_samples, n_features)
            Rows with the training data's columns.

        Returns
        -------
        np.ndarray
            Shape ``(n_samples,)``, in the units of ``y``.
        """
        return self.predict_draws(X).mean(0)

    def predict_cluster(self) -> np.ndarray:
        """Cluster-specific in-sample estimator ``E(theta | T_{Z_i})`` at the training rows: ``(n,)``."""
        return self._cluster_values()[:, 0]


class BETClassifier(_BETMixin, ClassifierBase):
    __doc__ = parameters_doc(
        "BET classifier: a Dirichlet-process mixture of classification trees (Dirichlet(leaf_concentration) leaves).",
        BETRegressor, drop=("leaf_prior",),
        extra="""
        leaf_concentration : float > 0, default 0.5
            Concentration of the symmetric Dirichlet prior of the leaf class probabilities (the paper: 0.5).
        alpha_leaves : float
            The former name of ``leaf_concentration`` (``FutureWarning``; removed in the next release).
        """,
        notes="The parameters are :class:`BETRegressor`'s, with Dirichlet leaves in place of ``leaf_prior``.",
        examples="""
        A short run (a real fit needs the defaults' draws and tuning steps, or more):

        >>> rng = np.random.default_rng(0)
        >>> X = rng.uniform(size=(40, 2))
        >>> labels = np.where(X[:, 0] > 0.5, "high", "low")
        >>> clf = bt.BETClassifier(draws=20, tune=10, random_state=0).fit(X, labels)
        >>> clf.predict_proba(X[:5]).shape             # ensemble class probabilities
        (5, 2)
        >>> clf.predict_cluster().shape                # cluster-specific labels at the training rows
        (40,)
        """)

    _task = "classification"

    _renamed = {"alpha_leaves": "leaf_concentration"}

    def __init__(self, alpha_dp=1.0, delta=2.0, min_leaf_rows=5, max_trees=10, *, active_trees=4, init_trees=4,
                 leaf_concentration=0.5, particles=10, regrow_rate=0.1, draws=1000, tune=1000, chains=1, thin=1, max_depth=5, max_bins=32,
                 random_state=None, dtype="float32", progressbar=False, chain_method="auto",
                 categorical_features=None, alpha_leaves=RENAMED):
        _init(self, alpha_dp, delta, min_leaf_rows, max_trees, active_trees, draws, tune, chains, thin, max_depth,
              max_bins, random_state, dtype, progressbar, chain_method, categorical_features)
        self.leaf_concentration, self.init_trees, self.particles = leaf_concentration, init_trees, particles
        self.regrow_rate = regrow_rate
        self.alpha_leaves = alpha_leaves

    def predict_proba(self, X) -> np.ndarray:
        """Ensemble class probabilities at ``X``, averaged over draws.

        Parameters
        ----------
        X : array-like or DataFrame (n_samples, n_features)
            Rows with the training data's columns.

        Returns
        -------
        np.ndarray
            Shape ``(n_samples, n_classes)``, columns in the order of ``classes_``.
        """
        return self.predict_draws(X).mean(0)

    def predict(self, X) -> np.ndarray:
        """Most probable class at ``X`` under the ensemble estimator.

        Parameters
        ----------
        X : array-like or DataFrame (n_samples, n_features)
            Rows with the training data's columns.

        Returns
        -------
        np.ndarray
            Labels (of ``classes_``), shape ``(n_samples,)``.
        """
        return self._labels(self.predict_proba(X))

    def predict_proba_cluster(self) -> np.ndarray:
        """Cluster-specific in-sample class probabilities ``E(theta | T_{Z_i})``: ``(n, C)``."""
        return self._cluster_values()

    def predict_cluster(self) -> np.ndarray:
        """Cluster-specific in-sample labels at the training rows: ``(n,)``."""
        return self._labels(self.predict_proba_cluster())
