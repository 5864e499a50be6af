"""scikit-learn style BART (Chipman, George & McCulloch 2010): a posterior over sums of trees.

>>> reg = bt.BARTRegressor(m=200, draws=1000, tune=1000, chains=4, random_state=0).fit(X, y)
>>> reg.predict(X_test)              # posterior mean of the function
>>> reg.predict_interval(X_test)     # 90% credible interval of the function
>>> reg.idata_                       # n_leaves and depth per tree, split_counts, sigma, mu; lp, acceptance
>>> bt.loo(reg.idata_)               # pointwise log-likelihood is stored
>>> clf = bt.BARTClassifier().fit(X, labels)   # two classes: probit; more: multinomial logit
>>> clf.predict_proba(X_test)
>>> small = bt.BARTRegressor(keep_trees=False).fit(X, y, X_predict=X_test)   # no trees kept:
>>> small.predict(X_test)            # values at the rows named when fitting only
>>> bt.BARTRegressor().fit(X, y, sample_weight=w)   # row i's noise sd is sigma / sqrt(w_i)

Missing values (NaN) in ``X`` are taken: each rule also says where the missing rows go
(missingness incorporated in attributes: :mod:`bayestrees.inference.missing`).  Unordered
categorical features (pandas ``category`` columns, or ``categorical_features``) split by subsets
of their categories.  Regression responses are scaled inside to
``[-0.5, 0.5]``; every output is in the response's units.  The defaults and their sources are
listed in :mod:`bayestrees.inference.bart.fit`.
"""
from __future__ import annotations

import numpy as np

from ..inference.bart import FAMILY, acceptance_rates, check_sample_weight
from .base import ChipmanPriorMixin, ClassifierBase, DrawsMixin, FamilyEstimator, RegressorBase, parameters_doc

__all__ = ["BARTRegressor", "BARTClassifier"]


class _BARTMixin(ChipmanPriorMixin, DrawsMixin, FamilyEstimator):
    _family = FAMILY

    def fit(self, X, y=None, sample_weight=None, *, X_predict=None):
        """Run the BART sampler on ``(X, y)``; returns ``self``.

        Parameters
        ----------
        X : array-like or DataFrame (n_samples, n_features)
            Missing values (NaN) are taken: each split of a feature with missing training
            values also says where the missing rows go, drawn by the sampler with its rule
            (:mod:`bayestrees.inference.missing`); not with ``sparse``.
        y : array-like (n_samples,)
            Real targets (regressor) or class labels (classifier: two classes by probit, three or
            more by multinomial logit).
        sample_weight : array-like (n_samples,) of floats >= 0, optional
            Known precision weights (not replication counts): they multiply each row's
            precision.  Regressor: row ``i``'s noise sd is ``sigma / sqrt(w_i)``, so ``sigma`` is
            the noise sd of a row of weight 1 (a row of weight 4 is as precise as the mean of four
            rows of weight 1).  With ``sigma`` sampled (the default) only the ratios of the
            weights matter: ``sigma``'s prior is calibrated by the weighted linear fit, whose
            residual sd of a row of weight 1 scales by ``sqrt(c)`` when every weight is multiplied
            by ``c``, so the posterior of the function is unchanged and ``sigma``'s is scaled by
            ``sqrt(c)``; a given ``sigma_hat`` or ``fixed_sigma`` is the sd of a row of weight 1.
            Classifier: the probit latent's sd is ``1 / sqrt(w_i)``, ``P(y_i = 1) = Phi(sqrt(w_i)
            (offset + f(x_i)))``; the offset is the weighted class frequency's.  Several classes: row
            ``i`` adds ``w_i log P(y_i | x_i)`` to the log likelihood (a row of weight 2 counts as two
            rows there), and the offsets are the log weighted class frequencies.  A row of weight 0
            carries no likelihood (its ``y`` has no influence on the draws) but still counts in the
            binning, the response's scaling and ``min_leaf_rows``.  ``predict`` and the predictive
            draws are for a new row of weight 1.  Default: all 1 (the same draws as weights of 1).
        X_predict : array-like or DataFrame (n_new, n_features), optional
            New rows at which every kept draw's function is computed during sampling.  With
            ``keep_trees=False`` they are the only rows ``predict``, ``predict_draws``,
            ``predict_interval`` (and ``predict_proba``) answer for (any of them, in any order
            and number); with either setting ``idata_.predictions`` holds the function there
            (``y_mu``, or ``y_proba`` for the classifier).

        Returns
        -------
        self

        Raises
        ------
        ValueError
            For bad input (``X``, ``y``, ``X_predict`` as for ``predict``), ``sample_weight`` of the
            wrong length, negative or not finite or all zero, or (classifier) giving positive
            weight to one class only.
        """

        def fit_args(data) -> dict:
            out = {}
            if sample_weight is not None:
                out["weights"] = check_sample_weight(sample_weight, data.n)
            if X_predict is not None:
                out["predict_codes"] = self._codes(X_predict)
            return out

        return self._fit(X, y, fit_args)

    @property
    def acceptance_(self) -> dict:
        """Acceptance rate per move type over every tree move of the kept steps."""
        self._check_fitted()
        return acceptance_rates(self.result_.info)

    def save(self, path) -> None:
        """Save the fitted estimator; ``idata_`` is left out and rebuilt on first access (its tree
        arrays would be written in full)."""
        idata = self.__dict__.pop("_idata", None)
        try:
            super().save(path)
        finally:
            self._idata = idata


def _init(self, m, prior, alpha, beta, k, draws, tune, chains, thin, max_depth, min_leaf_rows, max_bins, move_probs,
          random_state, dtype, progressbar, chain_method, sparse, sparse_a, sparse_b, sparse_rho, keep_trees, slide,
          local_moves, particles, data_devices=1, categorical_features=None):
    self.m, self.prior, self.alpha, self.beta, self.k = m, prior, alpha, beta, k
    self.draws, self.tune, self.chains, self.thin = draws, tune, chains, thin
    self.max_depth, self.min_leaf_rows, self.max_bins, self.move_probs = max_depth, min_leaf_rows, max_bins, move_probs
    self.random_state, self.dtype, self.progressbar, self.chain_method = random_state, dtype, progressbar, chain_method
    self.sparse, self.sparse_a, self.sparse_b, self.sparse_rho = sparse, sparse_a, sparse_b, sparse_rho
    self.keep_trees, self.slide = keep_trees, slide
    self.local_moves, self.particles, self.data_devices = local_moves, particles, data_devices
    self.categorical_features = categorical_features


class BARTRegressor(_BARTMixin, RegressorBase):
    """BART regressor: the sum of ``m`` trees, by Bayesian backfitting MCMC (many chains at once).

    Parameters
    ----------
    m : int, default 200
        Trees in the sum.
    prior : a bt.priors object, optional
        The prior of each tree; default ``ChipmanPrior(alpha, beta)``.
    alpha, beta : float, default 0.95, 2.0
        A node at depth ``d`` splits with probability ``alpha (1 + d)^-beta`` (used when ``prior`` is None).
    k : float, default 2.0
        Leaf values ``N(0, sigma_mu^2)``, ``sigma_mu = 0.5 / (k sqrt(m))`` on the response scaled to [-0.5, 0.5].
    nu, q : float, default 3.0, 0.9
        ``sigma^2 ~ nu lambda / chi2_nu`` with ``lambda`` such that ``P(sigma < sigma_hat) = q``.
    sigma_hat : float, optional
        The rough noise sd that calibrates ``lambda`` (response units); default the residual sd of
        the least-squares linear fit.
    fixed_sigma : float, optional
        Keep the noise sd fixed at this value (response units) instead of sampling it.
    draws, tune, chains, thin : int, default 1000, 1000, 4, 1
        Kept draws per chain, discarded tuning steps, chains, thinning (a step updates every tree once).
    max_depth : int, default 5
        Deepest leaf level; the prior is truncated there (less than 5e-5 of its mass with the defaults).
    min_leaf_rows : int, default 5
        Every node of every tree holds at least this many training rows (as the R package BART's
        birth step asks); the prior is truncated to such trees.
    max_bins : int, default 100
        Split codes per feature (BayesTree's 100 cutpoints).
    move_probs : tuple, default (0.5, 0.5, 0.0, 0.0)
        Probabilities of grow, prune, change and swap, and optionally a fifth, rotate (a node lifted
        above its parent where both split the same variable, every leaf keeping its rows); default
        grow and prune only, as the R package BART and bartz; ``(0.25, 0.25, 0.4, 0.1)`` are BayesTree's.
    slide : int, default 0
        With ``slide = K > 0`` the change move is a local slide: a node whose two children are
        leaves keeps its split variable and moves its threshold by 1 to ``K`` codes either way, at
        the cost of a grow (swap and rotate must be 0).  With ``move_probs=(0.35, 0.35, 0.3, 0.0), slide=3``, on
        Friedman's function at n = 1,000 (3 data sets), the effective draws per second were 1.5x
        the default's at the function's worst test row, 1.3x at its median row and 1.3x for
        ``sigma`` (m = 200; m = 50: 1.0x, 1.6x, 1.2x; ``docs/lab-notes/bart.md``, "A local threshold move: slides").
    sparse : bool, default False
        Linero's (2018) sparse Dirichlet prior on the split variables (the R package BART's
        ``sparse=TRUE``, "DART"): ``s ~ Dirichlet(alpha / p)``, ``alpha / (alpha + rho) ~ Beta(a, b)``;
        ``idata_.posterior`` then holds ``split_probs`` (per feature) and ``sparse_alpha``.  For many
        features of which few matter.
    sparse_a, sparse_b : float, default 0.5 and 1.0
    sparse_rho : float, optional
        Default: the number of features.
    random_state : int, numpy Generator or JAX key, optional
    dtype : {"float32", "float64"}, default "float32"
    progressbar : bool, default False
    chain_method : {"auto", "vectorized", "parallel"}, default "auto"
        How several chains run ("auto": in threads on a multi-core CPU, vmapped otherwise).
    keep_trees : bool, default True
        Keep every draw's trees (``m * (2^(max_depth + 1) - 1) * 6`` bytes a draw: 75,600 with the
        defaults).  False keeps only the summaries (leaves and depth per tree, splits per
        feature), ``sigma``, the function at the training rows (``idata_.posterior["mu"]``), the
        pointwise log-likelihood and the function at the rows named by ``fit(...,
        X_predict=rows)``: hundreds of bytes a draw plus 4 per row.  The draws are the same to
        the bit; ``predict`` and the other ``predict*`` methods then answer at those rows only
        and raise a ``ValueError`` elsewhere; ``idata_`` has no ``trees`` group.
    local_moves : int, default 1
        Moves of every tree per step (each a grow, prune, change or swap by ``move_probs``, with its
        leaf values redrawn).
    particles : int, default 0
        With ``particles = N >= 2``, every step also regrows every tree by a particle Gibbs update
        (conditional SMC with ``N`` particles, given the other trees: exact, and it can change every
        rule of a tree at once, where a grow or prune changes a root only through a single leaf).
        Each regrowth costs tens of local moves; not with ``sparse``.
    temperatures : tuple of float, default (1.0,)
        Inverse temperatures ``(1, b_1, ...)``, decreasing: with several, each chain is a
        parallel-tempering ensemble (one replica per temperature, replica ``r`` targeting the
        likelihood to the power ``b_r``, adjacent replicas exchanging states every step), which can
        cross between modes that one chain holds to; the draws are the first replica's.  Each
        replica costs a chain.
    data_devices : int, default 1
        Devices the rows of each chain are split over: each holds a block of the rows, and the sums
        over rows of a step are added across them (bartz's ``num_data_devices``), for data too large
        or too slow for one device.  At most the devices JAX sees (several GPUs; on a CPU
        ``jax.config.update("jax_num_cpu_devices", k)`` before JAX starts).  The draws follow the
        same law as on one device, not the same numbers (sums in another order).  Not with
        ``particles``.
    categorical_features : list of int, optional
        Columns of an array ``X`` to treat as unordered categories (DataFrame columns of
        ``category``, ``object`` or ``string`` dtype are categorical without it).  A categorical
        feature of at most 23 categories (a missing value counting as one) splits by subsets of its
        categories, the subset uniform among those of the categories that reach the node; one of
        more categories splits as values ordered by their mean response (with a warning).  Not
        with ``particles``.

    Attributes
    ----------
    result_ : BARTResult (the kept trees, ``sigma``, the function at the training rows and at ``X_predict``)
    idata_ : arviz.InferenceData
    acceptance_ : dict of acceptance rates per move type
    convergence_ : the convergence table (R-hat and ESS of ``sigma`` and ``lp``)

    Examples
    --------
    A short run of a small sum (a real fit needs the defaults: 200 trees, 4 chains of 1,000 tuning
    steps and 1,000 draws):

    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(size=(40, 2))
    >>> y = np.sin(6 * X[:, 0]) + 0.1 * rng.normal(size=40)
    >>> reg = bt.BARTRegressor(m=5, max_depth=3, draws=20, tune=10, chains=1, random_state=0).fit(X, y)
    >>> reg.predict(X[:5]).shape                   # posterior mean of the function
    (5,)
    >>> reg.predict_interval(X[:5]).shape          # 90% credible interval of the function
    (5, 2)
    >>> reg.idata_.posterior["sigma"].shape        # (chain, draw)
    (1, 20)
    """

    _task = "regression"

    def __init__(self, m=200, prior=None, alpha=0.95, beta=2.0, *, k=2.0, nu=3.0, q=0.9, sigma_hat=None,
                 fixed_sigma=None, draws=1000, tune=1000, chains=4, thin=1, max_depth=5, min_leaf_rows=5,
                 max_bins=100, move_probs=(0.5, 0.5, 0.0, 0.0), sparse=False, sparse_a=0.5, sparse_b=1.0,
                 sparse_rho=None, random_state=None, dtype="float32", progressbar=False, chain_method="auto",
                 keep_trees=True, slide=0, local_moves=1, particles=0, temperatures=(1.0,), data_devices=1,
                 categorical_features=None):
        _init(self, m, prior, alpha, beta, k, draws, tune, chains, thin, max_depth, min_leaf_rows, max_bins,
              move_probs, random_state, dtype, progressbar, chain_method, sparse, sparse_a, sparse_b, sparse_rho,
              keep_trees, slide, local_moves, particles, data_devices, categorical_features)
        self.nu, self.q, self.sigma_hat, self.fixed_sigma = nu, q, sigma_hat, fixed_sigma
        self.temperatures = temperatures

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


class BARTClassifier(_BARTMixin, ClassifierBase):
    __doc__ = parameters_doc(
        "BART for classes: probit for two, ``P(y = 1) = Phi(offset + sum of m trees)`` (Albert & Chib's latent normals); "
        "multinomial logit for three or more, a sum of m trees per class (log-linear BART, Murray 2021).",
        BARTRegressor, drop=("nu", "q", "sigma_hat", "fixed_sigma", "temperatures"),
        notes="""
        The parameters are :class:`BARTRegressor`'s without ``nu``, ``q``, ``sigma_hat`` and
        ``fixed_sigma`` (the latent noise sd is 1) and ``temperatures`` (tempering takes a Normal
        likelihood), with ``k`` setting ``sigma_mu = 3 / (k sqrt(m))``
        on the probit scale and the offset ``Phi^-1(mean y)``.

        Three or more classes: ``P(y = c | x) = lambda_c(x) / sum_l lambda_l(x)`` with ``log lambda_c =
        o_c + f_c``, ``f_c`` a sum of ``m`` trees per class whose leaves ``exp(theta) ~ Gamma(a, b)``
        (``theta`` of mean 0 and sd ``3.5 / (k sqrt(m))``), ``o_c`` the log class frequency; sampled by
        Murray's (2021) augmentation, one latent per row, which makes every leaf update conjugate
        (:mod:`bayestrees.inference.bart.multinomial`).  ``sparse`` and ``slide`` are for two classes
        only (a ``ValueError`` names them).  ``idata_.posterior`` holds ``mu`` (dims ``obs, class``)
        and the trees' summaries per class (``n_leaves``: ``chain, draw, class, tree``).
        """,
        examples="""
        A short run of a small sum (a real fit needs the defaults: 200 trees, 4 chains of 1,000 tuning
        steps and 1,000 draws):

        >>> rng = np.random.default_rng(0)
        >>> X = rng.uniform(size=(40, 2))
        >>> labels = np.where(X[:, 0] > 0.5, "high", "low")
        >>> clf = bt.BARTClassifier(m=5, max_depth=3, draws=20, tune=10, chains=1, random_state=0).fit(X, labels)
        >>> clf.classes_
        array(['high', 'low'], dtype='<U4')
        >>> clf.predict_proba(X[:5]).shape             # posterior mean class probabilities
        (5, 2)
        """)

    _task = "classification"

    def __init__(self, m=200, prior=None, alpha=0.95, beta=2.0, *, k=2.0, draws=1000, tune=1000, chains=4, thin=1,
                 max_depth=5, min_leaf_rows=5, max_bins=100, move_probs=(0.5, 0.5, 0.0, 0.0), sparse=False,
                 sparse_a=0.5, sparse_b=1.0, sparse_rho=None, random_state=None, dtype="float32", progressbar=False,
                 chain_method="auto", keep_trees=True, slide=0, local_moves=1, particles=0, data_devices=1,
                 categorical_features=None):
        _init(self, m, prior, alpha, beta, k, draws, tune, chains, thin, max_depth, min_leaf_rows, max_bins,
              move_probs, random_state, dtype, progressbar, chain_method, sparse, sparse_a, sparse_b, sparse_rho,
              keep_trees, slide, local_moves, particles, data_devices, categorical_features)

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
        """The more probable class at ``X`` under the posterior mean probabilities.

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
