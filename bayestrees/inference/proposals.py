"""The one proposal module of the tree samplers: grow, prune, change, swap and slide on heap trees.

Every Metropolis-Hastings tree move of the library is drawn here: Bayesian CART's and BET's moves
and sweep (:mod:`bayestrees.inference.moves`, on :class:`~bayestrees.tree.Tree`), and the visits of
sums of trees (BART, :mod:`bayestrees.inference.bart.kernel`, and the tree functions inside user
models, :mod:`bayestrees.inference.treefn`, on compact ``(feature, threshold)`` heaps).  What the
families differ in is the rule prior, a parameter of the pieces here: the node's code ranges
``lo``/``hi`` (the data-dependent ranges of the node's rows, or the ancestor intervals of
:mod:`bayestrees.inference.intervals`) and the split variables' weights (uniform, BET's ``xi``,
the sparse prior's ``s``).

* :func:`pick` / :func:`pick_weighted`: an index among a mask's set entries, from one uniform
  (the inverse distribution function) or from a vector of them (the Gumbel-max choice);
* :func:`node_masks`: the nodes each move applies to;
* :func:`draw_rule`: a rule at a node from its ranges;
* :func:`set_rules`: the rules of the proposed tree, for each move but rotate (:func:`rotate`);
* :func:`propose`: the whole proposal of a compact tree under the interval prior, with the data-free
  part of its log acceptance ratio (the prior of ``T'`` updated in ``O(D d)``).

Notes
-----
Proposal ratios (``G(T)``: growable leaves, ``N(T)``: internal nodes whose
children are both leaves, ``I(T)``: internal nodes, ``P(T)``: internal
parent-child pairs, ``nvar(s)``, ``nthr(s, j)``: valid variables and thresholds
at node ``s``; the move-type probabilities of grow and prune are equal and
cancel):

* grow leaf ``s`` with rule ``(j, t)``: ``q(T'|T) = 1/|G(T)| * 1/nvar(s) * 1/nthr(s, j)``;
  the reverse prune picks ``s`` among ``N(T')``: ``q(T|T') = 1/|N(T')|``.
* prune ``s``: ``q(T'|T) = 1/|N(T)|``; reverse: ``1/|G(T')| * 1/nvar'(s) * 1/nthr'(s, j_old)``
  (the ranges of ``s`` are the same in ``T`` and ``T'``).
* change the rule of internal ``s`` from ``(j, t)`` to ``(j', t')``: ``s``'s ranges do
  not change, so ``q(T|T')/q(T'|T) = nthr(s, j') / nthr(s, j)``.
* slide (BART's local change): a node whose children are leaves keeps its variable and moves its
  threshold by ``1 .. K`` codes either way, or at an unordered variable moves one of the node's
  categories ``A`` (uniform among them) to the other side (refused where that leaves one side
  empty); the proposal is symmetric.
* swap the rules of an internal parent ``p`` and internal child ``c`` (and of
  ``c``'s sibling too when it holds the same rule as ``c``): the shape does not
  change, the pair set is the same in ``T'``, the ratio is 1.  A swap whose
  reverse would not return (the sibling already holds ``p``'s rule) is refused.
* rotate (:func:`rotate`; a partition-preserving move in the spirit of Pratola 2016): an internal
  child ``c`` whose parent ``p`` splits the same variable takes ``p``'s place, ``p``'s rule going
  one level down, and the subtrees below are re-hung so that every leaf keeps its rows.  The tree
  ``x <= 0``, then ``x <= 1`` on the right, becomes ``x <= 1``, then ``x <= 0`` on the left: the
  same three cells, and from there a prune reaches the stump ``x <= 1`` that the first tree could
  reach only through a far less probable stump.  The set of such (parent, child) pairs maps one to
  one between ``T`` and ``T'`` (a pair of ``T'`` is a pair of ``T`` with its nodes renamed), so
  the proposal is symmetric and the ratio is the prior's alone; a rotation that would push a split
  below ``max_depth`` is refused (its reverse is not).

With split-variable weights ``xi`` the variable is drawn with probability ``xi_j / sum_valid xi``
and ``1/nvar(s)`` above becomes that probability.

An unordered categorical variable (``data.categories``: :mod:`bayestrees.inference.intervals`) whose
node keeps the categories ``A`` has ``2^|A| - 2`` rules in the prior (the nonempty proper subsets
sent left).  Its rule is drawn as ``|A|`` fair bits, one per category, from the threshold's uniform
(exact up to 23 categories), and a draw of every category or none proposes no move, so the proposal
probability of a rule is ``2^-|A|`` where the prior's is ``1 / (2^|A| - 2)``: the ratios above
take ``2^|A|`` for ``nthr`` in ``q`` and ``2^|A| - 2`` in the prior.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import random_bits
from . import heap
from . import intervals

__all__ = ["Proposal", "N_UNIFORMS", "MOVE_NAMES", "rotates", "rotation_sites", "rotate", "rotated_if", "MAX_SUBSET_CATEGORIES", "CATEGORY_BITS", "deposit_bits", "subset_rule", "log_proposal_count", "check_move_probs", "pick",
           "pick_weighted", "node_masks", "draw_rule", "set_rules", "propose"]

#: uniforms per tree and step of :func:`propose`: move type, threshold, node, variable
N_UNIFORMS = 4
#: the move types of :func:`propose`, in the order of ``move_probs`` (a 4-tuple leaves rotate out)
MOVE_NAMES = ("grow", "prune", "change", "swap", "rotate")


def check_move_probs(move_probs, grow: bool = False) -> tuple:
    """``move_probs`` as a tuple of floats; ``ValueError`` unless they are 4 or 5 probabilities (grow,
    prune, change, swap and optionally rotate: :data:`MOVE_NAMES`) summing to 1 with grow = prune (their
    ratio is not in the acceptance), and with ``grow`` true, grow above 0 (a kernel that must be able to
    change the tree's size)."""
    try:
        mp = tuple(float(p) for p in move_probs)
    except (TypeError, ValueError):
        mp = ()
    if len(mp) not in (4, 5) or min(mp) < 0 or abs(sum(mp) - 1.0) > 1e-6 or abs(mp[0] - mp[1]) > 1e-12 \
            or (grow and mp[0] == 0):
        raise ValueError(f"move_probs must be 4 or 5 probabilities (grow, prune, change, swap[, rotate]) summing to 1 "
                         f"with grow = prune{' > 0' if grow else ''}, got {move_probs!r}")
    return mp


def rotates(move_probs) -> bool:
    """Whether ``move_probs`` (4 or 5 entries) can draw a rotation."""
    return len(move_probs) > 4 and move_probs[4] > 0


def pick(u, mask):
    """A uniform index among ``mask``'s set entries, and their number ``k``; index 0 when none is set.

    ``u`` one uniform: the ``floor(u k)``-th set entry (:func:`_pick_one`); ``u`` uniforms of
    ``mask``'s shape: the entry with the largest Gumbel variate (:func:`bayestrees.random_bits.gumbel`).
    """
    if jnp.ndim(u) > 0:
        return jnp.argmax(jnp.where(mask, random_bits.gumbel(u), -jnp.inf)).astype(jnp.int32), jnp.sum(mask)
    return _pick_one(u, mask)


def pick_weighted(u, mask, log_w):
    """An index among ``mask`` with probability ``w_j / sum_mask w``, from one uniform ``u`` (the
    weights normalised in log space, so that tiny ones neither underflow nor cancel) or from
    uniforms of ``mask``'s shape (the Gumbel-max choice shifted by ``log_w``)."""
    if jnp.ndim(u) > 0:
        return jnp.argmax(jnp.where(mask, random_bits.gumbel(u) + log_w, -jnp.inf)).astype(jnp.int32)
    x = jnp.where(mask, log_w, -jnp.inf)
    mx = jnp.max(x)
    return _pick_weighted_one(u, mask, jnp.exp(jnp.where(mask, x - jnp.where(jnp.isfinite(mx), mx, 0.0), -jnp.inf)))


#: masks longer than this are searched by :func:`pick` as 32-bit words (below, a cumulative sum is cheaper)
_PICK_WORDS_FROM = 32


def _pick_one(u, mask):
    """A uniform index among ``mask`` from one uniform ``u`` (the ``floor(u k)``-th of the ``k`` set
    entries) and ``k``; index 0 when none is set.

    A long mask is packed into 32-bit words: the word that holds the entry is found from the words'
    bit counts, and the entry within it by halving the word five times, counting the set bits of
    the lower half.  XLA's cumulative sum on the CPU (a reduce-window) cost more for the masks of a
    BART proposal (:func:`propose`, vmapped over the trees: ``docs/lab-notes/bart.md``); the index
    is the same.
    """
    L = mask.shape[0]
    if L <= _PICK_WORDS_FROM:
        c = jnp.cumsum(mask.astype(jnp.int32))
        k = c[-1]
        target = jnp.minimum(jnp.floor(u * k).astype(jnp.int32), jnp.maximum(k - 1, 0))
        return jnp.argmax(c > target).astype(jnp.int32), k
    n_words = -(-L // 32)
    bits = jnp.pad(mask, (0, 32 * n_words - L)).reshape(n_words, 32).astype(jnp.uint32)
    words = jnp.sum(bits << jnp.arange(32, dtype=jnp.uint32), axis=1, dtype=jnp.uint32)
    per_word = jax.lax.population_count(words).astype(jnp.int32)
    c = jnp.cumsum(per_word)
    k = c[-1]
    target = jnp.minimum(jnp.floor(u * k).astype(jnp.int32), jnp.maximum(k - 1, 0))
    wi = jnp.argmax(c > target).astype(jnp.int32)
    rank = target - (c[wi] - per_word[wi])          # the entry's rank among its word's set bits
    word, pos = words[wi], jnp.zeros((), jnp.int32)
    for width in (16, 8, 4, 2, 1):
        low = jax.lax.population_count((word >> pos.astype(jnp.uint32)) & jnp.uint32((1 << width) - 1))
        low = low.astype(jnp.int32)
        up = rank >= low                             # the entry lies above the lower `width` bits
        pos, rank = jnp.where(up, pos + width, pos), jnp.where(up, rank - low, rank)
    return jnp.where(k > 0, 32 * wi + pos, 0).astype(jnp.int32), k


def _pick_weighted_one(u, mask, w):
    """An index among ``mask`` with probability ``w_j / sum_mask w`` from one uniform ``u``."""
    c = jnp.cumsum(jnp.where(mask, w, 0.0))
    hit = c > u * c[-1]
    last = jnp.argmax(jnp.where(mask, jnp.arange(mask.shape[0]), -1))
    return jnp.where(jnp.any(hit), jnp.argmax(hit), last).astype(jnp.int32)



class Proposal(NamedTuple):
    """One tree's proposal: the move, the proposed tree and the data-free part of its log ratio."""

    kind: jax.Array        # int32: 0 grow, 1 prune, 2 change, swap or rotate (the subtree's rows routed again)
    move: jax.Array        # int32: index into MOVE_NAMES
    ok: jax.Array          # the move is possible and the proposed tree has prior mass
    node: jax.Array        # int32: the grown / pruned node, or the top of the changed subtree
    var: jax.Array         # int32: the grown rule's variable
    thr: jax.Array         # int32: the grown rule's threshold
    feature: jax.Array     # int32 (S,): T'
    threshold: jax.Array   # int32 (S,)
    leaf_old: jax.Array    # bool (S,): leaves of T
    leaf_new: jax.Array    # bool (S,): leaves of T'
    log_ratio: jax.Array   # log p(T') - log p(T) + log q(T | T') - log q(T' | T)
    log_prior: jax.Array   # log p(T')
    avail: jax.Array       # (S,): T''s available variables per slot

def node_masks(internal, is_leaf, can_split):
    """The nodes each move applies to, bool (S,) each: growable leaves (``can_split``: below the
    depth limit with a variable left to split), internal nodes whose children are both leaves
    (prune, slide), internal nodes (change), internal nodes with an internal parent (swap)."""
    S = internal.shape[-1]
    lc, rc, par, _ = heap.slot_tables(S)
    return (is_leaf & can_split, internal & ~internal[lc] & ~internal[rc], internal,
            internal & (np.arange(S) > 0) & internal[par])


def draw_rule(u_var, u_thr, lo, hi, log_w=None):
    """A rule at a node whose code ranges are ``lo``/``hi`` (d,): the variable uniform among those
    with a threshold (``hi > lo``; by weight given the log weights ``log_w``), the threshold
    uniform among its ``hi - lo`` codes.  ``u_var`` is one uniform or ``d``; ``u_thr`` one.
    Returns ``(j, t, nthr)``, ``nthr`` (d,) the thresholds of every variable."""
    nthr = jnp.maximum(hi - lo, 0)
    j = pick(u_var, nthr > 0)[0] if log_w is None else pick_weighted(u_var, nthr > 0, log_w)
    cnt = jnp.maximum(nthr[j], 1)
    t = (lo[j] + jnp.minimum(jnp.floor(u_thr * cnt).astype(jnp.int32), cnt - 1)).astype(jnp.int32)
    return j, t, nthr


def set_rules(f, t, move, s, j, tn):
    """The rules ``(feature, threshold)`` of the proposed tree, for move ``move`` (0 grow, 1 prune,
    2 change or slide, 3 swap) at node ``s`` with rule ``(j, tn)``: up to three slots set (a
    swap's parent, child and the child's twin sibling).  Returns ``(top, f', t', bad_swap)``:
    the highest slot changed and whether a swap is refused (its reverse would not return)."""
    S = f.shape[-1]
    internal = f >= 0
    c, p = s, jnp.maximum((s - 1) // 2, 0)
    sib = jnp.where(s % 2 == 1, s + 1, s - 1)
    sib_int = internal[jnp.clip(sib, 0, S - 1)] & (s > 0)
    same = sib_int & (f[sib] == f[c]) & (t[sib] == t[c])
    is_swap, is_prune = move == 3, move == 1
    top = jnp.where(is_swap, p, s)
    f0 = jnp.where(is_swap, f[c], jnp.where(is_prune, -1, j))
    t0 = jnp.where(is_swap, t[c], jnp.where(is_prune, 0, tn))
    slots = jnp.stack([top, jnp.where(is_swap, c, S), jnp.where(is_swap & same, sib, S)])
    fn = f.at[slots].set(jnp.stack([f0, f[p], f[p]]), mode="drop")
    tn_ = t.at[slots].set(jnp.stack([t0, t[p], t[p]]), mode="drop")
    bad_swap = is_swap & ((sib_int & ~same & (f[sib] == f[p]) & (t[sib] == t[p])) | ((f[p] == f[c]) & (t[p] == t[c])))
    return top, fn, tn_, bad_swap


def rotation_sites(f):
    """Internal nodes whose parent is internal and splits the same variable, bool (S,): the nodes a
    rotation (:func:`rotate`) can lift above their parent."""
    S = f.shape[-1]
    _, _, par, _ = heap.slot_tables(S)
    return (f >= 0) & (np.arange(S) > 0) & (f == f[par])


def rotate(f, t, c, max_depth: int, categories=None):
    """The rules ``(feature, threshold)`` of the tree with the internal node ``c`` lifted above its
    parent ``p``, which splits the same variable, and whether the rotation fits in ``max_depth``.

    ``c`` the right child (``p``: ``x <= a``, ``c``: ``x <= b``, ``a < b``): ``p``'s slot takes ``x <= b``,
    its left child ``x <= a`` with ``p``'s left subtree and ``c``'s left subtree below it, its right
    child ``c``'s right subtree.  ``c`` the left child: the mirror image.  Every leaf keeps its rows
    (the cells are ``x <= a``, ``a < x <= b`` and ``x > b`` in both trees).  At an unordered variable
    the rules are category sets sent left: the new top rule is ``A_p | A_c`` (``c`` right) or ``A_c``
    (``c`` left), the new child's ``A_p`` or ``A_p & ~A_c``.  The subtrees move as wholes, one level down
    or up; the rotation fails where a split would go below ``max_depth``.
    """
    S = f.shape[-1]
    D = max_depth
    idx = jnp.arange(S, dtype=jnp.int32)
    c = jnp.asarray(c, jnp.int32)
    p = jnp.maximum((c - 1) // 2, 0)
    right = c % 2 == 0
    pl, pr_, cl, cr = 2 * p + 1, 2 * p + 2, 2 * c + 1, 2 * c + 2
    a = jnp.where(right, pl, pr_)            # the slot of p's rule in T'
    # the three subtrees hung anew: (slot in T', slot in T)
    moved = ((2 * a + 1, jnp.where(right, pl, cr)), (2 * a + 2, jnp.where(right, cl, pr_)),
             (jnp.where(right, pr_, pl), jnp.where(right, cr, cl)))
    src = idx
    depth_i = heap.depth_of(idx)
    for dst, orig in moved:
        k = jnp.maximum(depth_i - heap.depth_of(dst), 0)
        at = ((orig + 1) << k) - 1 + (idx + 1 - ((dst + 1) << k))
        src = jnp.where(heap.in_subtree(idx, dst), at, src)
    has = src < S                            # (p's and a's own slots are set below)
    at_src = jnp.minimum(src, S - 1)
    fn = jnp.where(has, f[at_src], -1)
    tn = jnp.where(has, t[at_src], 0)
    top_t, low_t = t[c], t[p]
    if categories is not None:   # category sets sent left
        cat = categories[jnp.maximum(f[p], 0)] != 0
        top_t = jnp.where(cat & right, t[p] | t[c], top_t)
        low_t = jnp.where(cat & ~right, t[p] & ~t[c], low_t)
    fn = fn.at[jnp.stack([p, a])].set(jnp.stack([f[p], f[p]]), mode="drop")
    tn = tn.at[jnp.stack([p, a])].set(jnp.stack([top_t, low_t]).astype(t.dtype), mode="drop")
    fits = (jnp.sum(fn >= 0) == jnp.sum(f >= 0)) & jnp.all(jnp.where(fn >= 0, depth_i < D, True))
    return fn.astype(f.dtype), tn.astype(t.dtype), fits


def rotated_if(move, s, f, t, top, fn, tn, max_depth: int, categories=None):
    """:func:`set_rules`'s ``(top, f', t')`` for move ``move``, with a rotation (move 4) of the node ``s``
    in their place (its top the parent), and whether the move fits in ``max_depth`` (only a rotation
    can fail to)."""
    f_rot, t_rot, fits = rotate(f, t, s, max_depth, categories)
    is_rot = move == 4
    top = jnp.where(is_rot, jnp.maximum((s - 1) // 2, 0), top)
    return top, jnp.where(is_rot, f_rot, fn), jnp.where(is_rot, t_rot, tn), ~is_rot | fits


def deposit_bits(r, mask):
    """The bits of ``r`` placed, lowest first, at the set bits of ``mask`` (int32, bits below :data:`CATEGORY_BITS`):
    the category subset whose ``k``-th category of ``mask`` is in it when bit ``k`` of ``r`` is set."""
    b = jnp.arange(CATEGORY_BITS, dtype=jnp.int32)
    inm = (mask >> b) & 1
    rank = jnp.cumsum(inm) - inm
    return jnp.sum(((r >> rank) & inm) << b).astype(jnp.int32)


def subset_rule(u, mask, n_cat, categorical, threshold):
    """An unordered variable's rule from the uniform ``u``: a fair bit for each of the ``n_cat``
    categories of ``mask`` (the categories at the node), the set bits sent left.  Returns
    ``(threshold', fair)``: the category mask where ``categorical`` (``threshold`` elsewhere) and
    whether the draw was a proper subset (a draw of every category or none proposes no move)."""
    r = jnp.minimum(jnp.floor(u * jnp.exp2(n_cat.astype(jnp.float32))).astype(jnp.int32), (1 << n_cat) - 1)
    fair = ~categorical | ((r != 0) & (r != (1 << n_cat) - 1))
    return jnp.where(categorical, deposit_bits(r, mask), threshold).astype(jnp.int32), fair


def log_proposal_count(nthr, categorical, dtype=jnp.float32):
    """``-log`` of the proposal probability of one rule given its variable, ``nthr`` its cut points
    (``hi - lo``): ``log nthr`` for an ordered variable, ``(nthr + 1) log 2`` (fair bits, one per
    category) for an unordered one (the prior's count is :func:`bayestrees.inference.intervals.log_rule_count`)."""
    return jnp.where(categorical, (nthr + 1).astype(dtype) * jnp.log(2.0),
                     jnp.log(jnp.maximum(nthr, 1).astype(dtype))).astype(dtype)


#: the most categories an unordered variable's rules are drawn over exactly (fair bits of a float32 uniform)
MAX_SUBSET_CATEGORIES = 23
#: the bits a category mask may set: codes ``0 .. 23`` (a tree function's missing category is 23;
#: such masks are exact in a float32)
CATEGORY_BITS = 24


def propose(u, f, t, lp, avail, data, cfg, dtype, w=None) -> Proposal:
    """The proposal for one compact tree ``(f, t)`` under the ancestor-interval rule prior.

    ``lp`` is the tree's log prior and ``avail`` its available variables per slot; ``u`` holds
    :data:`N_UNIFORMS` uniforms (move type, threshold, node, variable); ``w`` the split variables'
    log weights (the sparse prior) or None.  ``data`` gives ``prior`` (the traced depth prior, or
    None for ``cfg.prior``), ``code_lo`` and ``code_hi``; ``cfg`` gives ``capacity``, ``max_depth``,
    ``prior``, ``move_probs`` and ``slide`` (:class:`bayestrees.inference.bart.kernel.BARTData` and
    ``KernelConfig``), and ``categories`` (unordered variables' root category masks, or None).
    """
    mc = cfg
    S, D = mc.capacity, mc.max_depth
    lc, rc, _, depth = heap.slot_tables(S)
    prior = mc.prior if data.prior is None else data.prior
    lo0, hi0 = data.code_lo, data.code_hi
    categories = getattr(data, "categories", None)
    internal = f >= 0
    is_leaf = heap.leaf_slots(f)
    growable, nog, _, pair = node_masks(internal, is_leaf, (depth < D) & (avail > 0))
    cum = np.cumsum(mc.move_probs)
    move = jnp.sum(u[0] >= jnp.asarray(cum[:-1], jnp.float32)).astype(jnp.int32)  # never a type of probability 0
    move = jnp.where(jnp.asarray(mc.move_probs)[move] > 0, move, jnp.argmax(jnp.asarray(mc.move_probs) > 0))
    slide = cfg.slide > 0
    rot = rotates(mc.move_probs)
    masks = [growable, nog, nog if slide else internal, pair] + ([rotation_sites(f)] if rot else [])
    mask = jnp.stack(masks)[move]
    s, k = pick(u[2], mask)
    # the rule: variable uniform (or by weight) among those with a cut point left, threshold uniform
    lo_s, hi_s = intervals.node_interval(f, t, lo0, hi0, s, D, categories)
    j, tn, nthr = draw_rule(u[3], u[1], lo_s, hi_s, w)
    fair = jnp.array(True)
    if categories is not None:   # an unordered variable's rule: a fair bit per category of the node, not all equal
        A_s = intervals.node_categories(f, t, categories, s, D)
        tn, fair = subset_rule(u[1], A_s[j], nthr[j] + 1, categories[j] != 0, tn)
    if w is None:
        a_here = jnp.sum(nthr > 0).astype(dtype)                  # = avail[s] at a node
        log_avail = jnp.log(jnp.where(a_here > 0, a_here, 1.0))
        log_w = lambda v: jnp.zeros((), dtype)  # noqa: E731
    else:
        log_avail = jnp.where(jnp.any(nthr > 0), intervals.log_available_weight(lo_s, hi_s, w.astype(dtype)), 0.0)
        log_w = lambda v: w[v].astype(dtype)  # noqa: E731
    in_range = jnp.array(True)
    if slide:   # a slide keeps s's variable and moves its threshold by 1 .. K codes either way
        K = int(cfg.slide)
        is_slide = move == 2
        step = jnp.minimum(jnp.floor(u[1] * (2 * K)).astype(jnp.int32), 2 * K - 1)
        j = jnp.where(is_slide, jnp.maximum(f[s], 0), j).astype(jnp.int32)
        t_slide = t[s] + jnp.where(step < K, step - K, step - K + 1)
        tn = jnp.where(is_slide, t_slide, tn).astype(jnp.int32)
        in_range = ~is_slide | ((t_slide >= lo_s[j]) & (t_slide < hi_s[j]))
        if categories is not None:   # at an unordered variable a slide moves one category to the other side
            A_j = A_s[j]
            n_a = intervals.popcount(A_j)
            pick_c = jnp.minimum(jnp.floor(u[1] * n_a.astype(jnp.float32)).astype(jnp.int32), jnp.maximum(n_a - 1, 0))
            t_flip = t[s] ^ deposit_bits(jnp.left_shift(1, pick_c), A_j)
            flip = is_slide & (categories[j] != 0)
            tn = jnp.where(flip, t_flip, tn).astype(jnp.int32)
            in_range = jnp.where(flip, (t_flip != 0) & (t_flip != A_j), in_range)
            fair = fair | is_slide
    # minus the log of the rule's probability given the node and variable, up to log avail:
    # in the prior (log_nthr) and in the proposal (log_qthr), less log w_v
    if categories is None:
        log_nthr = lambda v: jnp.log(jnp.maximum(nthr[v], 1).astype(dtype)) - log_w(v)  # noqa: E731
        log_qthr = log_nthr
    else:
        log_nthr = lambda v: intervals.log_rule_count(nthr[v], categories[v] != 0, dtype) - log_w(v)  # noqa: E731
        log_qthr = lambda v: log_proposal_count(nthr[v], categories[v] != 0, dtype) - log_w(v)  # noqa: E731
    slot0, fn, tn_, bad_swap = set_rules(f, t, move, s, j, tn)
    fits = jnp.array(True)
    if rot:   # a rotation lifts s above its parent
        slot0, fn, tn_, fits = rotated_if(move, s, f, t, slot0, fn, tn_, D, categories)
    sib = jnp.clip(jnp.where(s % 2 == 1, s + 1, s - 1), 0, S - 1)
    # T''s prior, available variables and leaves.  A grow or a prune changes them only at the node
    # and its children: the children's available variables are the node's, less the split variable
    # where its side of the cut has no cut point left (O(d) from the node's interval)
    ds = jnp.asarray(depth)[s]
    a_s = avail[s]
    ic, jc = jnp.minimum(2 * s + 1, S - 1), jnp.minimum(2 * s + 2, S - 1)
    lstop = lambda dd, av: jnp.where((dd >= D) | (av <= 0), 0.0, prior.log_stop(dd)).astype(dtype)  # noqa: E731
    log_rule = lambda v: (prior.log_split(ds).astype(dtype) - jnp.log(jnp.where(a_s > 0, a_s, 1.0))  # noqa: E731
                          - log_nthr(v))
    had = (nthr[j] > 0).astype(dtype)
    left_cuts, right_cuts = tn - lo_s[j], hi_s[j] - tn - 1
    if categories is not None:   # an unordered variable's children keep the categories sent to them
        cat_j = categories[j] != 0
        left_cuts = jnp.where(cat_j, intervals.popcount(tn) - 1, left_cuts)
        right_cuts = jnp.where(cat_j, intervals.popcount(A_s[j] & ~tn) - 1, right_cuts)
    a_l = a_s - had + (left_cuts > 0).astype(dtype)
    a_r = a_s - had + (right_cuts > 0).astype(dtype)
    jo = jnp.maximum(f[s], 0)
    lp_grow = lp - lstop(ds, a_s) + log_rule(j) + lstop(ds + 1, a_l) + lstop(ds + 1, a_r)
    lp_prune = lp + lstop(ds, a_s) - log_rule(jo) - lstop(ds + 1, avail[ic]) - lstop(ds + 1, avail[jc])
    kids = jnp.stack([2 * s + 1, 2 * s + 2])
    avail_grow = avail.at[kids].set(jnp.stack([a_l, a_r]).astype(avail.dtype), mode="drop")
    avail_prune = avail.at[kids].set(0.0, mode="drop")
    leaf_grow = is_leaf.at[s].set(False).at[kids].set(True, mode="drop")
    leaf_prune = is_leaf.at[s].set(True).at[kids].set(False, mode="drop")
    sib_leaf = is_leaf[sib] & (s > 0)       # then the parent leaves N(T) when s grows
    n_nog_new = jnp.sum(nog) + 1 - sib_leaf.astype(jnp.int32)
    n_growable_new = jnp.sum(growable) - growable[ic] - growable[jc] + 1
    lp_new = jnp.where(move == 0, lp_grow, lp_prune)
    avail_new = jnp.where(move == 0, avail_grow, avail_prune)
    leaf_new = jnp.where(move == 0, leaf_grow, leaf_prune)
    if slide:   # s pruned, then grown again with the new rule: the same leaves, s's children rescored
        lp_new = jnp.where(move == 2, lp_grow + lp_prune - lp, lp_new)
        avail_new = jnp.where(move == 2, avail_grow, avail_new)
        leaf_new = jnp.where(move == 2, is_leaf, leaf_new)
    rules_ok = jnp.array(True)
    if w is not None:   # the sparse prior: T' scored in full, its node weights in log space (O(S D d))
        lp_f, avail_f, internal_f, leaf_f, rules_ok, _ = intervals.log_tree_prior_weighted(fn, tn_, lo0, hi0, prior, D, w,
                                                                                   dtype=dtype, categories=categories)
        lp_new, avail_new, leaf_new = lp_f, avail_f.astype(avail.dtype), leaf_f
        n_growable_new = jnp.sum(leaf_f & (depth < D) & (avail_f > 0))
        n_nog_new = jnp.sum(internal_f & ~internal_f[lc] & ~internal_f[rc])
    elif rot or (not slide and mc.move_probs[2] + mc.move_probs[3] > 0):   # a change, swap or rotation re-scores in full
        lp_f, avail_f, _, leaf_f, ok_f = intervals.log_tree_prior(fn, tn_, lo0, hi0, prior, D, dtype=dtype,
                                                                  categories=categories)
        local = (move < 2) | ((move == 2) & slide)
        lp_new = jnp.where(local, lp_new, lp_f)
        avail_new = jnp.where(local, avail_new, avail_f.astype(avail.dtype))
        leaf_new = jnp.where(local, leaf_new, leaf_f)
        rules_ok = local | ok_f
    logk = lambda x: jnp.log(jnp.maximum(x, 1).astype(dtype))  # noqa: E731
    # log q(T | T') - log q(T' | T) per move type (module Notes); s's interval is the same in T and T'
    lq = jnp.stack([
        -logk(n_nog_new) + logk(k) + log_avail + log_qthr(j),              # grow
        -logk(n_growable_new) - log_avail - log_qthr(f[s]) + logk(k),      # prune
        jnp.zeros((), dtype) if slide else log_qthr(j) - log_qthr(jnp.maximum(f[s], 0)),   # change (a slide: symmetric)
        jnp.zeros((), dtype),                                               # swap
        jnp.zeros((), dtype)])[move]                                        # rotate (module Notes)
    ok = (k > 0) & rules_ok & ~bad_swap & in_range & fits & ((move == 1) | (move >= 3) | ((nthr[j] > 0) & fair))
    kind = jnp.minimum(move, 2).astype(jnp.int32)
    return Proposal(kind=kind, move=move, ok=ok, node=slot0.astype(jnp.int32), var=j, thr=tn, feature=fn,
                     threshold=tn_, leaf_old=is_leaf, leaf_new=leaf_new, log_ratio=(lp_new - lp + lq).astype(dtype),
                     log_prior=lp_new.astype(dtype), avail=avail_new.astype(dtype))
