"""Gathers and scatters that stay one-dimensional under ``vmap``.

A sampler is written for one chain and ``vmap``-ed over chains.  ``vmap`` turns a gather
``table[idx]`` or a scatter ``init.at[idx].add(vals)`` over per-chain tables into an XLA gather or
scatter with batch dimensions, which the CPU backend runs at about half the speed per element
of the unbatched operation (16 chains of Bayesian CART's row routing: 291 us against 16 x 14 us
for one chain).  The functions here behave like their ``jax.numpy`` counterparts for one chain;
under ``vmap`` (:func:`jax.custom_batching.custom_vmap`) they fold the batch into the index,
``idx + b * len(table)``, and run ONE unbatched gather or scatter on the flattened table (141 us
for the same 16 chains).  Nested ``vmap`` folds each level in turn.  The values are those of the
plain operations (a gather is exact; a scatter-add may add in another order).

They are not differentiable (the samplers never differentiate through them).
"""
from __future__ import annotations

import jax.numpy as jnp
from jax.custom_batching import custom_vmap

__all__ = ["take", "scatter_add", "scatter_max", "cell_sums"]


def _lead(a, batched: bool, size: int):
    """``a`` with a leading batch axis of ``size`` (broadcast when it has none)."""
    return a if batched else jnp.broadcast_to(a, (size,) + a.shape)


def _fold(idx, size: int, n: int):
    """Index ``idx`` (batch leading) into the flattened ``(size * n, ...)`` table."""
    off = (jnp.arange(size, dtype=idx.dtype) * n).reshape((size,) + (1,) * (idx.ndim - 1))
    return idx + off


@custom_vmap
def take(table, idx):
    """``table[idx]`` along axis 0 (indices are clipped into range, as ``jnp.take(mode="clip")``)."""
    return jnp.take(table, idx, axis=0, mode="clip")


@take.def_vmap
def _take_vmap(axis_size, in_batched, table, idx):
    table_b, idx_b = in_batched
    if not table_b:  # one table: the batched indices are just more indices
        return take(table, idx), idx_b
    n = table.shape[1]
    idx = jnp.clip(_lead(idx, idx_b, axis_size), 0, n - 1)  # clip per table, before folding
    return take(table.reshape((-1,) + table.shape[2:]), _fold(idx, axis_size, n)), True


def _scatter(kind: str):
    def plain(init, idx, vals):
        ref = init.at[idx]
        return ref.add(vals, mode="drop") if kind == "add" else ref.max(vals, mode="drop")

    op = custom_vmap(plain)

    @op.def_vmap
    def rule(axis_size, in_batched, init, idx, vals):
        init_b, idx_b, vals_b = in_batched
        n = init.shape[1] if init_b else init.shape[0]
        init = _lead(init, init_b, axis_size)
        idx = _lead(idx, idx_b, axis_size)
        vals = _lead(vals, vals_b, axis_size)
        # negative indices count from the end, as in ``.at[]``; an index out of range drops its
        # update in its own chain (not in the next one)
        idx = jnp.where(idx < 0, idx + n, idx)
        idx = jnp.where((idx >= 0) & (idx < n), _fold(idx, axis_size, n), axis_size * n)
        out = op(init.reshape((-1,) + init.shape[2:]), idx.reshape(-1),
                 vals.reshape((-1,) + vals.shape[idx.ndim:]))
        return out.reshape(init.shape), True

    op.__name__ = op.__qualname__ = f"scatter_{kind}"
    return op


#: ``init.at[idx].add(vals)``, updates at out-of-range indices dropped
scatter_add = _scatter("add")
#: ``init.at[idx].max(vals)``, updates at out-of-range indices dropped
scatter_max = _scatter("max")

#: interleaved copies of the cells that :func:`cell_sums` adds the rows into
_LANES = 8


def cell_sums(cell, x, n_cells: int):
    """``sum_{i: cell_i = c} x_i`` for ``c < n_cells``.  Every ``cell`` must lie in ``[0, n_cells)``
    (not checked: one beyond would be added into a cell of the next copy).

    Row ``i`` is added into copy ``i mod _LANES`` of the cells, and the copies are summed after.
    XLA's scatter on the CPU is a loop of dependent adds, and with trees of a few leaves
    consecutive rows add into the same cell and wait on each other; spread over 8 copies they do
    not (BART's step and the tree functions' visits use it; the measurements are in
    ``docs/lab-notes/bart.md``).  The sums are the same up to float rounding, in another order of the adds
    than one scatter's.  The scatter is :func:`scatter_add`, one unbatched scatter under ``vmap``
    too, which XLA's CPU compiler runs faster than its batched scatter.
    """
    lane = jnp.arange(x.shape[0], dtype=jnp.int32) % _LANES
    spread = scatter_add(jnp.zeros(n_cells * _LANES, x.dtype), cell + n_cells * lane, x)
    return jnp.sum(spread.reshape(_LANES, n_cells), 0)
