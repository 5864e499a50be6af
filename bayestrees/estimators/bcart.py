"""scikit-learn style Bayesian CART (Chipman, George & McCulloch 1998) fit by MCMC over trees.

>>> reg = bt.BayesianCARTRegressor(chains=4, random_state=0).fit(X, y)
>>> reg.predict(X_test)              # posterior mean of the function
>>> reg.predict_interval(X_test)     # 90% credible interval of the function
>>> reg.idata_                       # InferenceData: n_leaves, depth, split_counts, sigma, mu; lp, acceptance
>>> bt.loo(reg.idata_)               # pointwise log-likelihood is stored

Missing values (NaN) in X are routed by rules that also say where a missing value goes
(:mod:`bayestrees.inference.missing`).  Regression responses are standardised inside; every
output is in the response's units.
"""
from __future__ import annotations

import numpy as np

from ..inference.bcart import FAMILY, acceptance_rates
from .base import RENAMED, ChipmanPriorMixin, ClassifierBase, DrawsMixin, FamilyEstimator, RegressorBase, parameters_doc

__all__ = ["BayesianCARTRegressor", "BayesianCARTClassifier"]


class _BCARTMixin(ChipmanPriorMixin, DrawsMixin, FamilyEstimator):
    _family = FAMILY
    _tuple_params = ("move_probs", "temperatures")

    def _fitted(self) -> None:
        self.trees_ = self.result_.trees

    @property
    def acceptance_(self) -> dict:
        """Acceptance rate per move type among the kept steps."""
        self._check_fitted()
        return acceptance_rates(self.result_.info)


def _init(self, prior, alpha, beta, leaf_model, draws, tune, chains, thin, max_depth, max_bins, move_probs, scheme,
          particles, temperatures, random_state, dtype, progressbar, chain_method, local_moves, categorical_features):
    self.prior, self.alpha, self.beta, self.leaf_model = prior, alpha, beta, leaf_model
    self.draws, self.tune, self.chains, self.thin = draws, tune, chains, thin
    self.max_depth, self.max_bins, self.move_probs, self.scheme = max_depth, max_bins, move_probs, scheme
    self.particles, self.temperatures = particles, temperatures
    self.local_moves = local_moves
    self.random_state, self.dtype, self.progressbar = random_state, dtype, progressbar
    self.chain_method = chain_method
    self.categorical_features = categorical_features


class BayesianCARTRegressor(_BCARTMixin, RegressorBase):
    """Bayesian CART regressor: MCMC over single trees (grow, prune, change and swap moves), many chains at once.

    Parameters
    ----------
    prior : a bt.priors object, optional
        Default: ``ChipmanPrior(alpha, beta)``.  ``LeafCountPrior(log_phi)`` targets the BCART-PCFG posterior.
    alpha, beta : float, default 0.95, 2.0
        Chipman's split probability ``alpha (1 + depth)^-beta`` (used when ``prior`` is None).
    leaf_model : {"auto", "common_variance", "normal"} or a bayestrees.leaves model, default "auto"
        "common_variance" (the default): a mean per leaf and one noise variance (``sigma`` in the
        posterior); "normal": a mean and a variance per leaf.
    draws, tune, chains, thin : int, default 700, 300, 4, 1
        Kept draws per chain, discarded tuning steps, chains, thinning (steps of the scheme: a
        step of the default scheme is 25 rounds of local moves on 8 replicas and one particle Gibbs
        regrowth).
    max_depth : int, default 6
        Deepest leaf level; the prior is truncated there (``sample_stats.at_max_depth`` reports
        trees pressing against it).
    max_bins : int, default 32
        Bins per feature (split thresholds are bin edges).
    move_probs : tuple, default (0.25, 0.25, 0.4, 0.1)
        Probabilities of grow, prune, change and swap.
    scheme : {"mixed", "pgibbs", "moves", "sweep"}, default "mixed"
        "mixed" (the default): ``local_moves`` rounds of local moves (grow, prune, change, swap) on
        a ladder of temperatures, each replica one move and one exchange of neighbours per round,
        then one particle Gibbs regrowth of the cold tree, per step.  The hot replicas cross
        between trees that local moves alone would not leave, and the regrowth replaces the whole
        tree; both leave the posterior invariant.  "pgibbs": the particle Gibbs regrowth alone
        (conditional SMC with data-informed proposals, after Lakshminarayanan, Roy & Teh 2015):
        cheaper per step, but its proposals favour the split with the largest one-step gain, and
        its chains can agree on trees below the posterior's bulk (a root split that only pays off
        with its children is seldom proposed).  "moves": one random grow, prune, change or swap
        move per step (Chipman et al. 1998).  "sweep": a systematic sweep over every node per
        step.  ``docs/lab-notes/bcart.md`` ("The ladder as the default") gives R-hat, time and
        the chains' mean log posterior against a long reference run on six data sets; every fit
        reports R-hat and ESS (``convergence_``) and warns when chains disagree.
    particles : int, default 10
        Particles of the "pgibbs" and "mixed" regrowth (at least 2).
    local_moves : int, default 25
        Rounds of local moves before each regrowth of scheme "mixed".
    temperatures : tuple, optional
        Inverse temperatures ``(1, b_1, ...)``, decreasing: each chain becomes a parallel-tempering
        ensemble (one replica per temperature, cost times their number) whose ``b = 1`` replica
        gives the draws; swaps between neighbours help chains leave local modes.  Default: 8
        rungs from 1 to 0.1 (evenly spaced in log) for scheme "mixed", ``(1.0,)`` (no tempering)
        for the others.
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
        node's rows hold (Chipman et al. 1998); a category the node's rows do not hold goes right.
        One of more categories splits as values ordered by their mean response (with a warning).
        Not with the leaf-count prior.

    Attributes
    ----------
    trees_ : Tree (chains, draws) with drawn leaf means
    result_ : BCARTResult
    idata_ : arviz.InferenceData
    acceptance_ : dict of acceptance rates per move type

    Examples
    --------
    A short run (a real fit needs the defaults' draws, tuning steps and chains, or more):

    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(size=(40, 2))
    >>> y = np.sin(6 * X[:, 0]) + 0.1 * rng.normal(size=40)
    >>> reg = bt.BayesianCARTRegressor(draws=20, tune=10, chains=1, max_depth=3, scheme="moves",
    ...                                random_state=0).fit(X, y)
    >>> reg.predict(X[:5]).shape                   # posterior mean of the function
    (5,)
    >>> reg.predict_interval(X[:5]).shape          # 90% credible interval of the function
    (5, 2)
    >>> reg.idata_.posterior["sigma"].shape        # (chain, draw)
    (1, 20)
    >>> reg.convergence_ is not None               # R-hat and ESS of the run
    True
    """

    _task = "regression"

    def __init__(self, prior=None, alpha=0.95, beta=2.0, leaf_model="auto", *, draws=700, tune=300, chains=4,
                 thin=1, max_depth=6, max_bins=32, move_probs=(0.25, 0.25, 0.4, 0.1), scheme="mixed",
                 particles=10, temperatures=None, random_state=None, dtype="float32", progressbar=False,
                 chain_method="auto", local_moves=25, categorical_features=None):
        _init(self, prior, alpha, beta, leaf_model, draws, tune, chains, thin, max_depth, max_bins, move_probs,
              scheme, particles, temperatures, random_state, dtype, progressbar, chain_method, local_moves,
              categorical_features)

    def predict(self, X) -> np.ndarray:
        """Posterior mean of the function at ``X``.

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


class BayesianCARTClassifier(_BCARTMixin, ClassifierBase):
    __doc__ = parameters_doc(
        "Bayesian CART classifier: Dirichlet leaves, MCMC over single trees, many chains at once.",
        BayesianCARTRegressor,
        extra="""
        leaf_concentration : float, default 1.0
            Concentration of the symmetric Dirichlet prior of the leaf class probabilities.
        alpha_leaves : float
            The former name of ``leaf_concentration`` (``FutureWarning``; removed in the next release).
        """,
        notes="The parameters are :class:`BayesianCARTRegressor`'s, with ``leaf_model`` \"auto\" or "
              "\"dirichlet\" (the class leaves).",
        examples="""
        A short run (a real fit needs the defaults' draws, tuning steps and chains, or more):

        >>> rng = np.random.default_rng(0)
        >>> X = rng.uniform(size=(40, 2))
        >>> labels = np.where(X[:, 0] > 0.5, "high", "low")
        >>> clf = bt.BayesianCARTClassifier(draws=20, tune=10, chains=1, max_depth=3, scheme="moves",
        ...                                 random_state=0).fit(X, labels)
        >>> clf.predict_proba(X[:5]).shape             # posterior mean class probabilities
        (5, 2)
        >>> clf.predict_draws(X[:5]).shape             # every draw's class probabilities
        (20, 5, 2)
        """)

    _task = "classification"

    _renamed = {"alpha_leaves": "leaf_concentration"}

    def __init__(self, prior=None, alpha=0.95, beta=2.0, leaf_model="auto", *, leaf_concentration=1.0, draws=700,
                 tune=300, chains=4, thin=1, max_depth=6, max_bins=32, move_probs=(0.25, 0.25, 0.4, 0.1),
                 scheme="mixed", particles=10, temperatures=None, random_state=None, dtype="float32",
                 progressbar=False, chain_method="auto", local_moves=25, categorical_features=None,
                 alpha_leaves=RENAMED):
        _init(self, prior, alpha, beta, leaf_model, draws, tune, chains, thin, max_depth, max_bins, move_probs,
              scheme, particles, temperatures, random_state, dtype, progressbar, chain_method, local_moves,
              categorical_features)
        self.leaf_concentration = leaf_concentration
        self.alpha_leaves = alpha_leaves

    def predict_proba(self, X) -> np.ndarray:
        """Posterior mean class probabilities at ``X``.

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
        """Most probable class at ``X`` under the posterior mean probabilities.

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
