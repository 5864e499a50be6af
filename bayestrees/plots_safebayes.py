"""Plots for the safe-Bayesian random forest (matplotlib is imported only when a plot is drawn).

- :func:`plot_operating_curve`: accuracy (or RMSE) and mean log predictive against
  the effective sample size ``m`` (log axis), with BMA at ``m = N``.
- :func:`plot_extreme_trees`: the trees with the highest and lowest weights, leaves
  coloured by their class proportions (Quadrianto & Ghahramani 2015, Figure 3).
- :func:`plot_tree`: one tree of the shared :class:`bayestrees.tree.Tree` on an axis.
"""
from __future__ import annotations

import numpy as np

from .tree import index_tree, tree_to_numpy

__all__ = ["plot_operating_curve", "plot_tree", "plot_extreme_trees"]


def _plt():
    try:
        import matplotlib.pyplot as plt
    except ImportError as e:  # pragma: no cover - optional dependency
        raise ImportError("plotting needs matplotlib: pip install 'bayestrees[plot]'") from e
    return plt


def plot_operating_curve(curve, ax=None, *, m_marker=None, **line_kwargs):
    """Draw an operating curve.

    Parameters
    ----------
    curve : dict
        ``operating_curve_`` of a fitted estimator, or the output of its
        ``operating_curve(X, y)``: keys ``m``, ``log_predictive`` and
        ``accuracy`` (classification) or ``rmse`` (regression).
    ax : sequence of two matplotlib axes, optional
        Left: accuracy / RMSE; right: mean log predictive.  Created when omitted.
    m_marker : float, optional
        Mark this ``m`` (e.g. ``effective_sample_size_``) with a vertical line.

    Returns
    -------
    the two axes
    """
    plt = _plt()
    if ax is None:
        _, ax = plt.subplots(1, 2, figsize=(9, 3.2))
    m = np.asarray(curve["m"])
    first = "accuracy" if "accuracy" in curve else "rmse"
    ax[0].plot(m, np.asarray(curve[first]), **line_kwargs)
    ax[1].plot(m, np.asarray(curve["log_predictive"]), **line_kwargs)
    for a, lab in zip(ax, (first.replace("rmse", "RMSE"), "mean log predictive")):
        a.set_xscale("log")
        a.set_xlabel("effective sample size m  (m = N: BMA)")
        a.set_ylabel(lab)
        if m_marker is not None:
            a.axvline(m_marker, color="k", ls=":", lw=1)
    return ax


def plot_tree(tree, ax=None, *, binner=None, class_colors=None, title=None, max_nodes=31):
    """Draw one tree: internal nodes as split labels, leaves as boxes coloured by class proportions.

    Parameters
    ----------
    tree : Tree  one tree (no batch axis), classification values (probabilities) or regression
    ax : matplotlib axis, optional
    binner : bayestrees.data.Binner, optional  to label splits with feature names and values
    class_colors : list of colours, optional  one per class
    max_nodes : int  trees with more used nodes are drawn without labels
    """
    plt = _plt()
    t = tree_to_numpy(tree)
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4))
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
    depth = t.depth[:n]
    C = t.value.shape[-1]
    if class_colors is None:
        cmap = plt.get_cmap("tab10")
        class_colors = [cmap(c % 10) for c in range(C)]
    rgb = np.array([plt.matplotlib.colors.to_rgb(c) for c in class_colors]) if C > 1 else None
    labels = int(used.sum()) <= max_nodes
    for i in np.flatnonzero(used):
        if t.left[i] >= 0:
            for ch in (int(t.left[i]), int(t.right[i])):
                ax.plot([x[i], x[ch]], [-depth[i], -depth[ch]], color="0.6", lw=0.8, zorder=1)
    for i in np.flatnonzero(used):
        if t.left[i] >= 0:
            if labels:
                f, th = int(t.feature[i]), int(t.threshold[i])
                lab = f"{binner.features_[f].name} {binner.features_[f].threshold_label(th)}" if binner else \
                    f"x{f} <= bin {th}"
                ax.text(x[i], -depth[i], lab, ha="center", va="center", fontsize=6,
                        bbox=dict(boxstyle="round", fc="white", ec="0.5", lw=0.5), zorder=3)
            else:
                ax.plot(x[i], -depth[i], "o", color="0.4", ms=2, zorder=2)
        else:
            v = np.asarray(t.value[i])
            if rgb is not None:
                col = np.clip(v @ rgb, 0, 1) if t.count[i] > 0 else (0.92, 0.92, 0.92)
            else:
                col = "C0"
            ax.scatter([x[i]], [-depth[i]], s=60 if labels else 12, color=[col], edgecolor="k", lw=0.5, marker="s",
                       zorder=3)
            if labels and t.count[i] > 0:
                ax.text(x[i], -depth[i] - 0.35, str(int(t.count[i])), ha="center", va="top", fontsize=5)
    ax.set_axis_off()
    if title:
        ax.set_title(title, fontsize=8)
    return ax


def plot_extreme_trees(estimator, n=3, *, figsize=None, class_colors=None):
    """The ``n`` trees with the highest and the ``n`` with the lowest weights (paper Figure 3).

    Parameters
    ----------
    estimator : fitted SafeBayesForestClassifier / Regressor
    n : int  trees per row

    Returns
    -------
    matplotlib figure (top row: highest weights, bottom row: lowest)
    """
    plt = _plt()
    lw = np.asarray(estimator.log_weights_)
    order = np.argsort(lw)
    top, bottom = order[::-1][:n], order[:n]
    fig, axes = plt.subplots(2, n, figsize=figsize or (4 * n, 6), squeeze=False)
    for row, idx in enumerate((top, bottom)):
        for col, k in enumerate(idx):
            plot_tree(index_tree(estimator.trees_, int(k)), axes[row, col], binner=estimator.binner_,
                      class_colors=class_colors,
                      title=f"tree {int(k)}: log w = {lw[k]:.1f}" + (" (highest)" if row == 0 else " (lowest)"))
    return fig
