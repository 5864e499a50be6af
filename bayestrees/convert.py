"""Conversion of tree draws to ArviZ InferenceData (the only module that does).

Conventions (see DESIGN.md): draws are posterior draws of trees, with shape
``(chain, draw)``.  Tree arrays go to ``posterior`` with a ``node`` dimension
(and ``output`` for leaf values); scalar summaries (``n_leaves``, ``depth``)
go to ``posterior`` too; sampler facts go to ``sample_stats``; pointwise
log-likelihoods go to ``log_likelihood``.  Decision-tree depth is called
``depth``, never ``tree_depth`` (which ArviZ reads as NUTS depth).
"""
from __future__ import annotations

from typing import Mapping

import arviz as az
import jax
import numpy as np

from .tree import Tree, max_depth, n_leaves

__all__ = ["trees_to_inferencedata", "trees_from_inferencedata", "TREE_VARS", "add_group"]

#: posterior variable names holding the tree arrays, in Tree field order
TREE_VARS = {
    "feature": "tree_feature",
    "threshold": "tree_threshold",
    "left": "tree_left",
    "right": "tree_right",
    "missing_left": "tree_missing_left",
    "value": "tree_value",
    "weight": "tree_weight",
    "count": "tree_count",
    "depth": "tree_node_depth",
    "n_nodes": "tree_n_nodes",
}


def _as_chain_draw(a: np.ndarray, batch_ndim: int) -> np.ndarray:
    a = np.asarray(a)
    if batch_ndim == 1:
        return a[None]
    if batch_ndim == 2:
        return a
    raise ValueError(f"trees must have batch shape (draw,) or (chain, draw), got batch rank {batch_ndim}")


def trees_to_inferencedata(
    trees: Tree,
    *,
    posterior_extra: Mapping[str, np.ndarray] | None = None,
    sample_stats: Mapping[str, np.ndarray] | None = None,
    log_likelihood: Mapping[str, np.ndarray] | None = None,
    observed_data: Mapping[str, np.ndarray] | None = None,
    constant_data: Mapping[str, np.ndarray] | None = None,
    extra_dims: Mapping[str, list] | None = None,
    attrs: Mapping[str, object] | None = None,
    output_names: list | None = None,
) -> az.InferenceData:
    """Build InferenceData from a batch of trees.

    Parameters
    ----------
    trees : Tree with batch shape ``(draw,)`` or ``(chain, draw)``
    posterior_extra, sample_stats : arrays with leading ``(chain, draw)``
        (or ``(draw,)``) axes, added to those groups.
    log_likelihood : arrays of shape ``(chain, draw, obs)``.
    observed_data, constant_data : arrays without chain/draw axes.
    extra_dims : dims for the extra variables (after chain, draw).
    attrs : attributes stored on every group (strings/numbers only).
    """
    t = jax.tree_util.tree_map(np.asarray, trees)
    bnd = t.feature.ndim - 1
    post = {}
    dims = {}
    for field, var in TREE_VARS.items():
        a = _as_chain_draw(getattr(t, field), bnd)
        if field == "missing_left":
            a = a.astype(np.int8)
        post[var] = a
        if field == "value":
            dims[var] = ["node", "output"]
        elif field == "n_nodes":
            dims[var] = []
        else:
            dims[var] = ["node"]
    post["n_leaves"] = _as_chain_draw(np.asarray(n_leaves(trees)), bnd)
    post["depth"] = _as_chain_draw(np.asarray(max_depth(trees)), bnd)
    for k, v in (posterior_extra or {}).items():
        post[k] = _as_chain_draw(np.asarray(v), bnd) if np.ndim(v) >= bnd else np.asarray(v)
    ss = {k: _as_chain_draw(np.asarray(v), bnd) for k, v in (sample_stats or {}).items()}
    ll = {k: _as_chain_draw(np.asarray(v), bnd) for k, v in (log_likelihood or {}).items()}
    all_dims = dict(dims)
    for k, v in (extra_dims or {}).items():
        all_dims[k] = list(v)
    for k in ll:
        all_dims.setdefault(k, ["obs"])
    coords = {}
    if output_names is not None:
        coords["output"] = list(output_names)
    kwargs = dict(posterior=post, dims=all_dims, coords=coords)
    if ss:
        kwargs["sample_stats"] = ss
    if ll:
        kwargs["log_likelihood"] = ll
    if observed_data:
        kwargs["observed_data"] = {k: np.asarray(v) for k, v in observed_data.items()}
    if constant_data:
        kwargs["constant_data"] = {k: np.asarray(v) for k, v in constant_data.items()}
    idata = az.from_dict(**kwargs)
    if attrs:
        clean = {k: (v if isinstance(v, (int, float, str)) else str(v)) for k, v in attrs.items()}
        for g in idata.groups():
            idata[g].attrs.update(clean)
    return idata


def trees_from_inferencedata(idata: az.InferenceData, group: str = "posterior") -> Tree:
    """Rebuild the ``(chain, draw)`` batch of trees stored by :func:`trees_to_inferencedata`."""
    ds = idata[group]
    missing = [v for v in TREE_VARS.values() if v not in ds]
    if missing:
        raise ValueError(f"InferenceData group {group!r} holds no trees (missing {missing})")
    arrays = {}
    for field, var in TREE_VARS.items():
        a = np.asarray(ds[var].values)
        if field == "missing_left":
            a = a.astype(bool)
        elif field in ("feature", "threshold", "left", "right", "count", "depth", "n_nodes"):
            a = a.astype(np.int32)
        arrays[field] = a
    return Tree(**arrays)


def add_group(idata: az.InferenceData, group: str, data: Mapping[str, np.ndarray],
              dims: Mapping[str, list] | None = None, coords: Mapping[str, list] | None = None,
              chain_draw: bool = True) -> az.InferenceData:
    """Add (or replace) a group such as ``predictions`` or ``posterior_predictive``."""
    import xarray as xr

    variables = {}
    for k, v in data.items():
        v = np.asarray(v)
        d = list((dims or {}).get(k, []))
        if chain_draw:
            lead = ["chain", "draw"]
            rest = d or [f"{k}_dim_{i}" for i in range(v.ndim - 2)]
            variables[k] = (lead + rest, v)
        else:
            variables[k] = (d or [f"{k}_dim_{i}" for i in range(v.ndim)], v)
    ds = xr.Dataset(variables, coords={k: list(c) for k, c in (coords or {}).items()})
    if group in idata.groups():
        delattr(idata, group) if hasattr(idata, group) else None
        idata._groups = [g for g in idata._groups if g != group]
    idata.add_groups({group: ds})
    return idata
