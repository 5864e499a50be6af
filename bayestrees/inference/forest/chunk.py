"""One chunk of a forest fit: weight draws and the CART fit of a few trees.

This module sits below both :mod:`~bayestrees.inference.forest.bootstrap` (which plans a forest fit and
hands out chunks) and :mod:`~bayestrees.inference.forest.workers` (whose processes fit chunks), so that
the two import it and not each other.  The same :func:`fit_chunk` runs in the calling process and
in worker processes, so a tree does not depend on where it was fitted.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from ...sharding import shard_batch
from .cart import fit_trees

__all__ = ["WEIGHT_KINDS", "draw_weights", "fit_chunk"]

WEIGHT_KINDS = ("exponential", "multinomial", "none")


def draw_weights(key, n: int, kind: str, dtype=jnp.float32, mask=None, n_valid=None) -> jax.Array:
    """One weight vector of length ``n``.

    Parameters
    ----------
    key : PRNG key
    n : int
        Number of rows.
    kind : str
        One of ``WEIGHT_KINDS``: ``"exponential"`` (Bayesian bootstrap, i.i.d. Exp(1)),
        ``"multinomial"`` (classical bootstrap counts) or ``"none"`` (unit weights).
    dtype : dtype, optional
        Floating dtype of the weights.
    mask : array of shape (n,), optional
        Multiplied into the weights.
    n_valid : int or int array, optional
        Only the first ``n_valid`` rows are data (traced: one compilation serves every count); the
        rest are padding and get weight 0.  The data rows' weights are those of
        ``draw_weights(key, n_valid, kind)``: every row's draw depends on its position only
        (JAX's partitionable threefry), and the bootstrap draws ``n_valid`` indices among them.

    Returns
    -------
    jax.Array of shape (n,)
    """
    nv = n if n_valid is None else n_valid
    real = jnp.arange(n) < nv
    if kind == "exponential":
        # floored at the smallest normal float: a draw of exactly 0 (probability 2^-24 per row in
        # float32) would drop a row that the Bayesian bootstrap keeps
        w = jnp.maximum(jax.random.exponential(key, (n,), dtype), jnp.finfo(dtype).tiny)
    elif kind == "multinomial":
        idx = jax.random.randint(key, (n,), 0, nv, dtype=jnp.int32)
        w = jnp.zeros(n, dtype).at[jnp.where(real, idx, n)].add(1.0, mode="drop")
    elif kind == "none":
        w = jnp.ones(n, dtype)
    else:
        raise ValueError(f"weights must be one of {WEIGHT_KINDS}, got {kind!r}")
    if n_valid is not None:
        w = jnp.where(real, w, 0)
    if mask is not None:
        w = w * mask
    return w


def _draw_chunk(key, c, n, kind, dtype, chunk, block_of_row, n_blocks, n_valid):
    """Weights (chunk, n) and seeds (chunk,) of the trees ``c * chunk + [0, chunk)``.

    Each tree's randomness is ``fold_in(key, tree index)``, so a tree's draw depends on its index
    only (not on the chunk size or the number of trees), and one compilation serves every forest
    size.  Only the first ``n_valid`` rows are real (traced: one compilation serves every row count
    of a padding bucket); the rest (padding) get 0.
    Tree ``t`` of a sub-sample forest keeps only the rows of block ``t % n_blocks``.
    """
    tree = c * chunk + jnp.arange(chunk)

    def one(t):
        kw, ks = jax.random.split(jax.random.fold_in(key, t))
        w = draw_weights(kw, n, kind, dtype, n_valid=n_valid)
        if block_of_row is not None:
            w = w * (block_of_row == t % n_blocks).astype(dtype)
        return w, jax.random.bits(ks, (), jnp.uint32)

    return jax.vmap(one)(tree)


_draw_chunk_jit = jax.jit(_draw_chunk, static_argnums=(2, 3, 4, 5))


def fit_chunk(job: dict, c: int):
    """Trees ``c * chunk + [0, chunk)`` of a forest.

    Parameters
    ----------
    job : dict
        Everything the fit needs, as built by :func:`~bayestrees.inference.forest.bootstrap.fit_forest`:
        ``prep``, ``y``, ``y_rank``, ``cfg``, ``trunk``, ``trunk_row_node``, ``y_shift``,
        ``y_scale``, ``presorted``, ``key``, ``n``, ``weights``, ``dtype``, ``chunk``, ``blocks``,
        ``n_blocks``, ``n_valid`` and ``return_weights``.
    c : int
        Chunk index.

    Returns
    -------
    tuple
        ``(trees, W)``: a Tree with batch shape ``(chunk,)`` and the ``(chunk, n)`` weights, or
        ``None`` in place of the weights unless ``job["return_weights"]``.
    """
    W, seeds = _draw_chunk_jit(job["key"], jnp.asarray(c, jnp.int32), job["n"], job["weights"], job["dtype"],
                               job["chunk"], job["blocks"], jnp.asarray(job["n_blocks"], jnp.int32),
                               jnp.asarray(job["n"] if job["n_valid"] is None else job["n_valid"], jnp.int32))
    W, seeds = shard_batch((W, seeds), job["chunk"])  # trees across devices, where there are several
    t = fit_trees(job["prep"], job["y"], W, job["cfg"], seeds=seeds, trunk=job["trunk"],
                  trunk_row_node=job["trunk_row_node"], y_shift=job["y_shift"], y_scale=job["y_scale"],
                  presorted=job["presorted"], y_rank=job["y_rank"])
    return t, (W if job["return_weights"] else None)
