"""Plots for every family (matplotlib is imported only when a plot is drawn).

Every function draws on ``ax=`` (created when omitted) and returns the Axes
(a pair of Axes where the figure has two panels).

Trees and posteriors
    :func:`plot_tree`: one tree of any family (a ``Tree``, a fitted estimator, or
    InferenceData through :func:`~bayestrees.convert.trees_from_inferencedata`).
    :func:`plot_extreme_trees`: the safe-Bayes trees of highest and lowest weight.
    :func:`plot_n_leaves`: the posterior of the number of leaves (one or several fits).
Variables and the fitted function
    :func:`plot_variable_importance`: split share, split counts or inclusion
    probability per feature, with intervals, from ``posterior.split_counts``.
    :func:`plot_partial_dependence`: partial dependence with a credible band
    (one feature) or its posterior mean and interval width (two features), from an
    estimator's ``predict_draws``.
Family-specific
    :func:`plot_operating_curve`: the safe-Bayes accuracy (RMSE) and log predictive
    against the effective sample size ``m``.
    :func:`plot_n_trees`: BET's number of occupied trees per draw (``posterior.n_trees``).
    :func:`plot_xi_bar`: BET's ``posterior.xi_bar`` per feature, with intervals.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from .data import mask_codes
from .tree import Tree, index_tree, tree_to_numpy

__all__ = [
    "plot_tree", "plot_extreme_trees", "plot_n_leaves", "plot_variable_importance", "plot_partial_dependence",
    "plot_operating_curve", "plot_n_trees", "plot_xi_bar",
]


def _plt():
    try:
        import matplotlib.pyplot as plt
    except ImportError as e:  # pragma: no cover - optional dependency
        raise ImportError("plotting needs matplotlib: pip install 'bayestrees[plot]'") from e
    return plt


def _new_ax(ax, figsize):
    if ax is None:
        _, ax = _plt().subplots(figsize=figsize, layout="constrained")
    return ax


def _is_idata(obj) -> bool:
    return hasattr(obj, "groups") and hasattr(obj, "posterior") and callable(getattr(obj, "groups"))


def _posterior_var(idata, name: str, who: str):
    if not _is_idata(idata):
        raise TypeError(f"{who} needs an arviz.InferenceData, got {type(idata).__name__}")
    if "posterior" not in idata.groups() or name not in idata.posterior:
        have = list(idata.posterior.data_vars) if "posterior" in idata.groups() else []
        raise ValueError(f"{who}: the InferenceData has no posterior variable {name!r} (it has {have})")
    return idata.posterior[name]


def _occupied(idata, da):
    """bool ``(chain, draw, component)``: the mixture components that hold training rows (BET's ``Z``),
    or None when ``da`` has no ``component`` dim or the posterior no ``Z``."""
    post = idata.posterior
    if "component" not in da.dims or "Z" not in post:
        return None
    z = np.asarray(post["Z"].transpose("chain", "draw", ...).values)
    J = da.sizes["component"]
    occ = np.zeros(z.shape[:2] + (J,), bool)
    c, d = np.indices(z.shape[:2])
    for k in range(z.shape[2]):
        occ[c, d, np.clip(z[:, :, k], 0, J - 1)] = True
    return occ


def _interval_bounds(prob: float) -> tuple[float, float]:
    if not 0 < prob < 1:
        raise ValueError(f"prob must be in (0, 1), got {prob}")
    return (1 - prob) / 2, (1 + prob) / 2


# ------------------------------------------------------------------------------------------------
# trees
# ------------------------------------------------------------------------------------------------
def _one_tree(tree, chain: int, draw: int, index: int | None):
    """``(Tree without batch axes, binner or None, feature names or None)`` from the accepted inputs."""
    if isinstance(tree, Tree):
        return _first(tree_to_numpy(tree), index or 0), None, None
    if _is_idata(tree):
        from .convert import trees_from_inferencedata

        batch = trees_from_inferencedata(tree)
        nc, nd = batch.feature.shape[:2]
        if not (0 <= chain < nc and 0 <= draw < nd):
            raise ValueError(f"chain {chain}, draw {draw} out of range: the InferenceData has {nc} chains and "
                             f"{nd} draws")
        t = tree_to_numpy(index_tree(index_tree(batch, chain), draw))
        if index is None and t.feature.ndim > 1 and "w" in tree.posterior:  # a mixture: its heaviest tree
            w = np.asarray(tree.posterior["w"].transpose("chain", "draw", ...).values)[chain, draw]
            index = int(np.argmax(w.ravel()))
        t = _first(t, index or 0)  # extra tree dims (e.g. mixture components): ``index``, else the first
        names = None
        if "constant_data" in tree.groups() and "feature_names" in tree.constant_data:
            names = [str(v) for v in tree.constant_data["feature_names"].values]
        return t, None, names
    # a fitted estimator
    binner = getattr(tree, "binner_", None)
    if hasattr(tree, "map_tree_"):  # PCFG: the MAP tree
        return tree_to_numpy(tree.map_tree_), binner, None
    trees = getattr(tree, "trees_", None)
    if trees is None:
        raise TypeError(f"plot_tree needs a Tree, a fitted estimator or an InferenceData, got {type(tree).__name__}")
    trees = tree_to_numpy(trees)
    batch = tuple(trees.feature.shape[:-1])
    if len(batch) >= 2 and index is None:  # (chain, draw, ...): Bayesian CART
        if not (0 <= chain < batch[0] and 0 <= draw < batch[1]):
            raise ValueError(f"chain {chain}, draw {draw} out of range: the estimator holds {batch[0]} chains and "
                             f"{batch[1]} draws")
        t = index_tree(index_tree(trees, chain), draw)
        return _first(t, 0), binner, None
    return _first(trees, draw if index is None else index), binner, None


def _first(t: Tree, i: int) -> Tree:
    """Tree ``i`` of a batch flattened to one axis (the tree itself when it has no batch axis)."""
    if t.feature.ndim == 1:
        return t
    flat = Tree(*[np.reshape(a, (-1,) + a.shape[t.feature.ndim - 1:]) for a in t])
    k = flat.feature.shape[0]
    if not 0 <= i < k:
        raise ValueError(f"tree index {i} out of range: there are {k} trees")
    return index_tree(flat, i)


def _subset_split_features(obj) -> set:
    """Names of the features whose rules are category masks (subset splits), from an InferenceData's
    ``posterior.attrs["subset_split_features"]``, or a fitted estimator's ``idata_``'s."""
    if not _is_idata(obj):
        obj = getattr(obj, "idata_", None)
    if obj is None or not _is_idata(obj) or "posterior" not in obj.groups():
        return set()
    names = obj.posterior.attrs.get("subset_split_features", "")
    return {n.strip() for n in str(names).split(",") if n.strip()}


def plot_tree(tree, ax=None, *, binner=None, feature_names=None, class_names=None, class_colors=None, title=None,
              max_nodes=63,
              chain: int = 0, draw: int = 0, index: int | None = None, legend: bool = True):
    """Draw one tree: splits as labelled boxes, leaves as squares (coloured by class proportions).

    Parameters
    ----------
    tree : Tree, fitted estimator or arviz.InferenceData
        A single tree (a batch of trees draws the ``index``-th); a fitted estimator (its
        ``trees_``, or a PCFG estimator's MAP tree), whose binner labels the splits with
        feature names and values; or InferenceData with a ``trees`` group (the tree at
        ``chain``, ``draw``; splits are labelled with feature names and bin codes).
    ax : matplotlib Axes, optional
    binner : bayestrees.data.Binner, optional
        Labels splits with feature names and thresholds in the data's units.
    feature_names : list of str, optional
        Names for the splits when no binner is known.
    class_names : list, optional
        Class labels for the legend (default: the estimator's ``classes_`` or the InferenceData's
        ``class`` coordinate).
    class_colors : list of colours, optional
        One per class (classification trees); a leaf's colour is the mix by its class probabilities.
    title : str, optional
    max_nodes : int, default 63
        Trees with more used nodes are drawn without labels (so are trees whose labels
        would not fit the axis at 3.5 pt).
    chain, draw : int
        Which draw of an InferenceData (or of a ``(chain, draw)`` estimator) to draw.
    index : int, optional
        Which tree of a flat batch (e.g. a forest's ``trees_``) to draw.
    legend : bool, default True
        Classification trees: the class colours in a legend right of the axis.

    Returns
    -------
    matplotlib Axes

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(size=(40, 2))
    >>> y = np.sin(6 * X[:, 0]) + 0.1 * rng.normal(size=40)
    >>> reg = bt.PCFGTreeRegressor(max_bins=4, draws=10, random_state=0).fit(X, y)
    >>> ax = bt.plots.plot_tree(reg, title="MAP tree")      # splits in the data's units
    >>> type(ax).__name__
    'Axes'
    """
    plt = _plt()
    t, est_binner, idata_names = _one_tree(tree, chain, draw, index)
    if class_names is None:
        class_names = getattr(tree, "classes_", None)
        if class_names is None and _is_idata(tree) and "class" in tree.posterior.coords:
            class_names = list(tree.posterior.coords["class"].values)
    binner = binner if binner is not None else est_binner
    feature_names = feature_names if feature_names is not None else idata_names
    ax = _new_ax(ax, (6, 4))
    n = t.left.shape[0]
    used = t.left != -2  # FREE slots are not drawn
    # x positions: in-order rank of the leaves; internal nodes centred over their children
    x = np.zeros(n)
    counter = [0]

    def place(i):
        if t.left[i] < 0:
            x[i] = counter[0]
            counter[0] += 1
            return
        place(int(t.left[i]))
        place(int(t.right[i]))
        x[i] = 0.5 * (x[int(t.left[i])] + x[int(t.right[i])])

    place(0)
    depth = np.asarray(t.depth[:n])
    C = t.value.shape[-1]
    if class_colors is None:
        cmap = plt.get_cmap("tab10")
        class_colors = [cmap(c % 10) for c in range(C)]
    rgb = np.array([plt.matplotlib.colors.to_rgb(c) for c in class_colors]) if C > 1 else None
    internal = np.flatnonzero(used & (t.left >= 0))
    leaves = np.flatnonzero(used & (t.left < 0))

    subsets = _subset_split_features(tree)

    def split_label(i):
        f, th = int(t.feature[i]), int(t.threshold[i])
        name = feature_names[f] if feature_names is not None and f < len(feature_names) else f"x{f}"
        if binner is not None:
            fb = binner.features_[f]
            return f"{fb.name}\n{fb.subset_label(th) if fb.name in subsets else fb.threshold_label(th)}"
        if name in subsets:   # a subset rule's threshold: the mask of the category codes sent left
            return f"{name}\nin codes {{{', '.join(map(str, mask_codes(th)))}}}"
        return f"{name}\n<= bin {th}"

    texts = {int(i): split_label(i) for i in internal}
    # font size: the widest label must fit between the closest nodes of one level (and 7 pt at most)
    fontsize = 0.0
    if int(used.sum()) <= max_nodes:
        ax.set_xlim(x[used].min() - 0.7, x[used].max() + 0.7)
        width_pt = ax.get_window_extent().width * 72.0 / ax.figure.dpi
        pt_per_unit = width_pt / (x[used].max() - x[used].min() + 1.4)
        gap = float(x[used].max() - x[used].min() + 1.4)  # a lone label may use the axis' width
        for lev in np.unique(depth[internal]) if len(internal) else []:
            xs = np.sort(x[internal][depth[internal] == lev])
            if len(xs) > 1:
                gap = min(gap, float(np.diff(xs).min()))
        chars = max([max(len(part) for part in lab.split("\n")) for lab in texts.values()] + [4])
        fontsize = min(7.0, 0.9 * gap * pt_per_unit / (0.62 * chars))
    labels = fontsize >= 3.5
    for i in internal:
        for ch in (int(t.left[i]), int(t.right[i])):
            ax.plot([x[i], x[ch]], [-depth[i], -depth[ch]], color="0.6", lw=0.8, zorder=1)
    for i in internal:
        if labels:
            ax.text(x[i], -depth[i], texts[int(i)], ha="center", va="center", fontsize=fontsize, linespacing=1.0,
                    bbox=dict(boxstyle="round,pad=0.2", fc="white", ec="0.5", lw=0.5), zorder=3)
        else:
            ax.plot(x[i], -depth[i], "o", color="0.4", ms=2, zorder=2)
    for i in leaves:
        v = np.asarray(t.value[i])
        if rgb is not None:
            col = np.clip(v @ rgb, 0, 1) if t.count[i] > 0 else (0.92, 0.92, 0.92)
        else:
            col = "C0"
        ax.scatter([x[i]], [-depth[i]], s=60 if labels else 12, color=[col], edgecolor="k", lw=0.5, marker="s",
                   zorder=3)
        if labels:
            txt = f"n={int(t.count[i])}" if C > 1 else f"{float(v[0]):.3g}"
            ax.text(x[i], -depth[i] - 0.22, txt, ha="center", va="top", fontsize=min(fontsize, 6))
    if C > 1 and legend:
        ax.legend(handles=_class_handles(class_colors, class_names, C, np.any(t.count[leaves] == 0)), fontsize=6,
                  loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, title="leaf colour: mix of",
                  title_fontsize=6)
    ax.set_xlim(x[used].min() - 0.7, x[used].max() + 0.7)
    ax.set_ylim(-depth[used].max() - 0.6, 0.4)
    ax.set_axis_off()
    if title:
        ax.set_title(title, fontsize=8)
    return ax


def _class_handles(class_colors, class_names, C: int, empty: bool):
    from matplotlib.patches import Patch

    names = [str(c) for c in class_names] if class_names is not None else [str(c) for c in range(C)]
    handles = [Patch(color=class_colors[c], label=f"class {names[c]}") for c in range(C)]
    if empty:
        handles.append(Patch(facecolor=(0.92, 0.92, 0.92), edgecolor="k", lw=0.5, label="no training rows"))
    return handles


def plot_extreme_trees(estimator, n=3, *, figsize=None, class_colors=None):
    """The ``n`` safe-Bayes trees with the highest and the ``n`` with the lowest weights (the paper's Figure 3).

    Parameters
    ----------
    estimator : fitted SafeBayesForestClassifier / Regressor
    n : int
        Trees per row.
    figsize : tuple, optional
    class_colors : list of colours, optional

    Returns
    -------
    matplotlib Figure
        Top row: highest weights; bottom row: lowest.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(size=(40, 2))
    >>> labels = np.where(X[:, 0] > 0.5, "high", "low")
    >>> clf = bt.SafeBayesForestClassifier(draws=50, random_state=0).fit(X, labels)
    >>> fig = bt.plots.plot_extreme_trees(clf, n=2)
    >>> type(fig).__name__
    'Figure'
    """
    plt = _plt()
    lw = np.asarray(estimator.log_weights_)
    order = np.argsort(lw)
    top, bottom = order[::-1][:n], order[:n]
    fig, axes = plt.subplots(2, n, figsize=figsize or (4.5 * n, 7), squeeze=False, layout="constrained")
    for row, idx in enumerate((top, bottom)):
        for col, k in enumerate(idx):
            plot_tree(index_tree(estimator.trees_, int(k)), axes[row, col], binner=estimator.binner_,
                      class_colors=class_colors, class_names=getattr(estimator, "classes_", None), legend=False,
                      title=f"tree {int(k)}: log w = {lw[k]:.1f}" + (" (highest)" if row == 0 else " (lowest)"))
    C = int(np.asarray(estimator.trees_.value).shape[-1])
    if C > 1:
        if class_colors is None:
            cmap = plt.get_cmap("tab10")
            class_colors = [cmap(c % 10) for c in range(C)]
        fig.legend(handles=_class_handles(class_colors, getattr(estimator, "classes_", None), C, True),
                   loc="outside upper center", ncol=C + 1, fontsize=8, frameon=False,
                   title="leaf colour: mix of the class colours by the leaf's class probabilities", title_fontsize=8)
    return fig


# ------------------------------------------------------------------------------------------------
# posterior summaries
# ------------------------------------------------------------------------------------------------
def _as_models(idata) -> dict:
    if _is_idata(idata):
        return {"": idata}
    if isinstance(idata, Mapping):
        return dict(idata)
    raise TypeError(f"expected arviz.InferenceData or a dict of them, got {type(idata).__name__}")


def plot_n_leaves(idata, ax=None, *, max_leaves: int | None = None):
    """Posterior probability of the number of leaves per tree.

    Parameters
    ----------
    idata : arviz.InferenceData or dict of name -> InferenceData
        ``posterior.n_leaves`` (dims ``chain, draw`` and any tree dims) of one fit, or
        several fits drawn side by side (to compare families). For a mixture with
        assignments ``Z`` (BET), the trees that hold training rows.
    ax : matplotlib Axes, optional
    max_leaves : int, optional
        Largest leaf count shown (default: the largest drawn). Wide ranges are binned
        (about 40 bins); the bars then show the probability per leaf count (bin mass
        divided by the bin width), so they compare with exact per-count probabilities.

    Returns
    -------
    matplotlib Axes

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(size=(40, 2))
    >>> y = np.sin(6 * X[:, 0]) + 0.1 * rng.normal(size=40)
    >>> forest = bt.BayesianForestRegressor(draws=10, random_state=0).fit(X, y)
    >>> pcfg = bt.PCFGTreeRegressor(max_bins=4, draws=10, random_state=0).fit(X, y)
    >>> ax = bt.plots.plot_n_leaves({"forest": forest.idata_, "pcfg": pcfg.idata_})   # side by side
    >>> type(ax).__name__
    'Axes'
    """
    models = _as_models(idata)
    counts, per_tree = {}, False
    for k, v in models.items():
        da = _posterior_var(v, "n_leaves", "plot_n_leaves")
        occ = _occupied(v, da)
        if occ is None:
            counts[k] = np.asarray(da.values).ravel()
        else:  # a mixture: the trees that hold rows
            counts[k] = np.asarray(da.transpose("chain", "draw", "component").values)[occ]
            per_tree = True
    hi = max(int(c.max()) for c in counts.values()) if max_leaves is None else int(max_leaves)
    lo = min(min(int(c.min()) for c in counts.values()), hi)  # every draw above max_leaves: an empty plot
    step = max(1, int(np.ceil((hi - lo + 1) / 40)))  # at most about 40 bars per fit
    edges = np.arange(lo, hi + step + 1, step) - 0.5
    ax = _new_ax(ax, (6, 3.5))
    m = len(counts)
    for j, (name, c) in enumerate(counts.items()):
        p = np.histogram(c, bins=edges)[0] / c.size / step  # per leaf count; mass above max_leaves left out
        if m == 1:
            ax.stairs(p, edges, fill=True, color="C0", alpha=0.7, label=name or None)
            ax.stairs(p, edges, color="k", lw=0.6)
        else:
            ax.stairs(p, edges, fill=True, color=f"C{j}", alpha=0.25)
            ax.stairs(p, edges, color=f"C{j}", lw=1.5, label=name)
    ax.set_xlabel("number of leaves" + ((" per occupied tree" if m == 1 else " (mixtures: per occupied tree)")
                                        if per_tree else "")
                  + (f" (bins of {step})" if step > 1 else ""))
    ax.set_ylabel("posterior probability" + (" per leaf count" if step > 1 else ""))
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))  # integer ticks for any range
    ax.set_ylim(0, None)
    if m > 1:
        ax.legend(fontsize=8)
    return ax


def plot_variable_importance(idata, ax=None, *, kind: str = "share", prob: float = 0.9, max_features: int = 20):
    """Variable importance with uncertainty, from ``posterior.split_counts`` (dim ``feature``).

    Parameters
    ----------
    idata : arviz.InferenceData
        Any family's posterior (the contract's ``split_counts``); extra tree dims (a
        mixture's components) are summed within a draw, over the components that hold
        training rows when the posterior has BET's assignments ``Z``.
    ax : matplotlib Axes, optional
    kind : {"share", "counts", "inclusion"}, default "share"
        ``"share"``: the fraction of a draw's splits on each feature (bars: posterior
        mean; lines: equal-tailed ``prob`` interval over draws). ``"counts"``: the
        number of splits on each feature per draw, with the same interval.
        ``"inclusion"``: the posterior probability that a draw splits on the
        feature at all (bars), with a ``prob`` Jeffreys interval for the Monte
        Carlo error of that estimate from the number of draws (lines).
    prob : float, default 0.9
    max_features : int, default 20
        Show the most important features only.

    Returns
    -------
    matplotlib Axes

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(size=(40, 2))
    >>> y = np.sin(6 * X[:, 0]) + 0.1 * rng.normal(size=40)
    >>> forest = bt.BayesianForestRegressor(draws=10, random_state=0).fit(X, y)
    >>> ax = bt.plots.plot_variable_importance(forest.idata_, kind="share", prob=0.9)
    >>> type(ax).__name__
    'Axes'
    """
    if kind not in ("share", "counts", "inclusion"):
        raise ValueError(f"kind must be 'share', 'counts' or 'inclusion', got {kind!r}")
    lo_q, hi_q = _interval_bounds(prob)
    da = _posterior_var(idata, "split_counts", "plot_variable_importance")
    if "feature" not in da.dims:
        raise ValueError("posterior.split_counts has no 'feature' dimension")
    occ = _occupied(idata, da)
    if occ is not None:  # a mixture: only the trees that hold rows
        import xarray as xr

        da = da.where(xr.DataArray(occ, dims=("chain", "draw", "component")), 0)
    extra = [d for d in da.dims if d not in ("chain", "draw", "feature")]
    if extra:
        da = da.sum(extra)
    a = np.asarray(da.transpose("chain", "draw", "feature").values, float).reshape(-1, da.sizes["feature"])
    names = [str(v) for v in da["feature"].values]
    if kind == "share":
        tot = a.sum(1, keepdims=True)
        vals = np.where(tot > 0, a / np.maximum(tot, 1), 0.0)
        label = "share of splits"
    elif kind == "counts":
        vals = a
        label = "splits per draw"
    else:
        vals = (a > 0).astype(float)
        label = "inclusion probability"
    mean = vals.mean(0)
    if kind == "inclusion":
        from scipy.stats import beta

        k, n = vals.sum(0), vals.shape[0]
        lo = np.where(k > 0, beta.ppf(lo_q, k + 0.5, n - k + 0.5), 0.0)
        hi = np.where(k < n, beta.ppf(hi_q, k + 0.5, n - k + 0.5), 1.0)
    else:
        lo, hi = np.quantile(vals, [lo_q, hi_q], axis=0)
    order = np.argsort(mean)[::-1][:max_features][::-1]  # largest at the top
    ax = _new_ax(ax, (6, 0.9 + 0.3 * len(order)))
    y = np.arange(len(order))
    ax.barh(y, mean[order], color="C0", alpha=0.7)
    ax.hlines(y, lo[order], hi[order], color="k", lw=1.5)
    ax.set_yticks(y)
    ax.set_yticklabels([names[i] for i in order])
    ax.set_xlabel(f"{label}\n(bar: posterior mean; line: {int(round(prob * 100))}% interval)")
    ax.set_ylim(-0.6, len(order) - 0.4)
    if kind != "counts":
        ax.set_xlim(0, max(1e-9, min(1.0, float(hi[order].max()) * 1.1)))
    return ax


# ------------------------------------------------------------------------------------------------
# partial dependence
# ------------------------------------------------------------------------------------------------
def _columns(X):
    """``(list of 1-d columns, names, is_frame)``."""
    if hasattr(X, "columns"):
        return [X[c].to_numpy() for c in X.columns], [str(c) for c in X.columns], True
    arr = np.asarray(X)
    if arr.ndim != 2:
        raise ValueError(f"X must be 2-d, got shape {arr.shape}")
    return [arr[:, j] for j in range(arr.shape[1])], [f"x{j}" for j in range(arr.shape[1])], False


def _feature_index(f, names) -> int:
    if isinstance(f, (int, np.integer)):
        if not 0 <= int(f) < len(names):
            raise ValueError(f"feature index {f} out of range for {len(names)} features")
        return int(f)
    if f not in names:
        raise ValueError(f"feature {f!r} is not a column of X; columns: {names}")
    return names.index(f)


def _grid(col, n: int):
    numeric = np.issubdtype(np.asarray(col).dtype, np.number)
    if not numeric:
        return np.asarray(sorted(set(v for v in col.tolist() if v == v), key=str), dtype=object), False
    c = np.asarray(col, float)
    c = c[np.isfinite(c)]
    u = np.unique(c)
    if u.shape[0] <= n:
        return u, True
    return np.unique(np.quantile(c, np.linspace(0.02, 0.98, n))), True


def _pd_draws(estimator, X, cols: list[int], grids: list[np.ndarray], class_index):
    """Per-draw partial dependence on the product grid: ``(draws, len(g1)[, len(g2)])``."""
    if not hasattr(estimator, "predict_draws"):
        raise ValueError(f"{type(estimator).__name__} has no predict_draws; partial dependence with credible "
                         "bands needs posterior draws of the function (forests, Bayesian CART, BET)")
    import itertools

    is_frame = hasattr(X, "columns")
    combos = list(itertools.product(*grids))
    n = len(X)
    if is_frame:
        import pandas as pd

        big = pd.concat([X] * len(combos), ignore_index=True)
        for j, c in enumerate(cols):
            name = X.columns[c]
            vals = np.repeat(np.asarray([combo[j] for combo in combos], dtype=grids[j].dtype), n)
            big[name] = vals
    else:
        arr = np.asarray(X)
        big = np.tile(arr, (len(combos), 1)).astype(float if arr.dtype != object else object)
        for j, c in enumerate(cols):
            big[:, c] = np.repeat(np.asarray([combo[j] for combo in combos]), n)
    d = np.asarray(estimator.predict_draws(big), float)
    if d.ndim == 3:  # class probabilities
        d = d[..., class_index]
    d = d.reshape(d.shape[0], len(combos), n).mean(-1)
    return d.reshape((d.shape[0],) + tuple(len(g) for g in grids))


def plot_partial_dependence(estimator, X, features, ax=None, *, prob: float = 0.9, grid_resolution: int = 30,
                            max_rows: int = 200, class_index: int = -1, random_state=0, color=None, label=None,
                            rug: bool = True):
    """Partial dependence with a credible band, for one or two features.

    For every posterior draw of the function (``estimator.predict_draws``) the
    partial dependence at a grid value is the draw's prediction averaged over the
    rows of ``X`` with the feature(s) set to that value; the band is the
    equal-tailed ``prob`` interval of these curves over draws.

    Parameters
    ----------
    estimator : fitted estimator with ``predict_draws`` (forests, Bayesian CART, BET)
    X : array-like or DataFrame
        Rows to average over (at most ``max_rows``, drawn at random, are used).
    features : int, str or a pair of them
        One feature: a line with its band. Two features: two panels, the posterior
        mean on the grid (left) and the width of the ``prob`` interval (right).
    ax : Axes (one feature) or a pair of Axes (two features), optional
    prob : float, default 0.9
    grid_resolution : int, default 30
        Grid values per numeric feature (quantiles from 2% to 98%; all distinct
        values when there are fewer). Categorical features use their categories.
    max_rows : int, default 200
    class_index : int, default -1
        Classifiers: the class whose probability is shown (default: the last class).
    random_state : int, default 0
        Seed of the row subsample.
    color : matplotlib colour, optional
        Line and band colour (one feature), e.g. to overlay several estimators on one ``ax``.
    label : str, optional
        Prefix of the legend entries (one feature), e.g. the estimator's name.
    rug : bool, default True
        Mark the deciles of the feature's values along the bottom (one numeric feature).

    Returns
    -------
    matplotlib Axes, or a pair of Axes for two features

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(size=(40, 2))
    >>> y = np.sin(6 * X[:, 0]) + 0.1 * rng.normal(size=40)
    >>> forest = bt.BayesianForestRegressor(draws=10, random_state=0).fit(X, y)
    >>> ax = bt.plots.plot_partial_dependence(forest, X, 0, grid_resolution=10)
    >>> type(ax).__name__
    'Axes'
    >>> left, right = bt.plots.plot_partial_dependence(forest, X, (0, 1), grid_resolution=10)
    """
    plt = _plt()
    lo_q, hi_q = _interval_bounds(prob)
    feats = [features] if isinstance(features, (int, np.integer, str)) else list(features)
    if len(feats) not in (1, 2):
        raise ValueError(f"features must name one or two features, got {len(feats)}")
    cols_data, names, _ = _columns(X)
    cols = [_feature_index(f, names) for f in feats]
    n = cols_data[0].shape[0]
    if n == 0:
        raise ValueError("X has no rows")
    rows = np.random.default_rng(random_state).choice(n, size=min(n, max_rows), replace=False)
    Xs = X.iloc[np.sort(rows)] if hasattr(X, "iloc") else np.asarray(X)[np.sort(rows)]
    grids, numeric = zip(*[_grid(cols_data[c], grid_resolution) for c in cols])
    classes = getattr(estimator, "classes_", None)
    d = _pd_draws(estimator, Xs, cols, list(grids), class_index)
    ylab = "partial dependence" if classes is None else f"P(class = {classes[class_index]})"
    mean = d.mean(0)
    lo, hi = np.quantile(d, [lo_q, hi_q], axis=0)
    pct = f"{int(round(prob * 100))}%"
    if len(cols) == 1:
        ax = _new_ax(ax, (5.5, 3.5))
        g = grids[0]
        col = color if color is not None else "C0"
        pre = f"{label}: " if label else ""
        if numeric[0]:
            ax.fill_between(g, lo, hi, color=col, alpha=0.25, label=f"{pre}{pct} credible band")
            ax.plot(g, mean, color=col, lw=2, label=f"{pre}posterior mean")
            if rug:
                vals = np.asarray(cols_data[cols[0]], float)
                ymin = ax.get_ylim()[0]
                # the nine deciles (10% ... 90%), inside the grid's 2%-98% range: the minimum and
                # maximum would stretch the axis past the curve on a skewed feature
                ax.plot(np.quantile(vals[np.isfinite(vals)], np.linspace(0.1, 0.9, 9)), np.full(9, ymin), "|",
                        color="k", ms=8, label="deciles of the data")
        else:
            pos = np.arange(len(g))
            ax.errorbar(pos, mean, yerr=[mean - lo, hi - mean], fmt="o", color=col, capsize=3,
                        label=f"{pre}posterior mean, {pct} interval")
            ax.set_xticks(pos)
            ax.set_xticklabels([str(v) for v in g], rotation=30, ha="right")
        ax.set_xlabel(names[cols[0]])
        ax.set_ylabel(ylab)
        ax.legend(fontsize=7)
        return ax
    if ax is None:
        _, ax = plt.subplots(1, 2, figsize=(10, 3.8), layout="constrained")
    if len(ax) != 2:
        raise ValueError("two features need a pair of Axes (ax=[left, right])")
    if not (numeric[0] and numeric[1]):
        raise ValueError("two-feature partial dependence needs two numeric features")
    g1, g2 = grids
    for a, z, lab, cmap in ((ax[0], mean, f"posterior mean: {ylab}", "viridis"),
                            (ax[1], hi - lo, f"width of the {pct} interval", "magma")):
        m = a.pcolormesh(g1, g2, z.T, shading="nearest", cmap=cmap)
        a.figure.colorbar(m, ax=a, label=lab)
        a.set_xlabel(names[cols[0]])
        a.set_ylabel(names[cols[1]])
    return ax


# ------------------------------------------------------------------------------------------------
# family-specific
# ------------------------------------------------------------------------------------------------
def plot_operating_curve(curve, ax=None, *, m_marker=None, **line_kwargs):
    """Draw a safe-Bayes operating curve.

    Parameters
    ----------
    curve : dict
        ``operating_curve_`` of a fitted estimator, or the output of its
        ``operating_curve(X, y)``: keys ``m``, ``log_predictive`` and
        ``accuracy`` (classification) or ``rmse`` (regression).
    ax : sequence of two matplotlib Axes, optional
        Left: accuracy / RMSE; right: mean log predictive.  Created when omitted.
    m_marker : float, optional
        Mark this ``m`` (e.g. ``effective_sample_size_``) with a vertical line.
    **line_kwargs
        Passed to ``Axes.plot``.

    Returns
    -------
    the two Axes

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(size=(40, 2))
    >>> labels = np.where(X[:, 0] > 0.5, "high", "low")
    >>> clf = bt.SafeBayesForestClassifier(draws=50, random_state=0).fit(X, labels)
    >>> axes = bt.plots.plot_operating_curve(clf.operating_curve_, m_marker=clf.effective_sample_size_)
    >>> len(axes)                                  # accuracy, and mean log predictive, against m
    2
    """
    plt = _plt()
    if ax is None:
        _, ax = plt.subplots(1, 2, figsize=(9, 3.2), layout="constrained")
    m = np.asarray(curve["m"])
    first = "accuracy" if "accuracy" in curve else "rmse"
    ax[0].plot(m, np.asarray(curve[first]), **line_kwargs)
    ax[1].plot(m, np.asarray(curve["log_predictive"]), **line_kwargs)
    n_train = curve.get("n_train")
    for a, lab in zip(ax, (first.replace("rmse", "RMSE"), "mean log predictive (nats)")):
        a.set_xscale("log")
        a.set_xlabel("effective sample size m")
        a.set_ylabel(lab)
        if n_train is not None:
            a.axvline(float(n_train), color="0.6", ls="--", lw=1, label=f"m = N = {int(n_train)} (BMA)")
        if m_marker is not None:
            a.axvline(m_marker, color="k", ls=":", lw=1, label=f"chosen m = {float(m_marker):.3g}")
    if m_marker is not None or n_train is not None:
        ax[0].legend(fontsize=7)
    return ax


def plot_n_trees(idata, ax=None):
    """BET's number of occupied trees per draw, one trace per chain (``posterior.n_trees``).

    Parameters
    ----------
    idata : arviz.InferenceData with ``posterior.n_trees`` (dims ``chain, draw``)
    ax : matplotlib Axes, optional

    Returns
    -------
    matplotlib Axes

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(size=(40, 2))
    >>> y = np.sin(6 * X[:, 0]) + 0.1 * rng.normal(size=40)
    >>> reg = bt.BETRegressor(draws=20, tune=10, random_state=0).fit(X, y)   # a short run
    >>> ax = bt.plots.plot_n_trees(reg.idata_)
    >>> type(ax).__name__
    'Axes'
    """
    da = _posterior_var(idata, "n_trees", "plot_n_trees")
    a = np.asarray(da.transpose("chain", "draw").values)
    ax = _new_ax(ax, (6.5, 3))
    draws = np.asarray(da["draw"].values)
    for c in range(a.shape[0]):
        ax.step(draws, a[c], where="post", lw=1, color=f"C{c % 10}", alpha=0.8, label=f"chain {c}")
    ax.set_xlabel("draw")
    ax.set_ylabel("number of trees")
    from matplotlib.ticker import MaxNLocator

    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if a.shape[0] > 1:
        ax.legend(fontsize=7, ncol=min(a.shape[0], 4))
    return ax


def plot_xi_bar(idata, ax=None, *, prob: float = 0.9, max_features: int = 20):
    """BET's ``posterior.xi_bar`` per feature: posterior mean (bars) with an equal-tailed ``prob`` interval.

    Parameters
    ----------
    idata : arviz.InferenceData with ``posterior.xi_bar`` (dims ``chain, draw, feature``)
    ax : matplotlib Axes, optional
    prob : float, default 0.9
    max_features : int, default 20
        Show the features with the largest means only.

    Returns
    -------
    matplotlib Axes

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(size=(40, 2))
    >>> y = np.sin(6 * X[:, 0]) + 0.1 * rng.normal(size=40)
    >>> reg = bt.BETRegressor(draws=20, tune=10, random_state=0).fit(X, y)   # a short run
    >>> ax = bt.plots.plot_xi_bar(reg.idata_, prob=0.9)
    >>> type(ax).__name__
    'Axes'
    """
    lo_q, hi_q = _interval_bounds(prob)
    da = _posterior_var(idata, "xi_bar", "plot_xi_bar")
    if "feature" not in da.dims:
        raise ValueError("posterior.xi_bar has no 'feature' dimension")
    a = np.asarray(da.transpose("chain", "draw", "feature").values, float).reshape(-1, da.sizes["feature"])
    names = [str(v) for v in da["feature"].values]
    mean = a.mean(0)
    lo, hi = np.quantile(a, [lo_q, hi_q], axis=0)
    order = np.argsort(mean)[::-1][:max_features]
    ax = _new_ax(ax, (max(4.0, 0.5 * len(order) + 1.5), 3.2))
    x = np.arange(len(order))
    ax.bar(x, mean[order], color="C2", alpha=0.7, label="posterior mean")
    ax.errorbar(x, mean[order], yerr=[mean[order] - lo[order], hi[order] - mean[order]], fmt="none", ecolor="k",
                capsize=3, label=f"{int(round(prob * 100))}% interval")
    ax.set_xticks(x)
    ax.set_xticklabels([names[i] for i in order], rotation=30 if len(order) > 6 else 0,
                       ha="right" if len(order) > 6 else "center")
    ax.set_ylabel(r"$\bar\xi$ (variable-ranking probability)")
    ax.set_xlabel("feature")
    ax.legend(fontsize=7)
    return ax
