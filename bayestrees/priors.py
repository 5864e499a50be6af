"""Tree priors as objects (``bt.priors``).

Every prior is a frozen (hashable) dataclass, checked when made, usable as a
constant or static argument inside ``jit``, giving, for a
node at depth ``d``,

* ``log_split(d)`` / ``log_stop(d)``: the log prior weight of the node being
  internal / a leaf, so that the structure part of the log prior of a tree is
  ``sum_internal log_split(d) + sum_leaves log_stop(d)``;
* ``forces_splits``: whether ``log_stop`` can be ``-inf`` (a node that must split: the root of the
  depth-decay prior, and of the code-string prior by default); samplers that build a tree level by
  level then leave such a node's stop term out instead of subtracting it;
* ``rule_in_prior``: whether the choice of split rule (variable and threshold)
  is part of the prior (``log p(rule) = -log(#variables) - log(#thresholds)``,
  counted over the valid choices at the node) or not (the PCFG prior puts its
  weight on trees, each distinct tree once);

and :meth:`log_prior` of a :class:`~bayestrees.tree.Tree`.  ``node_split_prob(d)``
is ``exp(log_split(d))`` where the prior is a per-node split probability.

=======================  =========================================  ======================
prior                    split probability of a node at depth d      rule
=======================  =========================================  ======================
``ChipmanPrior``         ``alpha (1 + d)^-beta``                     uniform, in the prior
``DepthDecayPrior``      ``exp(-d / delta)`` (BET)                   in the prior
``CodeStringPrior``      ``split_prob`` (root always, by default)    uniform, in the prior
``LeafCountPrior``       none: ``Pr[T] ∝ phi^-leaves``               not in the prior
=======================  =========================================  ======================
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln

from .data import check_finite, check_probability
from .tree import Tree

__all__ = ["ChipmanPrior", "DepthDecayPrior", "CodeStringPrior", "LeafCountPrior", "TreePrior", "sigma_prior_lambda"]


def sigma_prior_lambda(sigma_hat: float, nu: float = 3.0, q: float = 0.9) -> float:
    """``lambda`` of the noise prior ``sigma^2 ~ nu lambda / chi2_nu`` such that ``P(sigma < sigma_hat) = q``
    (Chipman, George & McCulloch 2010; BART's and the Bayesian causal forest's)."""
    from scipy.stats import chi2

    return float(sigma_hat) ** 2 * float(chi2.ppf(1.0 - float(q), float(nu))) / float(nu)


class _Base:
    """Shared :meth:`log_prior` of the node-wise priors."""

    forces_splits: ClassVar[bool] = False

    def __post_init__(self):
        self.check()

    def log_prior(self, tree: Tree, log_rule_prob=None):
        """Log prior of one tree (or a batch).

        Parameters
        ----------
        tree : Tree
        log_rule_prob : float[..., N], optional
            ``log p(rule)`` of every internal node (for priors with
            ``rule_in_prior``); without it only the structure part is returned.

        Returns
        -------
        float[...]
        """
        d = tree.depth
        internal = tree.is_internal()
        leaf = tree.is_leaf()
        lp = jnp.where(internal, self.log_split(d), 0.0) + jnp.where(leaf, self.log_stop(d), 0.0)
        if log_rule_prob is not None and self.rule_in_prior:
            lp = lp + jnp.where(internal, log_rule_prob, 0.0)
        return jnp.sum(lp, -1)

    def node_split_prob(self, depth):
        """Probability that a node at ``depth`` splits."""
        return jnp.exp(self.log_split(depth))


@dataclass(frozen=True)
class ChipmanPrior(_Base):
    """Chipman, George & McCulloch (1998): a node at depth ``d`` splits with probability ``alpha (1 + d)^-beta``.

    The split variable is uniform over the variables with a valid split at the
    node and the threshold uniform over that variable's valid thresholds.

    Parameters
    ----------
    alpha : float in (0, 1), default 0.95
    beta : float >= 0, default 2.0
    """

    alpha: float = 0.95
    beta: float = 2.0

    rule_in_prior: ClassVar[bool] = True

    def check(self) -> "ChipmanPrior":
        a, b = check_finite("alpha", self.alpha), check_finite("beta", self.beta)
        if not 0.0 < a < 1.0:
            raise ValueError(f"ChipmanPrior alpha must be in (0, 1), got {self.alpha!r}")
        if b < 0:
            raise ValueError(f"ChipmanPrior beta must be >= 0, got {self.beta!r}")
        return self

    def log_split(self, depth):
        return jnp.log(self.alpha) - self.beta * jnp.log1p(jnp.asarray(depth, jnp.float32))

    def log_stop(self, depth):
        return jnp.log1p(-jnp.exp(self.log_split(depth)))


@dataclass(frozen=True)
class DepthDecayPrior(_Base):
    """BET (Duan et al.): a node at depth ``d`` splits with probability ``exp(-d / delta)``.

    The root (``d = 0``) always splits.  The split variable follows the
    model's variable weights ``xi`` and the threshold is uniform.

    Parameters
    ----------
    delta : float > 0
    """

    delta: float = 1.0

    rule_in_prior: ClassVar[bool] = True
    forces_splits: ClassVar[bool] = True   # the root: exp(-0 / delta) = 1

    def check(self) -> "DepthDecayPrior":
        if check_finite("delta", self.delta) <= 0:
            raise ValueError(f"DepthDecayPrior delta must be > 0, got {self.delta!r}")
        return self

    def log_split(self, depth):
        return -jnp.asarray(depth, jnp.float32) / self.delta

    def log_stop(self, depth):
        p = jnp.exp(self.log_split(depth))
        return jnp.where(p >= 1.0, -jnp.inf, jnp.log1p(-jnp.minimum(p, 1.0 - 1e-7)))


@dataclass(frozen=True)
class CodeStringPrior(_Base):
    """Safe-Bayes (Quadrianto & Ghahramani 2015): each code-string symbol is internal with probability ``split_prob``.

    With ``root_splits=True`` (the paper's Figure 1: the string starts with a 1)
    the root always splits.  Variables are uniform over all features and cuts
    uniform on the probability-integral transform, independent of the data.

    A code string with ``k`` internal nodes has prior probability
    ``lam^k (1 - lam)^(k + 1)`` (``lam^(k - 1) (1 - lam)^(k + 1)`` when the root always splits):
    what :meth:`log_prior` gives every tree with ``k`` internal nodes.  There are ``Catalan(k)``
    such strings, so the number of internal nodes ``I`` has ``P(I = k) = Catalan(k)`` times
    that (:meth:`n_internal_log_prob`), a proper distribution for ``lam < 1/2``.  The
    safe-Bayes prior-tree sampler (:mod:`bayestrees.inference.safebayes.prior_trees`) draws
    ``k`` from it and then a uniform string.

    Parameters
    ----------
    split_prob : float in (0, 0.5)
    root_splits : bool, default True
    """

    split_prob: float = 0.475
    root_splits: bool = True

    rule_in_prior: ClassVar[bool] = True
    forces_splits: ClassVar[bool] = True   # the root, with root_splits (the default)

    def check(self) -> "CodeStringPrior":
        check_probability("split_prob", self.split_prob, 0.0, 0.5,
                          hint="; at 0.5 or above the code-string prior has infinite expected size "
                               "(the paper uses 0.475)")
        return self

    def n_internal_log_prob(self, k):
        """``log P(I = k)``, the number of internal nodes of a tree: float32 array of the shape of ``k``.

        ``log Catalan(k) + k log(lam) + (k + 1) log(1 - lam)``, less ``log(lam)`` for ``k >= 1``
        and ``-inf`` at ``k = 0`` when the root always splits.
        """
        k = jnp.asarray(k, jnp.float32)
        lam = self.split_prob
        log_catalan = gammaln(2 * k + 1) - gammaln(k + 1) - gammaln(k + 2)
        lp = log_catalan + k * jnp.log(lam) + (k + 1) * jnp.log1p(-lam)
        if self.root_splits:
            lp = jnp.where(k >= 1, lp - jnp.log(lam), -jnp.inf)
        return lp

    def n_internal_log_prob_np(self, max_internal: int) -> np.ndarray:
        """:meth:`n_internal_log_prob` in float64 (NumPy, SciPy) for ``k = 0..max_internal``."""
        from scipy.special import gammaln as sgammaln

        lam = float(self.split_prob)
        k = np.arange(int(max_internal) + 1, dtype=np.float64)
        lp = sgammaln(2 * k + 1) - sgammaln(k + 1) - sgammaln(k + 2) + k * np.log(lam) + (k + 1) * np.log1p(-lam)
        if self.root_splits:
            lp = np.where(k >= 1, lp - np.log(lam), -np.inf)
        return lp

    def mean_n_internal(self) -> float:
        """Mean number of internal nodes: ``lam / (1 - 2 lam)``, or ``1 / (1 - 2 lam)`` when the root splits."""
        lam = float(self.split_prob)
        return (1.0 if self.root_splits else lam) / (1.0 - 2.0 * lam)

    def truncated_mass(self, max_internal: int) -> float:
        """``P(I > max_internal)`` in float64: ``1 - sum_{k <= max_internal} P(I = k)`` (the full sum is 1)."""
        lp = self.n_internal_log_prob_np(max_internal)
        return float(max(0.0, 1.0 - np.exp(lp).sum()))

    def log_split(self, depth):
        d = jnp.asarray(depth)
        base = jnp.full(d.shape, math.log(self.split_prob), jnp.float32)
        return jnp.where((d == 0) & self.root_splits, 0.0, base)

    def log_stop(self, depth):
        d = jnp.asarray(depth)
        base = jnp.full(d.shape, math.log1p(-self.split_prob), jnp.float32)
        return jnp.where((d == 0) & self.root_splits, -jnp.inf, base)


@dataclass(frozen=True)
class LeafCountPrior(_Base):
    """The BCART-PCFG prior (Sullivan et al. 2023): ``Pr[T] ∝ phi^-leaves(T)`` over trees whose nodes are non-empty.

    Every distinct tree is counted once, so the split rules are not part of the
    prior (``rule_in_prior = False``); growing a leaf multiplies the prior by
    ``1 / phi``.  The normalising constant depends on the data (which trees
    have non-empty nodes); the PCFG programme computes it, samplers never need it.

    Parameters
    ----------
    log_phi : float, finite
    """

    log_phi: float = 2.0

    rule_in_prior: ClassVar[bool] = False

    def check(self) -> "LeafCountPrior":
        check_finite("log_phi", self.log_phi)
        return self

    def log_split(self, depth):
        # an internal node has two children where a leaf had one: one more leaf, one more factor 1/phi
        return jnp.full(jnp.shape(depth), -self.log_phi, jnp.float32)

    def log_stop(self, depth):
        return jnp.zeros(jnp.shape(depth), jnp.float32)

    def log_prior(self, tree: Tree, log_rule_prob=None):
        """Unnormalised ``-log_phi * leaves(T)``."""
        return -self.log_phi * jnp.sum(tree.is_leaf(), -1).astype(jnp.float32)


TreePrior = ChipmanPrior | DepthDecayPrior | CodeStringPrior | LeafCountPrior


def _register_params(cls, fields):
    """Make ``cls`` a pytree whose leaves are its numeric parameters ``fields``.

    A sampler can then take the prior as a traced argument: fits that differ only in the prior's
    values share one compilation.  Unflattening skips the constructor's checks (the leaves may be
    tracers); the values were checked when the user's object was built."""

    def flatten(p):
        return tuple(getattr(p, f) for f in fields), None

    def unflatten(_, leaves):
        obj = object.__new__(cls)
        for f, v in zip(fields, leaves):
            object.__setattr__(obj, f, v)
        return obj

    jax.tree_util.register_pytree_node(cls, flatten, unflatten)


for _cls, _fields in ((ChipmanPrior, ("alpha", "beta")), (DepthDecayPrior, ("delta",)),
                      (LeafCountPrior, ("log_phi",))):
    _register_params(_cls, _fields)


def traced_params(prior, dtype):
    """``prior`` with its parameters as ``dtype`` arrays (a pytree for a compiled sampler's arguments)."""
    return jax.tree_util.tree_map(lambda v: jnp.asarray(v, dtype), prior)


def canonical(prior):
    """The prior's kind with default values: what a compiled sampler keeps as a static setting when the
    values themselves come in through :func:`traced_params`."""
    return type(prior)()
