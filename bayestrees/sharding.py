"""Spreading a batch axis (trees, chains, draws) over the devices JAX sees.

Every family computes many independent things at once along one leading axis: the trees of a
forest, the chains of an MCMC run, the exact draws of the PCFG posterior.  Where JAX sees
several devices (several GPUs, or CPU devices made with ``jax.config.update(
"jax_num_cpu_devices", k)`` or ``XLA_FLAGS=--xla_force_host_platform_device_count=k``), that
axis is split across them with :mod:`jax.sharding` and the compiled program runs partitioned:
each device computes its share of trees or chains, and no result changes (the batch members
are independent, each with its own random key).

The axis is split only when its length is a multiple of the number of devices (otherwise it
stays on the default device: choose ``chains`` or ``n_estimators`` as a multiple of the device
count to use them all).  With one device every function here returns its input unchanged.

The rows of one chain are split another way: a kernel that sums over rows runs under
:func:`jax.shard_map` over a mesh of :func:`rows_mesh` (axis :data:`ROWS`), each device holding a
contiguous block of rows, with its row sums added across the devices (``jax.lax.psum``).  BART
does this with ``data_devices`` (:mod:`bayestrees.inference.bart.kernel`).
"""
from __future__ import annotations

from functools import lru_cache

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

__all__ = ["batch_devices", "shard_batch", "ROWS", "rows_mesh", "check_data_devices"]

AXIS = "batch"
#: the mesh axis of a chain's rows split across devices
ROWS = "rows"


@lru_cache(maxsize=None)
def _mesh(devices: tuple) -> Mesh:
    return Mesh(np.asarray(devices, dtype=object), (AXIS,))


def batch_devices(size: int) -> int:
    """How many devices a batch axis of length ``size`` is split over (1: not split)."""
    k = jax.device_count()
    return k if k > 1 and size % k == 0 else 1


def _spec(mesh: Mesh, ndim: int) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec(AXIS, *([None] * (ndim - 1))))


def shard_batch(tree, size: int | None = None):
    """Split the leading axis of every array in ``tree`` whose leading length is ``size`` across devices.

    Outside ``jit`` the arrays are placed (``jax.device_put``); inside, a sharding constraint is
    added, so the compiler partitions the batched computation.  Arrays with another leading
    length (shared data, scalars) are left alone.

    Parameters
    ----------
    tree : pytree of arrays (PRNG key arrays included)
    size : int, optional
        Length of the batch axis (default: the leading length of the first array).

    Returns
    -------
    The same pytree, sharded where :func:`batch_devices` says so.
    """
    leaves = jax.tree_util.tree_leaves(tree)
    if not leaves or jax.device_count() < 2:
        return tree
    if size is None:
        size = np.shape(leaves[0])[0] if np.ndim(leaves[0]) else 0
    if not size or batch_devices(size) < 2:
        return tree
    mesh = _mesh(tuple(jax.devices()))

    def put(a):
        if np.ndim(a) == 0 or np.shape(a)[0] != size:
            return a
        spec = _spec(mesh, np.ndim(a))
        if isinstance(a, jax.core.Tracer):
            return jax.lax.with_sharding_constraint(a, spec)
        return jax.device_put(a, spec)

    return jax.tree_util.tree_map(put, tree)


def check_data_devices(k) -> int:
    """``k`` devices for the rows of a chain: an integer from 1 to the devices JAX sees."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"data_devices must be an integer >= 1, got {k!r}")
    if k > jax.device_count():
        raise ValueError(f"data_devices={k}, but JAX sees {jax.device_count()} device(s) ({jax.default_backend()}); on a "
                         "CPU make more with jax.config.update('jax_num_cpu_devices', k) before JAX starts")
    return int(k)


@lru_cache(maxsize=None)
def rows_mesh(k: int) -> Mesh:
    """A one-axis mesh (:data:`ROWS`) over the first ``k`` devices."""
    return Mesh(np.asarray(jax.devices()[:k], dtype=object), (ROWS,))
