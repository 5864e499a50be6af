"""Posterior views of a forest: a forest is a sample of trees from a posterior.

* :func:`summarize_draws`: posterior mean and equal-tailed credible intervals of
  the predictions (one prediction per tree draw).
* :func:`trunk_stability`: the paper's trunk analysis (Taddy et al. 2015): fit
  the *sample trunk* (CART on unweighted data with a large minimum leaf) and
  ``n_draws`` Bayesian-bootstrap trunks with the same settings; report how often
  each distinct trunk structure occurs among the draws, whether the sample trunk
  is among them, and the posterior of each split's feature and location.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import jax
import numpy as np

from .data import Binner, check_y_classification, check_y_regression, missing_code, standardize_response
from .inference.forest.bootstrap import fit_forest
from .inference.forest.cart import CARTConfig, default_capacity, prepare_codes
from .keys import make_key
from .tree import Tree, index_tree, trunk_signature

__all__ = ["summarize_draws", "TrunkStability", "trunk_stability", "split_posterior"]


def summarize_draws(draws, prob: float = 0.9) -> dict:
    """Mean, sd and equal-tailed ``prob`` interval over the leading (draw) axis."""
    draws = np.asarray(draws)
    lo, hi = np.quantile(draws, [(1 - prob) / 2, (1 + prob) / 2], axis=0)
    return {"mean": draws.mean(0), "sd": draws.std(0), "lower": lo, "upper": hi}


def _feature_signature(sig):
    """Drop thresholds from a trunk signature: structure and features only."""
    if sig is None:
        return None
    f, _t, left, right = sig
    return (f, _feature_signature(left), _feature_signature(right))


def split_posterior(trees: Tree, levels: int, binner: Binner | None = None) -> dict:
    """Posterior of the split at each node position of the top ``levels`` levels.

    Node positions are paths from the root ("" root, "L", "R", "LL", ...).
    Returns ``{path: {"p_split": float, "feature": Counter, "threshold": {feature: list}}}``
    where thresholds are reported in feature units when a ``binner`` is given.
    """
    t = jax.tree_util.tree_map(np.asarray, trees)
    B = t.feature.shape[0]
    out: dict = {}
    for b in range(B):
        stack = [(0, "")]
        while stack:
            node, path = stack.pop()
            entry = out.setdefault(path, {"n_split": 0, "feature": Counter(), "threshold": {}})
            if len(path) >= levels or t.left[b, node] < 0:
                continue
            f, th = int(t.feature[b, node]), int(t.threshold[b, node])
            entry["n_split"] += 1
            entry["feature"][f] += 1
            val = binner.features_[f].threshold_value(th) if binner is not None else th
            entry["threshold"].setdefault(f, []).append(val)
            stack.append((int(t.left[b, node]), path + "L"))
            stack.append((int(t.right[b, node]), path + "R"))
    for entry in out.values():
        entry["p_split"] = entry["n_split"] / B
    return out


@dataclass
class TrunkStability:
    """Result of :func:`trunk_stability`."""

    levels: int
    sample_trunk: Tree
    draws: Tree
    frequencies: list = field(default_factory=list)  # [(signature, count)] by features+structure
    sample_trunk_frequency: float = 0.0  # share of draws with the sample trunk's structure and features
    sample_trunk_exact_frequency: float = 0.0  # ... and identical threshold codes
    root_feature_frequency: dict = field(default_factory=dict)
    splits: dict = field(default_factory=dict)
    feature_names: list = field(default_factory=list)

    def table(self, top: int = 5) -> str:
        """A plain-text report."""
        names = self.feature_names
        lines = [f"trunk stability over {self.draws.feature.shape[0]} draws (top {self.levels} levels)",
                 f"  sample trunk (features+structure) in {100 * self.sample_trunk_frequency:.1f}% of draws; "
                 f"with identical split locations in {100 * self.sample_trunk_exact_frequency:.1f}%",
                 "  root split feature: " + ", ".join(
                     f"{names[f] if names else f}: {100 * p:.0f}%" for f, p in self.root_feature_frequency.items())]
        for i, (sig, c) in enumerate(self.frequencies[:top]):
            lines.append(f"  #{i + 1}: {c} draws  {_render(sig, names)}")
        return "\n".join(lines)


def _render(sig, names):
    if sig is None:
        return "leaf"
    f, left, right = sig
    nm = names[f] if names else f"x{f}"
    if left is None and right is None:
        return nm
    return f"{nm}({_render(left, names)}, {_render(right, names)})"


def trunk_stability(X, y, *, trunk_min_samples_leaf: int, n_draws: int = 100, levels: int | None = None,
                    task: str = "regression", max_bins: int = 1024, random_state=None,
                    n_jobs: int | None = None) -> TrunkStability:
    """Trunk-stability analysis of Taddy et al. (2015), Section 4.

    Parameters
    ----------
    X, y : training data
    trunk_min_samples_leaf : minimum rows per trunk leaf (the paper uses 3500 on California housing)
    n_draws : Bayesian-bootstrap trunks to draw
    levels : compare the top ``levels`` levels (default: the depth of the sample trunk)
    task : "regression" or "classification"

    Returns
    -------
    TrunkStability
    """
    binner = Binner(max_bins=max_bins)
    if task == "regression":
        yy = check_y_regression(y)
        codes = binner.fit_transform(X, yy)
        ytrain, mu, sd = standardize_response(yy, np.float32)
        ncls = 0
        crit = "squared_error"
    elif task == "classification":
        yy, classes = check_y_classification(y)
        codes = binner.fit_transform(X, yy, classification=True)
        mu, sd, ytrain, ncls = 0.0, 1.0, yy, len(classes)
        crit = "gini"
    else:
        raise ValueError(f"task must be 'regression' or 'classification', got {task!r}")
    n = codes.shape[0]
    if n < 2 * trunk_min_samples_leaf:
        raise ValueError(f"{n} rows cannot make a trunk with leaves of >= {trunk_min_samples_leaf} rows")
    miss = missing_code(codes.dtype)
    cfg = CARTConfig(criterion=crit, n_classes=ncls, min_samples_leaf=int(trunk_min_samples_leaf),
                     capacity=default_capacity(n, int(trunk_min_samples_leaf)),
                     has_missing=bool((codes == miss).any()), missing=miss)
    prep = prepare_codes(codes)
    key = make_key(random_state)
    sample = fit_forest(key, prep, ytrain, cfg, 1, "none", y_shift=mu, y_scale=sd)
    draws = fit_forest(key, prep, ytrain, cfg, n_draws, "exponential", y_shift=mu, y_scale=sd, n_jobs=n_jobs)
    sample_t = index_tree(sample, 0)
    if levels is None:
        levels = int(np.max(np.where(np.asarray(sample_t.is_leaf()), np.asarray(sample_t.depth), 0)))
    s_sig = trunk_signature(sample_t, levels)
    s_feat = _feature_signature(s_sig)
    sigs = [trunk_signature(index_tree(draws, b), levels) for b in range(n_draws)]
    fsigs = [_feature_signature(s) for s in sigs]
    counts = Counter(fsigs).most_common()
    root = Counter(int(np.asarray(draws.feature)[b, 0]) for b in range(n_draws))
    return TrunkStability(
        levels=levels, sample_trunk=sample_t, draws=draws, frequencies=counts,
        sample_trunk_frequency=sum(f == s_feat for f in fsigs) / n_draws,
        sample_trunk_exact_frequency=sum(s == s_sig for s in sigs) / n_draws,
        root_feature_frequency={f: c / n_draws for f, c in root.most_common()},
        splits=split_posterior(draws, levels, binner),
        feature_names=list(binner.feature_names_in_),
    )
