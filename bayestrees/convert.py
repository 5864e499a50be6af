"""Conversion of tree draws to ArviZ InferenceData (the only module that builds it).

The posterior contract (the same for every family; see ``docs/design.md``)
--------------------------------------------------------------------------
Draws are posterior draws of trees with leading dims ``(chain, draw)``; a
forest of 100 trees is ``chain=1, draw=100``.  :func:`to_inferencedata` writes

``posterior``
    what a user summarises: ``n_leaves``, ``depth`` (of the deepest leaf),
    ``split_counts`` (dim ``feature``, named by the feature names), ``sigma``
    where the model has a noise scale, and ``mu``, the fitted function at the
    training rows (dims ``obs`` or ``obs, class``), as pymc-bart does; so
    ``az.summary(idata)`` with no arguments is meaningful.
``trees``
    the tree arrays (``split_feature``, ``threshold``, ``left``, ``right``,
    ``missing_left``, ``value``, ``weight``, ``count``, ``node_depth``,
    ``n_nodes``), dims ``(chain, draw, [extra tree dims], node[, output])``;
    :func:`trees_from_inferencedata` rebuilds the :class:`~bayestrees.tree.Tree`.
``log_likelihood``
    pointwise ``log p(y_i | draw)`` under the variable's name, for families
    whose model defines a likelihood (never for the bootstrap forests).
``observed_data``, ``constant_data``
    the response under the variable's name (dim ``obs``); ``feature_names``
    and ``n_bins`` (dim ``feature``).
``sample_stats``
    ``lp`` where defined, and the sampler's Info fields.
``predictions`` / ``posterior_predictive`` (:func:`predictive_group`)
    ``<name>``: a draw of the response (regression) or of the label
    (classification); ``<name>_mu``: the fitted function (regression);
    ``<name>_proba``: class probabilities (dims ``obs, class``).

Decision-tree depth is ``depth`` (``node_depth`` per node), never
``tree_depth``, which ArviZ reads as NUTS tree depth.
"""
from __future__ import annotations

import warnings
from typing import Mapping, Sequence

import arviz as az
import jax
import numpy as np

from .tree import Tree, feature_counts, max_depth, n_leaves

__all__ = ["to_inferencedata", "trees_from_inferencedata", "predictive_group", "TREE_VARS", "TREE_GROUP", "add_group",
           "model_inferencedata"]

#: the group that holds the tree arrays
TREE_GROUP = "trees"

#: variable names of the tree arrays in the ``trees`` group, in Tree field order
TREE_VARS = {
    "feature": "split_feature",
    "threshold": "threshold",
    "left": "left",
    "right": "right",
    "missing_left": "missing_left",
    "value": "value",
    "weight": "weight",
    "count": "count",
    "depth": "node_depth",
    "n_nodes": "n_nodes",
}

#: names used by files written before the ``trees`` group existed (trees in ``posterior``)
_LEGACY_TREE_VARS = {
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


def trees_from_inferencedata(idata: az.InferenceData, group: str | None = None) -> Tree:
    """Rebuild the ``(chain, draw, ...)`` batch of trees stored by :func:`to_inferencedata`.

    Reads the ``trees`` group (or ``group``); files written before it existed
    kept the trees in ``posterior`` as ``tree_*`` variables and are read too.
    """
    groups = idata.groups()
    if group is None:
        group = TREE_GROUP if TREE_GROUP in groups else "posterior"
    if group not in groups:
        raise ValueError(f"InferenceData has no {group!r} group; groups: {groups}")
    ds = idata[group]
    names = TREE_VARS if all(v in ds for v in TREE_VARS.values()) else _LEGACY_TREE_VARS
    missing = [v for v in names.values() if v not in ds]
    if missing:
        raise ValueError(f"InferenceData group {group!r} holds no trees (missing {missing})")
    arrays = {}
    for field, var in names.items():
        a = np.asarray(ds[var].values)
        if field == "missing_left":
            a = a.astype(bool)
        elif field in ("feature", "threshold", "left", "right", "count", "depth", "n_nodes"):
            a = a.astype(np.int32)
        arrays[field] = a
    return Tree(**arrays)


def _cd(a, lead: int) -> np.ndarray:
    """``a`` with leading dims ``(chain, draw)``: a ``(draw, ...)`` array gets a chain axis."""
    a = np.asarray(a)
    return a[None] if lead == 1 else a


def to_inferencedata(
    trees: Tree,
    *,
    family: str,
    task: str,
    feature_names: Sequence[str],
    y_name: str = "y",
    observed=None,
    mu=None,
    sigma=None,
    log_likelihood=None,
    class_names: Sequence | None = None,
    n_bins=None,
    tree_dims: Sequence[str] = (),
    posterior_extra: Mapping[str, np.ndarray] | None = None,
    sample_stats: Mapping[str, np.ndarray] | None = None,
    extra_dims: Mapping[str, list] | None = None,
    coords: Mapping[str, list] | None = None,
    attrs: Mapping[str, object] | None = None,
) -> az.InferenceData:
    """Build InferenceData by the posterior contract (module docstring).

    Parameters
    ----------
    trees : Tree with batch shape ``(chain, draw) + T`` (``T`` named by ``tree_dims``,
        e.g. ``("component",)``), or ``(draw,)`` (one chain); None for a fit that kept no trees
        (BART's ``keep_trees=False``): no ``trees`` group, and ``posterior_extra`` must give
        ``n_leaves``, ``depth`` and ``split_counts``
    family : family name, stored in ``attrs`` (``"bayesian_forest"``, ``"pcfg"``, ...)
    task : ``"regression"`` or ``"classification"``
    feature_names : one name per feature (coordinate of dim ``feature``)
    y_name : the random variable's name (``"y"`` in estimators)
    observed : the response (n,), stored in ``observed_data[y_name]``
    mu : float ``(chain, draw, n)`` or ``(chain, draw, n, C)``: the fitted function at the training rows
    sigma : float ``(chain, draw)``: the noise scale, where the model has one
    log_likelihood : float ``(chain, draw, n)``: pointwise ``log p(y_i | draw)``
    class_names : the class labels (coordinate of dim ``class``)
    n_bins : int (d,): bins per feature, stored in ``constant_data``
    posterior_extra, sample_stats : arrays with leading ``(chain, draw)`` dims (``n_leaves``, ``depth`` or
        ``split_counts`` in ``posterior_extra`` replace those computed from ``trees``)
    extra_dims : dims (after chain, draw) of the extra variables
    coords : extra coordinates
    attrs : attributes stored on every group (non-numbers are stored as strings)
    """
    if task not in ("regression", "classification"):
        raise ValueError(f"task must be 'regression' or 'classification', got {task!r}")
    tdims = list(tree_dims)
    given = dict(posterior_extra or {})
    if trees is None:
        missing = [k for k in ("n_leaves", "depth", "split_counts") if k not in given]
        if missing:
            raise ValueError(f"without trees, posterior_extra must give the tree summaries; missing {missing}")
        t, lead = None, np.ndim(given["n_leaves"]) - len(tdims)
        batch = np.shape(given["n_leaves"])
    else:
        t = jax.tree_util.tree_map(np.asarray, trees)
        lead, batch = t.feature.ndim - 1 - len(tdims), t.feature.shape[:-1]
    if lead not in (1, 2):
        raise ValueError(f"trees must have batch shape (draw,) or (chain, draw) + {tuple(tdims)}, got {batch}")
    feature_names = [str(f) for f in feature_names]
    d = len(feature_names)
    dims: dict[str, list] = {}
    tree_ds: dict[str, np.ndarray] = {}
    for field, var in (TREE_VARS.items() if t is not None else ()):
        a = _cd(getattr(t, field), lead)
        if field == "missing_left":
            a = a.astype(np.int8)
        tree_ds[var] = a
        dims[var] = tdims + (["node", "output"] if field == "value" else [] if field == "n_nodes" else ["node"])
    # a family may give the summaries itself (BART: per tree, and splits summed over its trees,
    # computed on its compact draws rather than on the whole batch of trees at once)
    post = {
        "n_leaves": _cd(given.pop("n_leaves") if "n_leaves" in given else np.asarray(n_leaves(t)), lead),
        "depth": _cd(given.pop("depth") if "depth" in given else np.asarray(max_depth(t)), lead),
        "split_counts": _cd(given.pop("split_counts") if "split_counts" in given
                            else np.asarray(feature_counts(t, d)), lead),
    }
    dims.update({"n_leaves": tdims, "depth": tdims, "split_counts": tdims + ["feature"]})
    if sigma is not None:
        post["sigma"] = _cd(sigma, lead)
        dims["sigma"] = list((extra_dims or {}).get("sigma", []))
    if mu is not None:
        post["mu"] = _cd(mu, lead)
        dims["mu"] = ["obs"] if post["mu"].ndim == 3 else ["obs", "class"]
    for k, v in given.items():
        post[k] = _cd(v, lead)
    ss = {k: _cd(v, lead) for k, v in (sample_stats or {}).items()}
    for k, v in (extra_dims or {}).items():
        dims[k] = list(v)
    all_coords = {"feature": feature_names}
    if class_names is not None:
        all_coords["class"] = [str(c) for c in class_names]
    all_coords["output"] = all_coords["class"] if task == "classification" and class_names is not None else ["mean"]
    all_coords.update({k: list(v) for k, v in (coords or {}).items()})
    kwargs: dict = dict(posterior=post, dims=dims, coords=all_coords)
    if ss:
        kwargs["sample_stats"] = ss
    if log_likelihood is not None:
        kwargs["log_likelihood"] = {y_name: _cd(log_likelihood, lead)}
        dims[y_name] = ["obs"]
    if observed is not None:
        kwargs["observed_data"] = {y_name: np.asarray(observed)}
        dims[y_name] = ["obs"]
    cdata = {"feature_names": np.asarray(feature_names, dtype=object)}
    dims["feature_names"] = ["feature"]
    if n_bins is not None:
        cdata["n_bins"] = np.asarray(n_bins, np.int64)
        dims["n_bins"] = ["feature"]
    kwargs["constant_data"] = cdata
    idata = az.from_dict(**kwargs)
    if tree_ds:
        tree_coords = {"output": all_coords["output"]}
        tree_coords.update({k: all_coords[k] for k in tdims if k in all_coords})
        add_group(idata, TREE_GROUP, tree_ds, dims=dims, coords=tree_coords)
    meta = {"family": family, "task": task, "y_name": y_name, **dict(attrs or {})}
    clean = {k: (v if isinstance(v, (int, float, str)) and not isinstance(v, bool) else str(v))
             for k, v in meta.items()}
    for g in idata.groups():
        idata[g].attrs.update(clean)
    return idata


def predictive_group(idata: az.InferenceData, group: str, name: str, *, task: str, draws=None, mu=None,
                     proba=None, class_names=None) -> az.InferenceData:
    """Write predictive draws for new (``group="predictions"``) or training rows by the naming scheme.

    Parameters
    ----------
    idata : the InferenceData to extend
    group : ``"predictions"`` or ``"posterior_predictive"``
    name : the variable's name
    task : ``"regression"`` or ``"classification"``
    draws : ``(chain, draw, n)`` draws of the response (regression) or of the label
    mu : ``(chain, draw, n)`` the fitted function at the rows (regression)
    proba : ``(chain, draw, n, C)`` class probabilities (classification)
    """
    data, dims = {}, {}
    if draws is not None:
        data[name], dims[name] = np.asarray(draws), ["obs"]
    if mu is not None:
        data[f"{name}_mu"], dims[f"{name}_mu"] = np.asarray(mu), ["obs"]
    if proba is not None:
        data[f"{name}_proba"], dims[f"{name}_proba"] = np.asarray(proba), ["obs", "class"]
    coords = {"class": [str(c) for c in class_names]} if class_names is not None and proba is not None else None
    return add_group(idata, group, data, dims=dims, coords=coords)


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
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*not defined in the InferenceData scheme.*")
        idata.add_groups({group: ds})
    return idata


def model_inferencedata(posterior: Mapping[str, np.ndarray], *, trees: Mapping[str, np.ndarray] | None = None,
                        log_likelihood: Mapping[str, np.ndarray] | None = None,
                        observed: Mapping[str, np.ndarray] | None = None,
                        sample_stats: Mapping[str, np.ndarray] | None = None,
                        dims: Mapping[str, list] | None = None, coords: Mapping[str, list] | None = None,
                        attrs: Mapping[str, object] | None = None) -> az.InferenceData:
    """InferenceData of a user-written model with tree functions, by the posterior contract.

    ``posterior``: every latent and deterministic site and the tree summaries, leading dims
    ``(chain, draw)``; ``trees``: the tree sites' values (dims ``chain, draw, tree, node, field``);
    ``log_likelihood``: pointwise log densities of the observed sites; ``observed``: their data.
    ``dims`` names the dimensions after ``(chain, draw)`` (ArviZ's default names elsewhere).
    """
    dims = dict(dims or {})
    kw = dict(posterior={k: np.asarray(v) for k, v in posterior.items()}, dims=dims, coords=dict(coords or {}))
    if log_likelihood:
        kw["log_likelihood"] = {k: np.asarray(v) for k, v in log_likelihood.items()}
    if observed:
        kw["observed_data"] = {k: np.asarray(v) for k, v in observed.items()}
    if sample_stats:
        kw["sample_stats"] = {k: np.asarray(v) for k, v in sample_stats.items()}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*not defined in the InferenceData scheme.*")
        idata = az.from_dict(**kw)
        if trees:
            # per function its own tree and node dims: two functions may differ in m and depth
            base = {k: k[:-len("_trees")] if k.endswith("_trees") else k for k in trees}
            # (a function of several outputs: chain, draw, output, tree, node, field)
            dims_t = {k: ([f"{base[k]}_output"] if np.ndim(trees[k]) == 6 else []) + [f"{base[k]}_tree",
                      f"{base[k]}_node", "field"] for k in trees}
            add_group(idata, TREE_GROUP, trees, dims=dims_t,
                      coords={"field": ["feature", "threshold", "value"]})
    for k, v in dict(attrs or {}).items():
        idata.posterior.attrs[k] = v
    return idata
