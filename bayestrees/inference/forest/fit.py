"""The Bayesian-forest family (BF, EBF, SSF and the RF/CART/ET baselines; Taddy et al. 2015).

The family's one entry point, :func:`fit_bayesian_forest`, takes a key, the
validated training data (:class:`~bayestrees.data.TrainingData`) and a
:class:`ForestConfig`, and returns a :class:`ForestResult`.  The
scikit-learn style estimators (:mod:`bayestrees.estimators.forest`) and the
model variable ``bt.BayesianForest`` (:mod:`bayestrees.models.forest`) are
thin layers over it and over the output functions here:

* :func:`forest_values` / :func:`forest_draws`: each tree's prediction at
  coded rows (a draw of the CART functional);
* :func:`forest_inferencedata`: the posterior contract
  (:func:`bayestrees.convert.to_inferencedata`): one draw per tree, ``mu`` =
  each tree's prediction at the training rows, no ``log_likelihood``;
* :func:`forest_predictive`: the arrays of
  :func:`bayestrees.convert.predictive_group`.

The low-level engine is :func:`bayestrees.inference.forest.bootstrap.fit_forest`
(weight draws, chunks, worker processes).

Notes
-----
A Bayesian forest is a sample from the posterior of the CART functional
under a Dirichlet-process (Bayesian bootstrap) model of the data: every tree
is CART fitted to i.i.d. Exp(1) row weights.  That model has no likelihood
for ``y`` given a tree, so the InferenceData has no ``log_likelihood`` group
(``bt.loo`` and ``bt.compare`` refuse it with a ``ValueError``), and the
posterior predictive of a tree is its prediction: there is no noise model to
draw a response from.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ...convert import to_inferencedata
from ...data import TrainingData, bucket_size, check_dtype, missing_code, pad_rows, standardize_response
from ...tree import Tree, pack, predict
from .bootstrap import WEIGHT_KINDS, fit_forest, fit_trunk, root_trunk, start_workers
from .cart import CARTConfig, default_capacity, prepare_codes

__all__ = [
    "FAMILY", "KINDS", "ForestConfig", "ForestResult", "fit_bayesian_forest", "resolve_max_features", "cart_config",
    "forest_values", "forest_draws", "forest_inferencedata", "forest_predictive",
]

#: the family name stored in the InferenceData attributes (``bt.loo`` reads it)
FAMILY = "bayesian_forest"

#: forest kinds: Bayesian forest, empirical Bayesian forest (CART trunk), sub-sample forest
KINDS = ("bf", "ebf", "ssf")

_KIND_NAMES = {"bf": "bayesian_forest", "ebf": "empirical_bayesian_forest", "ssf": "sub_sample_forest"}
_CLASSIFICATION_CRITERIA = ("gini", "entropy", "log_loss")


def resolve_max_features(max_features, d: int) -> int | None:
    """Features drawn per node for ``d`` features.

    Parameters
    ----------
    max_features : None, "sqrt", "log2", int >= 1 or float in (0, 1]
    d : int
        Number of features.

    Returns
    -------
    int or None
        None (all features) or a count in ``[1, d]``.
    """
    mf = max_features
    if mf is None:
        return None
    if isinstance(mf, str):
        if mf == "sqrt":
            return max(1, int(np.sqrt(d)))
        if mf == "log2":
            return max(1, int(np.log2(d)))
        raise ValueError(f"max_features must be None, 'sqrt', 'log2', an int or a float in (0, 1], got {mf!r}")
    if isinstance(mf, (float, np.floating)):
        if not 0.0 < mf <= 1.0:
            raise ValueError(f"max_features as a fraction must be in (0, 1], got {mf}")
        return max(1, int(mf * d))
    mf = int(mf)
    if not 1 <= mf:
        raise ValueError(f"max_features must be >= 1, got {mf}")
    return min(mf, d)


@dataclass(frozen=True)
class ForestConfig:
    """Validated hyperparameters of a forest fit (checked when built).

    Parameters
    ----------
    kind : {"bf", "ebf", "ssf"}
        Bayesian forest, empirical Bayesian forest (every tree grown from a CART trunk with
        leaves of at least ``trunk_min_samples_leaf`` rows) or sub-sample forest (``n_blocks``
        random blocks of rows, an equal share of the trees per block).
    draws : int
        Trees per chain, i.e. posterior draws (the estimators' ``draws``).
    chains : int
        Independent batches of ``draws`` trees (1 in the estimators); the forest has
        ``n_trees = draws * chains`` trees, tree ``c * draws + j`` being draw ``j`` of chain ``c``.
    weights : {"exponential", "multinomial", "none"}
        Row weights per tree: Bayesian bootstrap, classical bootstrap (random forest) or none
        (CART, extra trees).
    criterion : {"gini", "entropy", "log_loss"} or None
        Classification criterion (None: "gini"); regression always uses squared error (None or
        "squared_error").
    min_samples_leaf : int
        Rows of positive weight required in each leaf.
    min_weight_fraction_leaf : float in [0, 0.5]
        Fraction of a tree's total weight required in each leaf.
    max_depth : int >= 0 or None
    max_features : None, "sqrt", "log2", int or float in (0, 1]
        Features drawn at random per node (None: all).
    splitter : {"best", "random"}
        "random" draws one threshold per feature per node (extra trees).
    max_nodes : int or None
        Node slots per tree (None: a bound that cannot overflow).
    trunk_min_samples_leaf : int
        Rows per trunk leaf (``kind="ebf"`` only).
    n_blocks : int
        Row blocks (``kind="ssf"`` only).
    dtype : {"float32", "float64"}
        Precision of the split statistics and leaf values (float64 needs ``jax_enable_x64``;
        :func:`bayestrees.data.check_dtype`).
    chunk_size : int or None
        Trees per compiled call (None: chosen by memory).
    n_jobs : int or None
        Trees fitted at the same time (see :func:`~bayestrees.inference.forest.bootstrap.fit_forest`).
    progressbar : bool
    """

    kind: str = "bf"
    draws: int = 100
    chains: int = 1
    weights: str = "exponential"
    criterion: str | None = None
    min_samples_leaf: int = 1
    min_weight_fraction_leaf: float = 0.0
    max_depth: int | None = None
    max_features: Any = None
    splitter: str = "best"
    max_nodes: int | None = None
    trunk_min_samples_leaf: int = 1000
    n_blocks: int = 5
    dtype: str = "float32"
    chunk_size: int | None = None
    n_jobs: int | None = None
    progressbar: bool = False

    def __post_init__(self):
        def put(name, value):
            object.__setattr__(self, name, value)

        if self.kind not in KINDS:
            raise ValueError(f"kind must be 'bf', 'ebf' or 'ssf', got {self.kind!r}")
        if int(self.draws) < 1:
            raise ValueError(f"draws (trees) must be >= 1, got {self.draws}")
        put("draws", int(self.draws))
        if int(self.chains) < 1:
            raise ValueError(f"chains must be >= 1, got {self.chains}")
        put("chains", int(self.chains))
        if self.weights not in WEIGHT_KINDS:
            raise ValueError(f"weights must be one of {WEIGHT_KINDS}, got {self.weights!r}")
        if self.criterion is not None and self.criterion not in _CLASSIFICATION_CRITERIA + ("squared_error",):
            raise ValueError(f"criterion must be 'gini', 'entropy' or 'log_loss', got {self.criterion!r}")
        if int(self.min_samples_leaf) < 1:
            raise ValueError(f"min_samples_leaf must be >= 1, got {self.min_samples_leaf}")
        put("min_samples_leaf", int(self.min_samples_leaf))
        if not 0.0 <= float(self.min_weight_fraction_leaf) <= 0.5:
            raise ValueError(f"min_weight_fraction_leaf must be in [0, 0.5], got {self.min_weight_fraction_leaf}")
        put("min_weight_fraction_leaf", float(self.min_weight_fraction_leaf))
        if self.max_depth is not None:
            if int(self.max_depth) < 0:
                raise ValueError(f"max_depth must be None or >= 0, got {self.max_depth}")
            put("max_depth", int(self.max_depth))
        resolve_max_features(self.max_features, 1)  # validates the kind and range
        if self.splitter not in ("best", "random"):
            raise ValueError(f"splitter must be 'best' or 'random', got {self.splitter!r}")
        if self.max_nodes is not None:
            if int(self.max_nodes) < 1:
                raise ValueError(f"max_nodes must be None or >= 1, got {self.max_nodes}")
            put("max_nodes", int(self.max_nodes))
        if self.kind == "ebf" and int(self.trunk_min_samples_leaf) < 1:
            raise ValueError(f"trunk_min_samples_leaf must be >= 1, got {self.trunk_min_samples_leaf}")
        put("trunk_min_samples_leaf", int(self.trunk_min_samples_leaf))
        put("n_blocks", int(self.n_blocks))
        put("dtype", check_dtype(self.dtype).name)
        put("progressbar", bool(self.progressbar))

    @property
    def n_trees(self) -> int:
        """Trees in the forest: ``draws * chains``."""
        return self.draws * self.chains

    @property
    def jax_dtype(self):
        """The floating dtype as a JAX dtype."""
        return jnp.dtype(self.dtype)

    @property
    def kind_name(self) -> str:
        """``"bayesian_forest"``, ``"empirical_bayesian_forest"`` or ``"sub_sample_forest"``."""
        return _KIND_NAMES[self.kind]

    def criterion_for(self, task: str) -> str:
        """The CART criterion for ``task`` (``"log_loss"`` is ``"entropy"``)."""
        if task == "regression":
            if self.criterion not in (None, "squared_error"):
                raise ValueError(f"criterion {self.criterion!r} is for classification; regression forests use "
                                 "squared error (leave criterion unset)")
            return "squared_error"
        crit = self.criterion or "gini"
        if crit not in _CLASSIFICATION_CRITERIA:
            raise ValueError(f"criterion must be 'gini', 'entropy' or 'log_loss', got {crit!r}")
        return "entropy" if crit == "log_loss" else crit


@dataclass(frozen=True)
class ForestResult:
    """What :func:`fit_bayesian_forest` returns.

    Attributes
    ----------
    trees : Tree, NumPy arrays, batch shape ``(n_trees,)``; leaf values in the response's units
        (regression, output 1) or class probabilities (classification, one output per class)
    device_trees : the same trees as JAX arrays
    packed : :func:`~bayestrees.tree.pack` of ``device_trees`` (what prediction reads)
    cart_config : the :class:`~bayestrees.inference.forest.cart.CARTConfig` the trees were grown with
        (its ``missing`` is the code of missing values)
    config : the :class:`ForestConfig`
    task : "regression" or "classification"
    classes : (C,) class labels, or None
    trunk : Tree (NumPy, one tree) or None: the CART trunk of an empirical Bayesian forest
    block_of_row : int32 (n,) or None: the block of every training row (sub-sample forest)
    y_shift, y_scale : the standardisation of a regression response (0 and 1 for classification)
    """

    trees: Tree
    device_trees: Tree
    packed: Any
    cart_config: CARTConfig
    config: ForestConfig
    task: str
    classes: np.ndarray | None
    trunk: Tree | None
    block_of_row: np.ndarray | None
    y_shift: float
    y_scale: float


def cart_config(config: ForestConfig, task: str, n: int, d: int, n_classes: int, has_missing: bool,
                missing: int) -> CARTConfig:
    """The CART engine's settings for a forest's trees.

    Parameters
    ----------
    config : ForestConfig
    task : "regression" or "classification"
    n : rows the capacity is sized for (padded rows on one machine, all rows on Dask)
    d : features
    n_classes : classes (0 for regression)
    has_missing : the codes contain the missing code
    missing : the missing code

    Returns
    -------
    CARTConfig
    """
    md = config.max_depth
    cap = config.max_nodes if config.max_nodes is not None else default_capacity(n, config.min_samples_leaf, md)
    return CARTConfig(criterion=config.criterion_for(task), n_classes=n_classes,
                      min_samples_leaf=config.min_samples_leaf,
                      min_weight_fraction_leaf=config.min_weight_fraction_leaf, max_depth=md,
                      max_features=resolve_max_features(config.max_features, d), extra=config.splitter == "random",
                      capacity=cap, has_missing=has_missing, missing=missing)


def fit_bayesian_forest(key, data: TrainingData, config: ForestConfig) -> ForestResult:
    """Fit a forest: one weighted CART per posterior draw.

    Parameters
    ----------
    key : JAX PRNG key
        Split into ``trunk`` (unused: the trunk is fitted to unit weights), ``blocks`` (the
        sub-sample forest's row blocks) and ``forest`` (the weight draws).
    data : TrainingData
        From :func:`bayestrees.data.prepare_data`.
    config : ForestConfig

    Returns
    -------
    ForestResult

    Raises
    ------
    ValueError
        Too few rows for ``min_samples_leaf``; ``n_blocks`` outside ``[1, n / (2
        min_samples_leaf)]``; a criterion that does not fit the task.

    Notes
    -----
    Regression responses are standardised for the fit and the leaf values are written back in
    the response's units.  Rows are padded to a bucket size (:func:`~bayestrees.data.bucket_size`;
    weight 0, the missing code in every feature) so that data sizes share compiled programs,
    and every kind passes a trunk and row blocks (the root and one block by default), so that
    BF, EBF and SSF share one compiled program per data shape.
    """
    codes = np.asarray(data.codes)
    n, d = codes.shape
    msl = config.min_samples_leaf
    if n < 2 * msl:
        raise ValueError(
            f"X has {n} rows (n_samples={n}), fewer than 2 * min_samples_leaf = {2 * msl}; "
            "no split is possible: lower min_samples_leaf or give more rows"
        )
    dtype = config.jax_dtype
    np_dtype = np.dtype(config.dtype)
    if data.task == "regression":
        ytrain, shift, scale = standardize_response(data.y, np_dtype)
        n_classes = 0
    else:
        shift, scale = 0.0, 1.0
        ytrain = np.asarray(data.y)
        n_classes = data.n_classes
    miss = missing_code(codes.dtype)
    has_missing = bool((codes == miss).any())
    n_pad = bucket_size(n)
    cfg = cart_config(config, data.task, n_pad, d, n_classes, has_missing, miss)
    # worker processes, if the fit uses them, start now and import JAX while the rows are prepared
    start_workers(n_pad, d, cfg, config.n_trees, config.chunk_size, config.n_jobs)
    codes_p = pad_rows(codes, n_pad, miss)
    ytrain = pad_rows(ytrain, n_pad, 0)
    real = np.arange(n_pad) < n
    prep = prepare_codes(codes_p)
    _k_trunk, k_blocks, k_forest = jax.random.split(key, 3)
    kwargs = dict(dtype=dtype, y_shift=shift, y_scale=scale, chunk_size=config.chunk_size, n_jobs=config.n_jobs,
                  progressbar=config.progressbar, n_valid=n, trunk=root_trunk(cfg, dtype),
                  trunk_row_node=jnp.zeros(n_pad, jnp.int32), block_of_row=np.zeros(n_pad, np.int32), n_blocks=1)
    trunk_np, block_np = None, None
    if config.kind == "ebf":
        trunk, row_node = fit_trunk(prep, ytrain, cfg, config.trunk_min_samples_leaf, y_shift=shift, y_scale=scale,
                                    dtype=dtype, weights=real.astype(np.float32))
        trunk_np = jax.tree_util.tree_map(np.asarray, trunk)
        kwargs.update(trunk=trunk, trunk_row_node=row_node)
    elif config.kind == "ssf":
        k = config.n_blocks
        if not 1 <= k <= n // (2 * msl):
            raise ValueError(f"n_blocks must be between 1 and n / (2 min_samples_leaf) = {n // (2 * msl)}, "
                             f"got {config.n_blocks}")
        perm = np.asarray(jax.random.permutation(k_blocks, n))
        block = np.full(n_pad, -1, np.int32)
        block[perm] = np.arange(n) % k
        block_np = block[:n]
        kwargs.update(block_of_row=block, n_blocks=k)
    trees = fit_forest(k_forest, prep, ytrain, cfg, config.n_trees, config.weights, **kwargs)
    return ForestResult(trees=jax.tree_util.tree_map(np.asarray, trees), device_trees=trees, packed=pack(trees),
                        cart_config=cfg, config=config, task=data.task, classes=data.classes, trunk=trunk_np,
                        block_of_row=block_np, y_shift=shift, y_scale=scale)


def forest_values(trees: Tree, codes, missing: int, packed=None) -> np.ndarray:
    """Leaf values of every tree at every row.

    Parameters
    ----------
    trees : Tree with batch shape ``(T,)`` (NumPy or JAX arrays)
    codes : uint (n, d)
        Coded rows (the fitted :class:`~bayestrees.data.Binner`).
    missing : int
        The missing code.
    packed : optional :func:`~bayestrees.tree.pack` of ``trees`` (made here if not given)

    Returns
    -------
    np.ndarray (T, n, V)
        ``V = 1`` (regression, response units) or class probabilities (``V = C``).

    Notes
    -----
    Rows go through in slices of about ``2e6 / T`` rows, each padded to a bucket size, so a new
    row count does not recompile the traversal.
    """
    codes = np.asarray(codes)
    if packed is None:
        trees = jax.tree_util.tree_map(jnp.asarray, trees)
        packed = pack(trees)
    n = codes.shape[0]
    step = max(64, 2_000_000 // max(1, int(trees.feature.shape[0])))
    out = []
    for s in range(0, n, step):
        c = codes[s:s + step]
        m = c.shape[0]
        c = jnp.asarray(pad_rows(c, bucket_size(m), missing))
        out.append(np.asarray(predict(trees, c, missing, packed=packed))[:, :m])
    if not out:
        return np.zeros((int(trees.feature.shape[0]), 0, int(trees.value.shape[-1])), np.asarray(trees.value).dtype)
    return np.concatenate(out, axis=1)


def forest_draws(trees: Tree, codes, missing: int, task: str, packed=None) -> np.ndarray:
    """Each tree's prediction (a posterior draw of the CART functional) at coded rows.

    Returns
    -------
    np.ndarray
        ``(T, n)`` in the response's units (regression) or ``(T, n, C)`` class probabilities.
    """
    v = forest_values(trees, codes, missing, packed=packed)
    return v[..., 0] if task == "regression" else v


def _chains_draws(a: np.ndarray, chains: int) -> np.ndarray:
    """``(T, ...)`` to ``(chains, T / chains, ...)``: tree ``c * draws + j`` is draw ``j`` of chain ``c``."""
    a = np.asarray(a)
    if a.shape[0] % chains:
        raise ValueError(f"{a.shape[0]} trees cannot be cut into {chains} chains")
    return a.reshape((chains, a.shape[0] // chains) + a.shape[1:])


def forest_inferencedata(result: ForestResult, data: TrainingData, *, y_name: str = "y", attrs: dict | None = None):
    """The forest as InferenceData by the posterior contract.

    Parameters
    ----------
    result : ForestResult
        The fit: its ``draws * chains`` trees, tree ``c * draws + j`` being draw ``j`` of
        chain ``c`` (``result.config.chains``; 1 in the estimators: ``chain=1, draw=T``).
    data : TrainingData
        The data the trees were fitted to: ``mu`` is computed at its rows.
    y_name : str
        The variable's name (``"y"`` in the estimators).
    attrs : dict, optional
        Extra attributes (``family`` is always ``"bayesian_forest"``; ``kind``, ``forest``,
        ``weights``, ``min_samples_leaf`` and ``splitter`` come from ``result.config``).

    Returns
    -------
    arviz.InferenceData
        ``posterior``: ``n_leaves``, ``depth``, ``split_counts`` and ``mu``, each tree's
        prediction at the training rows (``(chain, draw, obs)`` in the response's units, or
        ``(chain, draw, obs, class)`` class probabilities); ``trees``: the tree arrays;
        ``observed_data``, ``constant_data``.  There is no ``log_likelihood`` group: the
        Bayesian bootstrap defines no likelihood, so ``bt.loo`` raises a ``ValueError``.
    """
    cfg = result.config
    chains = cfg.chains
    trees, packed = result.device_trees, result.packed
    if trees is None:  # a result unpickled without its device copy
        trees, packed = jax.tree_util.tree_map(jnp.asarray, result.trees), None
    meta = {"kind": cfg.kind, "forest": cfg.kind_name, "weights": cfg.weights,
            "min_samples_leaf": int(cfg.min_samples_leaf), "splitter": cfg.splitter, **dict(attrs or {})}
    miss = missing_code(np.asarray(data.codes).dtype)
    mu = _chains_draws(forest_draws(trees, data.codes, miss, data.task, packed=packed), chains)
    t = jax.tree_util.tree_map(lambda a: _chains_draws(a, chains), jax.tree_util.tree_map(np.asarray, trees))
    return to_inferencedata(t, family=FAMILY, task=data.task, feature_names=data.feature_names, y_name=y_name,
                            observed=data.y_observed, mu=mu, class_names=data.classes, n_bins=data.n_bins,
                            attrs=meta)


def forest_predictive(key, trees: Tree, codes, missing: int, task: str, *, chains: int = 1, classes=None,
                      packed=None) -> dict:
    """Posterior predictive draws at coded rows, as keyword arguments of
    :func:`bayestrees.convert.predictive_group`.

    Parameters
    ----------
    key : JAX PRNG key
        Draws the labels (classification); unused for regression.
    trees : Tree with batch shape ``(chains * draws,)``
    codes : uint (n, d)
    missing : int
    task : "regression" or "classification"
    chains : int
    classes : (C,) class labels (classification)
    packed : optional :func:`~bayestrees.tree.pack` of ``trees``

    Returns
    -------
    dict
        Regression: ``draws`` and ``mu``, both each tree's prediction ``(chain, draw, n)``: the
        Bayesian bootstrap defines no noise model, so a draw of the response from a tree is its
        prediction.  Classification: ``draws``, a label drawn from each tree's class
        probabilities ``(chain, draw, n)``, ``proba`` ``(chain, draw, n, C)`` and
        ``class_names``.
    """
    v = _chains_draws(forest_draws(trees, codes, missing, task, packed=packed), chains)
    if task == "regression":
        return dict(task=task, draws=v, mu=v)
    p = np.asarray(v, np.float64)
    with np.errstate(divide="ignore"):
        logp = np.log(p / p.sum(-1, keepdims=True))
    idx = np.asarray(jax.random.categorical(key, jnp.asarray(logp), axis=-1))
    return dict(task=task, draws=np.asarray(classes)[idx], proba=v, class_names=classes)
