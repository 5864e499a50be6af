"""The fitted BCART-PCFG posterior: one fit behind the model context and the estimators.

Layers
------
:func:`fit_pcfg` is the family's one entry point: it takes a key, validated
training data (:class:`~bayestrees.data.TrainingData`, e.g. from
:func:`prepare_pcfg_data`) and a :class:`PCFGConfig` of validated
hyperparameters, and returns a :class:`PCFGResult`.  ``bt.PCFGTree``
(:mod:`bayestrees.models.pcfg`) and ``PCFGTreeClassifier`` /
``PCFGTreeRegressor`` (:mod:`bayestrees.estimators.pcfg`) are thin siblings
over it; :func:`pcfg_inferencedata` writes the posterior contract and
:func:`pcfg_predictive` the predictive groups.

Underneath, :func:`fit_posterior` builds the grammar
(:mod:`~bayestrees.inference.pcfg.structure`) from the leaf model's per-row
statistics, runs the inside programmes once and returns a
:class:`PCFGPosterior` with exact sampling, the MAP tree, the exact predictive
and summaries.

Draws
-----
A posterior draw is an exact, independent draw of a tree together with a draw
of its leaf parameters from their posterior given the tree (the leaf models
of :mod:`bayestrees.leaves`: Dirichlet class probabilities, or a Normal mean
and variance per leaf).  Given such a draw the rows are conditionally
independent, so the pointwise log-likelihood is what ``az.loo`` needs.

Precision: ``dtype="float32"`` (the fast default) or ``dtype="float64"``
(exact comparisons; needs ``jax_enable_x64`` on, see
:func:`~bayestrees.inference.pcfg.dp.resolve_dtype`).  Every array the posterior
holds or returns is in that dtype.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from ...convert import to_inferencedata
from ...data import TrainingData, check_alpha, check_int, missing_code, prepare_data
from ...leaves import (DirichletLeaves, NIGPrior, NormalLeaves, draws_at_rows, leaf_stats, make_leaf_model,
                       sigma_at_rows)
from ...priors import LeafCountPrior
from ...tree import Tree, apply, predict
from . import dp
from .structure import (DEFAULT_MEMORY_BUDGET, PCFGStructure, build_box_structure, build_row_structure)

__all__ = ["FAMILY", "PCFGConfig", "PCFGResult", "fit_pcfg", "prepare_pcfg_data", "check_pcfg_data",
           "pcfg_inferencedata", "pcfg_predictive", "draw_leaf_parameters", "PCFGPosterior", "fit_posterior",
           "make_leaf_model", "check_phi", "leaf_count_prior", "check_alpha", "phi_to_log"]

#: the family name stored in InferenceData attrs
FAMILY = "pcfg"

_METHODS = ("box", "row")


def check_phi(log_phi) -> float:
    """Validate ``log phi``.

    Parameters
    ----------
    log_phi : float
        log of the prior's leaf penalty ``phi`` (any finite number: ``phi = exp(log_phi) > 0``).

    Returns
    -------
    float

    Raises
    ------
    ValueError
        For a non-number or a non-finite value.
    """
    if isinstance(log_phi, bool):
        raise ValueError(f"log_phi must be a finite number, got {log_phi!r}")
    try:
        v = float(log_phi)
    except (TypeError, ValueError):
        raise ValueError(f"log_phi must be a finite number, got {log_phi!r}") from None
    if not np.isfinite(v):
        raise ValueError(f"log_phi must be finite (phi = exp(log_phi) > 0), got {log_phi!r}")
    return v


def leaf_count_prior(log_phi=2.0, prior: LeafCountPrior | None = None) -> LeafCountPrior:
    """The PCFG tree prior from ``log_phi`` and/or a :class:`~bayestrees.priors.LeafCountPrior`.

    Parameters
    ----------
    log_phi : float, default 2.0
        Checked by :func:`check_phi`.
    prior : LeafCountPrior, optional
        The prior itself.

    Returns
    -------
    LeafCountPrior
        ``LeafCountPrior(log_phi)`` without ``prior``; else ``prior`` (its ``log_phi`` as a
        checked float), or ``LeafCountPrior(log_phi)`` when ``prior`` has the default
        ``log_phi`` and ``log_phi`` does not.

    Raises
    ------
    ValueError
        For a ``prior`` that is not a ``LeafCountPrior``, a bad ``log_phi``, or two different
        non-default values of ``log_phi``.
    """
    default = LeafCountPrior().log_phi
    lp = check_phi(log_phi)
    if prior is None:
        return LeafCountPrior(lp)
    if not isinstance(prior, LeafCountPrior):
        raise ValueError(f"prior must be a bt.priors.LeafCountPrior (the BCART-PCFG prior), got {prior!r}")
    pp = check_phi(prior.log_phi)
    if lp == pp or lp == default:
        return LeafCountPrior(pp)
    if pp == default:
        return LeafCountPrior(lp)
    raise ValueError(f"log_phi={log_phi!r} and prior=LeafCountPrior({prior.log_phi!r}) disagree: give one of them")


def phi_to_log(phi) -> float:
    """``log(phi)`` for a user-given ``phi``, which must be a finite number > 0."""
    try:
        v = float(phi)
    except (TypeError, ValueError):
        v = float("nan")
    if not (np.isfinite(v) and v > 0):
        raise ValueError(f"phi must be a finite number > 0 (the prior is proportional to phi^-leaves), got {phi!r}")
    return float(np.log(v))


@dataclass(frozen=True)
class PCFGConfig:
    """Validated hyperparameters of a BCART-PCFG fit.

    Parameters
    ----------
    log_phi : float, default 2.0
        log of the prior's leaf penalty: ``Pr[T | X] ∝ phi^-(leaves)`` (``prior.log_phi``).
    leaf_concentration : float or sequence of float, default 1.0
        Dirichlet concentration of the class leaves (> 0), one value or one per
        class (stored as a float or a tuple); unused for regression.
    max_bins : int, default 10
        Bins per feature, used by :func:`prepare_pcfg_data` (the data layer).
    method : {"box", "row"}, default "box"
        Dense programme over boxes, or over reachable row sets.
    memory_budget : int or None, default 4 GB
        Bytes the dense programme may use (``None``: no limit).
    dtype : {"float32", "float64"}, default "float32"
        Precision of the programme and of the leaf draws (stored as its name);
        float64 needs ``jax_enable_x64`` on.
    draws, chains : int, default 100 and 1
        Exact posterior draws per chain, and chains (independent batches).
    leaf_prior : NIGPrior or None, default None
        Normal-inverse-gamma leaf prior of a regression, on the scale of the response;
        None: :func:`~bayestrees.leaves.default_nig_prior` of the training responses.
    prior : bt.priors.LeafCountPrior or None, default None
        The tree prior; None: ``LeafCountPrior(log_phi)``.  After validation ``prior`` is
        always set and ``log_phi == prior.log_phi``: where only one of the two was moved
        from its default (``log_phi=2.0``, ``LeafCountPrior()``), that one is taken; two
        different non-default values raise.

    Raises
    ------
    ValueError
        For any invalid value, when the config is made.
    """

    log_phi: float = 2.0
    leaf_concentration: float | tuple = 1.0
    max_bins: int = 10
    method: str = "box"
    memory_budget: int | None = DEFAULT_MEMORY_BUDGET
    dtype: str = "float32"
    draws: int = 100
    chains: int = 1
    leaf_prior: NIGPrior | None = None
    prior: LeafCountPrior | None = None

    def __post_init__(self):
        set_ = partial(object.__setattr__, self)
        tree_prior = leaf_count_prior(self.log_phi, self.prior)
        set_("prior", tree_prior)
        set_("log_phi", tree_prior.log_phi)
        a = check_alpha(self.leaf_concentration)
        set_("leaf_concentration", float(a) if a.ndim == 0 else tuple(float(v) for v in a))
        set_("max_bins", check_int("max_bins", self.max_bins, 2, whole_floats=True))
        if self.method not in _METHODS:
            raise ValueError(f"method must be 'box' or 'row', got {self.method!r}")
        if self.memory_budget is not None:
            mb = self.memory_budget
            if isinstance(mb, bool) or not isinstance(mb, (int, float, np.integer, np.floating)) \
                    or not (np.isfinite(mb) and mb > 0):
                raise ValueError(f"memory_budget must be a number of bytes > 0 or None, got {mb!r}")
        set_("dtype", dp.resolve_dtype(self.dtype).name)
        set_("draws", check_int("draws", self.draws, 1, whole_floats=True))
        set_("chains", check_int("chains", self.chains, 1, whole_floats=True))
        if self.leaf_prior is not None:
            pr = NIGPrior(*(float(v) for v in self.leaf_prior))
            if not (all(np.isfinite(pr)) and pr.kappa0 > 0 and pr.a0 > 0 and pr.b0 > 0):
                raise ValueError(f"leaf_prior needs finite m0 and kappa0, a0, b0 > 0, got {self.leaf_prior!r}")
            set_("leaf_prior", pr)


@dataclass
class PCFGPosterior:
    """Exact posterior over trees for one training set.

    Attributes
    ----------
    structure : PCFGStructure
    ds : DeviceStructure
    root : int
    kind : ``"classification"`` or ``"regression"``
    log_phi : float
    alpha : float[K] or None
    prior : NIGPrior or None
    log_leaf, log_q, log_qmax : float[M + 2]
    values : float[M + 2, V]
        Posterior predictive of each symbol's leaf (class probabilities or the mean).
    capacity : int
        Node slots of every tree (``2 n - 1`` rounded up to a power of two minus one).
    leaf_model : DirichletLeaves or NormalLeaves
        The leaf model whose row statistics and marginals the programme uses.
    tree_prior : bt.priors.LeafCountPrior
        The tree prior (``log_phi`` is its ``log_phi``).

    All float arrays share one dtype (:attr:`dtype`), the one given to
    :func:`fit_posterior`.
    """

    structure: PCFGStructure
    ds: dp.DeviceStructure
    root: int
    kind: str
    log_phi: float
    alpha: np.ndarray | None
    prior: NIGPrior | None
    log_leaf: jax.Array
    log_q: jax.Array
    log_qmax: jax.Array
    values: jax.Array
    capacity: int
    leaf_model: DirichletLeaves | NormalLeaves | None = field(default=None, repr=False)
    tree_prior: LeafCountPrior | None = field(default=None, repr=False)

    @property
    def dtype(self) -> np.dtype:
        """Float dtype of the programme (``float32`` or ``float64``)."""
        return np.dtype(self.log_q.dtype)

    @property
    def log_evidence(self) -> float:
        """log p(y | X) under the model (prior normaliser included)."""
        return float(dp.log_evidence(self.log_leaf, self.log_phi, self.ds, self.root))

    def map_tree(self) -> tuple[Tree, float]:
        """The MAP tree and its log posterior probability."""
        t, w = dp.map_tree(self.log_qmax, self.log_leaf, self.log_phi, self.values, self.ds, self.root, self.capacity)
        return t, float(w - self.log_q[self.root])

    def sample(self, key, n: int) -> tuple[Tree, jax.Array]:
        """``n`` exact posterior trees and the log posterior probability of each."""
        trees, syms = dp.sample_trees(key, self.log_q, self.log_leaf, self.log_phi, self.values, self.ds,
                                     self.root, self.capacity, int(n))
        return trees, self.tree_log_prob(trees, syms)

    def tree_log_prob(self, trees: Tree, syms) -> jax.Array:
        """log posterior probability of trees given their node symbols (batch)."""
        leaf = trees.is_leaf()
        ll = jnp.sum(jnp.where(leaf, self.log_leaf[jnp.maximum(syms, 0)], 0.0), -1)
        b = jnp.sum(leaf, -1).astype(self.log_q.dtype)
        return ll - (b - 1) * self.log_phi - self.log_q[self.root]

    def predict_exact(self, codes, batch: int = 64) -> np.ndarray:
        """Exact posterior predictive (class probabilities or mean) at each row: ``(m, V)``."""
        codes = np.asarray(codes, np.int32)
        batch = min(int(batch), dp.pow2_bucket(max(1, codes.shape[0])))
        out = []
        for a in range(0, codes.shape[0], batch):
            xb = codes[a: a + batch]
            pad = batch - xb.shape[0]
            xp = np.concatenate([xb, np.zeros((pad, xb.shape[1]), np.int32)]) if pad else xb
            g = dp.exact_predictive(jnp.asarray(xp), self.log_q, self.log_leaf, self.log_phi, self.values, self.ds)
            out.append(np.asarray(g[self.root])[: xb.shape[0]])
        return np.concatenate(out)

    def root_splits(self) -> tuple[float, np.ndarray]:
        """Posterior probability of a root leaf and of each root split slot."""
        p0, ps = dp.root_split_posterior(self.log_q, self.log_leaf, self.log_phi, self.ds, self.root)
        return float(p0), np.asarray(ps)

    def n_leaves_distribution(self, max_leaves: int = 16) -> np.ndarray:
        """Exact posterior probabilities of 1..max_leaves leaves: ``(max_leaves,)``."""
        qb = dp.n_leaves_posterior(self.log_leaf, self.log_phi, self.ds, int(max_leaves))
        return np.exp(np.asarray(qb[self.root] - self.log_q[self.root]))

    def sample_paths(self, key, x, n: int):
        """Algorithm 1: ``n`` sampled root-to-leaf paths for one query row ``x`` (codes)."""
        return dp.sample_paths(key, jnp.asarray(np.asarray(x, np.int32)), self.log_q, self.log_leaf, self.log_phi,
                              self.values, self.ds, self.root, int(n))



def fit_posterior(codes, n_bins, y, *, kind: str, log_phi: float = 2.0, alpha=1.0, n_classes: int | None = None,
                  prior: NIGPrior | None = None, method: str = "box", memory_budget=DEFAULT_MEMORY_BUDGET,
                  dtype="float32", tree_prior: LeafCountPrior | None = None) -> PCFGPosterior:
    """Build the grammar and run the inside programmes (the exact posterior, before any draw).

    Parameters
    ----------
    codes : int[n, d]
        Bin codes (no missing codes).
    n_bins : int[d]
    y : int[n] class codes or float[n] responses
    kind : {"classification", "regression"}
    log_phi : float, default 2.0
        log of the leaf penalty of the tree prior (see ``tree_prior``).
    alpha : float or float[K], default 1.0
        Dirichlet concentration (classification).
    n_classes : int, optional
        Number of classes (default ``max(y) + 1``).
    prior : NIGPrior, optional
        Regression leaf prior (default :func:`~bayestrees.leaves.default_nig_prior` of ``y``).
    method : {"box", "row"}, default "box"
        Dense programme over boxes, or over reachable row sets.
    memory_budget : int or None
        Bytes the dense programme may use (``method="box"``).
    dtype : {"float32", "float64"} or a NumPy/JAX float dtype, default "float32"
        Precision of every array of the programme (leaf marginals, inside
        values, evidence, sampling logits, leaf values, predictive).  float32
        is fast; float64 agrees with exact enumeration to about 1e-12 and
        needs ``jax.config.update("jax_enable_x64", True)`` first (otherwise
        ``ValueError``).  None means float32.
    tree_prior : bt.priors.LeafCountPrior, optional
        The tree prior (:func:`leaf_count_prior` of ``log_phi`` and ``tree_prior``); the
        programme's leaf penalty is its ``log_phi``.

    Returns
    -------
    PCFGPosterior

    Notes
    -----
    The per-row statistics are the leaf model's (``leaf_model.row_stats(y, dtype)``:
    one-hot classes, or ``(1, y, y^2)``); the grammar sums them over boxes or row
    sets in float64, and the symbols' log marginals and leaf values are the leaf
    model's ``log_marginal`` and ``predictive`` of those sums.
    """
    dtype = dp.resolve_dtype(dtype)
    tree_prior = leaf_count_prior(log_phi, tree_prior)
    log_phi = tree_prior.log_phi
    if method not in _METHODS:
        raise ValueError(f"method must be 'box' or 'row', got {method!r}")
    codes = np.asarray(codes)
    lm = make_leaf_model(kind, y, n_classes=n_classes, alpha=alpha, prior=prior)
    stats = np.asarray(lm.row_stats(jnp.asarray(np.asarray(y)), dtype), np.float64)
    if method == "box":
        st = build_box_structure(codes, n_bins, stats, memory_budget=memory_budget)
    else:
        st = build_row_structure(codes, n_bins, stats)
    ds, root = dp.device_structure(st, dtype)
    ll = dp.symbol_log_marginals(lm, ds.stats)
    q = dp.log_inside(ll, log_phi, ds, "sum")
    qm = dp.log_inside(ll, log_phi, ds, "max")
    vals = dp.symbol_values(lm, ds.stats)
    alpha_arr = check_alpha(lm.alpha, lm.n_classes) if kind == "classification" else None
    return PCFGPosterior(structure=st, ds=ds, root=root, kind=kind, log_phi=log_phi, alpha=alpha_arr,
                         prior=lm.prior if kind == "regression" else None, log_leaf=ll, log_q=q, log_qmax=qm,
                         values=vals, capacity=dp.pow2_bucket(max(2, 2 * codes.shape[0])) - 1, leaf_model=lm,
                         tree_prior=tree_prior)


# ---------------------------------------------------------------------------------------------
# the family's fit: data -> exact draws -> the posterior contract
# ---------------------------------------------------------------------------------------------
def check_pcfg_data(data: TrainingData) -> None:
    """The family's own checks on prepared data: no missing values, no constant feature.

    Raises
    ------
    ValueError
        Naming the features with missing values (the grammar's symbols are boxes of
        binned codes; missing codes have no place in them) or with a single value
        (they cannot split and only waste memory).
    """
    codes = np.asarray(data.codes)
    feats = data.binner.features_
    names = data.feature_names
    miss = [f.name for f in feats if f.has_missing]
    if not miss and np.issubdtype(codes.dtype, np.unsignedinteger):
        bad = np.flatnonzero((codes == missing_code(codes.dtype)).any(0))
        miss = [names[j] for j in bad]
    if miss:
        raise ValueError(f"BCART-PCFG does not take missing values (NaN): features {miss} have some; "
                         "impute them or drop those rows before fitting")
    const = [f.name for f, b in zip(feats, data.n_bins) if b < 2]
    if const:
        raise ValueError(f"features {const} are constant (a single value); drop them before fitting")


def prepare_pcfg_data(X, y, *, task: str = "auto", max_bins: int = 10) -> TrainingData:
    """Validate and bin ``(X, y)`` for this family (:func:`bayestrees.data.prepare_data`).

    Parameters
    ----------
    X : array-like (n, d) or DataFrame
        No missing values.
    y : array-like (n,)
    task : {"auto", "classification", "regression"}
        "auto": :func:`bayestrees.data.infer_task`.
    max_bins : int, default 10
        Bins per feature.

    Returns
    -------
    TrainingData

    Raises
    ------
    ValueError
        For NaN/missing values, constant features, a single class, or any error of the
        data layer.
    """
    max_bins = check_int("max_bins", max_bins, 2, whole_floats=True)
    data = prepare_data(X, y, task=task, max_bins=max_bins, allow_nan=False)
    check_pcfg_data(data)
    return data


@dataclass(frozen=True)
class PCFGResult:
    """Everything a fit gives the estimators and the model variable.

    Attributes
    ----------
    config : PCFGConfig
    posterior : PCFGPosterior
        The exact posterior (evidence, MAP, exact predictive, summaries).
    trees : Tree, batch ``(chains, draws)``
        The exact posterior trees; ``value`` holds each node's posterior
        predictive (leaf parameters integrated out), as :meth:`PCFGPosterior.sample` gives.
    drawn_trees : Tree, batch ``(chains, draws)``
        The same trees with a draw of the leaf parameters from their posterior given
        the tree in ``value`` at the leaves (internal nodes keep their predictive value).
    sigma : float ``(chains, draws, S)``
        Drawn noise standard deviation per slot (regression leaves; 0 for classes).
    mu : float ``(chains, draws, n)`` or ``(chains, draws, n, C)``
        The drawn leaf parameters at the training rows.
    log_likelihood : float ``(chains, draws, n)``
        ``leaf_model.log_likelihood(y, leaf, draw)`` at the training rows.
    lp : float ``(chains, draws)``
        log posterior probability of each tree.
    map_tree : Tree
    map_log_prob : float
        log posterior probability of the MAP tree.
    """

    config: PCFGConfig
    posterior: PCFGPosterior
    trees: Tree
    drawn_trees: Tree
    sigma: np.ndarray
    mu: np.ndarray
    log_likelihood: np.ndarray
    lp: np.ndarray
    map_tree: Tree
    map_log_prob: float

    @property
    def leaf_model(self):
        """The leaf model (``DirichletLeaves`` or ``NormalLeaves``)."""
        return self.posterior.leaf_model

    @property
    def log_evidence(self) -> float:
        """``log p(y | X)`` under the model."""
        return self.posterior.log_evidence


def _chunk_size(n_trees: int, per_tree: int, budget: int = 1 << 24, most: int = 256) -> int:
    """Trees per chunk: a power of two, at most ``most``, with ``chunk * per_tree <= budget`` (at least 1)."""
    c = 1
    while c * 2 <= min(most, n_trees) and c * 2 * per_tree <= budget:
        c *= 2
    return c


def _chunks(n: int, size: int):
    """Index arrays of ``size`` covering ``0..n-1``; the last is padded with index 0 (results dropped)."""
    for a in range(0, n, size):
        idx = np.arange(a, a + size)
        yield np.where(idx < n, idx, 0), min(size, n - a)


def _take(tree: Tree, idx) -> Tree:
    # gathered on the host: an eager gather per field would compile once per field shape
    idx = np.asarray(idx)
    return Tree(*(jnp.asarray(np.asarray(a)[idx]) for a in tree))


@partial(jax.jit, static_argnames=("leaf_model", "n_slots"))
def _draw_chunk(keys, leaf, mask, row_stats, y, leaf_model, n_slots: int):
    stats = leaf_stats(leaf, row_stats, n_slots)
    d = jax.vmap(leaf_model.draw)(keys, stats, mask)
    _, ll = draws_at_rows(leaf_model, leaf, d, y)
    return d.value, d.sigma, ll


def draw_leaf_parameters(key, trees: Tree, codes, y, leaf_model, dtype="float32"):
    """For every tree, a draw of its leaf parameters from their posterior given the tree.

    Parameters
    ----------
    key : PRNG key
    trees : Tree, batch ``(N,)``
    codes : int[n, d]  training codes
    y : class codes or responses (n,)
    leaf_model : DirichletLeaves or NormalLeaves
    dtype : float dtype of the statistics and draws

    Returns
    -------
    drawn : Tree  ``trees`` with the drawn parameters in ``value`` at the leaves
    sigma : float ``(N, S)``  drawn noise standard deviation per slot (0 for classes)
    mu : float ``(N, n, V)``  the drawn parameters at the training rows
    log_likelihood : float ``(N, n)``  ``leaf_model.log_likelihood(y, leaf, draw)``

    Notes
    -----
    Leaf statistics are ``leaves.leaf_stats`` of ``leaf_model.row_stats``; tree ``i``
    uses key ``split(key, N)[i]``, so draws do not depend on the chunking (trees are
    processed in chunks to bound memory).
    """
    dtype = dp.resolve_dtype(dtype)
    codes = jnp.asarray(np.asarray(codes, np.int32))
    yj = jnp.asarray(np.asarray(y), jnp.int32 if leaf_model.task == "classification" else dtype)
    rs = leaf_model.row_stats(yj, dtype)
    n_trees, S = int(trees.feature.shape[0]), int(trees.feature.shape[-1])
    n, v = int(codes.shape[0]), int(leaf_model.n_outputs)
    keys = jax.random.split(key, n_trees)
    size = _chunk_size(n_trees, S * (rs.shape[1] + v + 1) + n * (v + 3))
    parts = []
    for idx, keep in _chunks(n_trees, size):
        tc = _take(trees, idx)
        leaf = apply(tc, codes)
        out = _draw_chunk(keys[idx], leaf, tc.is_leaf(), rs, yj, leaf_model, S)
        parts.append([np.asarray(a)[:keep] for a in (*out, leaf)])
    value, sigma, ll, leaf = (np.concatenate(p) for p in zip(*parts))
    # gathered here, from the stored draws: inside the compiled program XLA may fuse a copy of the
    # draw's arithmetic into the gather and round it differently (mu one ulp off the leaf's value)
    mu = np.take_along_axis(value, leaf[..., None], 1)
    t = jax.tree_util.tree_map(np.asarray, trees)
    drawn = t._replace(value=np.where(t.left[..., None] == -1, value, t.value).astype(t.value.dtype))
    return drawn, sigma, mu, ll


def fit_pcfg(key, data: TrainingData, config: PCFGConfig) -> PCFGResult:
    """Fit BCART-PCFG: the exact posterior, ``chains * draws`` exact trees and their leaf draws.

    Parameters
    ----------
    key : PRNG key
        Split into a key for the trees and one for their leaf parameters.
    data : TrainingData
        From :func:`prepare_pcfg_data` (or :func:`bayestrees.data.prepare_data`: the
        family's own checks run here too).
    config : PCFGConfig

    Returns
    -------
    PCFGResult

    Raises
    ------
    ValueError
        Missing values, constant features, ``alpha`` of the wrong length, a dense
        programme over the memory budget (before allocation), float64 without x64.
    """
    if not isinstance(config, PCFGConfig):
        raise TypeError(f"config must be a PCFGConfig, got {type(config).__name__}")
    check_pcfg_data(data)
    k_trees, k_leaves = jax.random.split(key)
    codes = np.asarray(data.codes, np.int32)
    post = fit_posterior(codes, data.n_bins, data.y, kind=data.task, tree_prior=config.prior,
                         alpha=config.leaf_concentration, n_classes=data.n_classes or None, prior=config.leaf_prior,
                         method=config.method, memory_budget=config.memory_budget, dtype=config.dtype)
    c, d = config.chains, config.draws
    trees, logp = post.sample(k_trees, c * d)
    drawn, sigma, mu, ll = draw_leaf_parameters(k_leaves, trees, codes, data.y, post.leaf_model, config.dtype)
    if data.task == "regression":
        mu = mu[..., 0]

    def cd(a):
        a = np.asarray(a)
        return a.reshape((c, d) + a.shape[1:])

    map_tree, map_lp = post.map_tree()
    return PCFGResult(config=config, posterior=post, trees=jax.tree_util.tree_map(cd, trees),
                      drawn_trees=jax.tree_util.tree_map(cd, drawn), sigma=cd(sigma), mu=cd(mu),
                      log_likelihood=cd(ll), lp=cd(logp), map_tree=jax.tree_util.tree_map(np.asarray, map_tree),
                      map_log_prob=map_lp)


def pcfg_inferencedata(result: PCFGResult, data: TrainingData, *, y_name: str = "y", attrs=None):
    """The posterior contract for a BCART-PCFG fit (:func:`bayestrees.convert.to_inferencedata`).

    Parameters
    ----------
    result : PCFGResult
    data : TrainingData  the data of the fit
    y_name : the variable's name (``"y"`` in the estimators)
    attrs : extra attributes

    Returns
    -------
    arviz.InferenceData
        ``posterior``: ``n_leaves``, ``depth``, ``split_counts``, ``mu`` (the drawn
        leaf parameters at the training rows: ``(chain, draw, obs, class)``
        probabilities or ``(chain, draw, obs)`` means); ``trees``: the drawn trees
        (drawn leaf parameters in ``value``); ``log_likelihood[y_name]``;
        ``sample_stats.lp``: log posterior probability of each tree;
        ``observed_data``, ``constant_data``.

    Notes
    -----
    There is no ``sigma``: the regression leaves have one variance each, so no
    single noise scale summarises a draw (the per-leaf draws are ``result.sigma``).
    """
    cfg = result.config
    lm = result.leaf_model
    meta = {"inference": "exact", "draws_are": "exact independent trees, each with its leaf parameters "
                                              "drawn from their posterior given the tree",
            "log_phi": cfg.log_phi, "log_evidence": result.log_evidence, "method": cfg.method, "dtype": cfg.dtype,
            "leaf_model": type(lm).__name__,
            "leaf_prior": repr(lm.alpha if data.task == "classification" else tuple(lm.prior)),
            **dict(attrs or {})}
    return to_inferencedata(result.drawn_trees, family=FAMILY, task=data.task, feature_names=data.feature_names,
                            y_name=y_name, observed=data.y_observed, mu=result.mu,
                            log_likelihood=result.log_likelihood, class_names=data.classes, n_bins=data.n_bins,
                            sample_stats={"lp": result.lp}, attrs=meta)


def pcfg_predictive(key, trees: Tree, codes, data: TrainingData, leaf_model) -> dict:
    """Keyword arguments of :func:`bayestrees.convert.predictive_group` at coded rows.

    Parameters
    ----------
    key : PRNG key
    trees : Tree, batch ``(chains, draws)``
        Drawn trees (e.g. ``trees_from_inferencedata(idata)``): drawn leaf parameters in ``value``.
    codes : int[m, d]  the rows, binned like the training data
    data : TrainingData  the training data of the fit
    leaf_model : the fit's leaf model

    Returns
    -------
    dict
        ``task``; classification: ``proba`` ``(chains, draws, m, C)``, the drawn class
        probabilities, ``draws`` labels drawn from them, ``class_names``; regression:
        ``mu`` ``(chains, draws, m)``, the drawn leaf means, and ``draws``, responses
        ``N(mu, s2)`` with each leaf's ``s2`` drawn from its posterior given the drawn
        mean, the tree and the training rows (so ``(mu, s2)`` is a joint posterior draw).
    """
    k_sigma, k_y = jax.random.split(key)
    codes = jnp.asarray(np.asarray(codes, np.int32))
    values = np.asarray(predict(trees, codes))                      # (c, d, m, V)
    if data.task == "classification":
        lab = np.asarray(jax.random.categorical(k_y, jnp.log(jnp.asarray(values)), axis=-1))
        return dict(task="classification", draws=np.asarray(data.classes)[lab], proba=values,
                    class_names=data.classes)
    batch = trees.feature.shape[:-1]
    n_trees, S = int(np.prod(batch)), int(trees.feature.shape[-1])
    flat = Tree(*(np.reshape(np.asarray(a), (n_trees,) + np.shape(a)[len(batch):]) for a in trees))
    dtype = values.dtype
    train = jnp.asarray(np.asarray(data.codes, np.int32))
    rs = leaf_model.row_stats(jnp.asarray(data.y, dtype), dtype)
    keys = jax.random.split(k_sigma, n_trees)
    size = _chunk_size(n_trees, S * 5 + train.shape[0] + codes.shape[0])
    sd = []
    for idx, keep in _chunks(n_trees, size):
        tc = _take(flat, idx)
        s = sigma_at_rows(keys[idx], leaf_model, apply(tc, train), rs, jnp.asarray(tc.value[..., 0], dtype),
                          apply(tc, codes))
        sd.append(np.asarray(s)[:keep])
    sd = np.concatenate(sd).reshape(values.shape[:-1])
    mu = values[..., 0]
    y = mu + sd * np.asarray(jax.random.normal(k_y, mu.shape, dtype))
    return dict(task="regression", draws=y, mu=mu)
