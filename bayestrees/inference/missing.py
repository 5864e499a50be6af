"""Missing values in the samplers' rules: missingness incorporated in attributes (MIA), by coding.

A rule of a tree sampler is ``code <= t`` on one feature.  Missingness incorporated in attributes
(Twala, Jones & Hand 2008; BARTm, Kapelner & Bleich 2015) lets each rule on a feature with missing
values also say where the missing rows go.  Here that is a coding of the features, not a change of
the samplers: a feature ``j`` with missing values among the training rows becomes two columns,

* ``j<`` (missing left): a missing value has code 0 and a value of code ``c`` has ``c + 1``, so the
  rule ``code <= t`` sends the missing rows left with the values of code ``<= t - 1`` (``t = 0``:
  the missing rows alone go left);
* ``j>`` (missing right): a value keeps its code and a missing value has code ``n_bins_j``, above
  every value, so ``code <= t`` sends the missing rows right (``t = n_bins_j - 1``: every value
  left, the missing rows alone right);

and every other feature stays one column.  Each rule on the coded columns is a rule of the
original feature with its missing side, so a sampler that moves rules on the columns samples
trees with MIA rules, exactly, with the rule prior it has on the columns.  The split-variable
prior keeps each original feature's weight: a feature's two columns have weight ``1 / (2 d)``
each, the others ``1 / d`` (the weighted rule prior, :func:`split_log_weights`), so a rule on a
feature with missing values picks its missing side with probability 1/2 (BARTm's prior).

An unordered categorical feature split by subsets of its categories (``categorical``; the rules
of :mod:`bayestrees.inference.intervals`) keeps one column: a missing value is one more category,
code ``n_bins_j``, and a rule's category mask says where the missing rows go as it says it for
every other category.

New rows are coded the same way (:meth:`MissingRules.code`); a feature without missing training
values sends a new row's missing value right (the binner's missing code is above every threshold),
as the forests do where no training row of a node was missing.  :meth:`MissingRules.to_original`
turns a rule on the columns back into the original feature, threshold and ``missing_left`` of a
:class:`~bayestrees.tree.Tree`, whose routing (:func:`bayestrees.tree.apply`) then sends every row
where the coded rule sends it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import warnings

from ..data import TrainingData, missing_code
from . import heap, intervals, proposals

__all__ = ["MissingRules", "missing_rules", "split_log_weights", "subset_features", "MAX_SUBSET_CATEGORIES",
           "column_categories", "subset_attrs", "route_coded"]


@dataclass(frozen=True, eq=False)
class MissingRules:
    """The coding of the features with missing training values (module docstring).

    source : int (d',)  the original feature of each coded column
    missing_left : bool (d',)  the column sends missing rows left (its ``j<`` column)
    doubled : bool (d',)  the column is one of a feature's two
    n_bins : int (d,)  value bins of each original feature (``Binner.n_bins_``)
    missing : int  the binner's missing code
    categorical : bool (d,), optional  original features split by subsets of their categories
        (one column each, a missing value the category ``n_bins_j``)
    """

    source: np.ndarray
    missing_left: np.ndarray
    doubled: np.ndarray
    n_bins: np.ndarray
    missing: int
    categorical: np.ndarray | None = None

    @property
    def d(self) -> int:
        """Coded columns."""
        return int(self.source.shape[0])

    @property
    def d_original(self) -> int:
        return int(self.n_bins.shape[0])

    def code(self, codes) -> np.ndarray:
        """Coded columns ``(n, d')`` int32 of the binner's codes ``(n, d)``."""
        c = np.asarray(codes)
        if c.ndim != 2 or c.shape[1] != self.d_original:
            raise ValueError(f"codes must have shape (n, {self.d_original}), got {c.shape}")
        col = c[:, self.source].astype(np.int64)
        miss = col == self.missing
        left = np.where(miss, 0, col + 1)
        right = np.where(miss, self.n_bins[self.source], col)
        out = np.where(self.doubled, np.where(self.missing_left, left, right), col)
        if self.categorical is not None:
            out = np.where(self.categorical[self.source] & miss, self.n_bins[self.source], out)
        return np.ascontiguousarray(out.astype(np.int32))

    def to_original(self, feature, threshold):
        """``(feature, threshold, missing_left)`` of the original features from rules on the coded
        columns (any shape; ``feature < 0`` where a slot does not split): int32, int32, bool.  A
        rule of a subset-split feature keeps its category mask, less the missing category's bit,
        which becomes ``missing_left``."""
        f = np.asarray(feature).astype(np.int64)
        t = np.asarray(threshold).astype(np.int64)
        split = f >= 0
        fc = np.where(split, f, 0)
        left_col = self.missing_left[fc] & self.doubled[fc] & split
        orig = np.where(split, self.source[fc], -1).astype(np.int32)
        thr = np.where(left_col, t - 1, t).astype(np.int32)
        if self.categorical is not None:
            cat = split & self.categorical[self.source[fc]]
            bit = np.left_shift(1, self.n_bins[self.source[fc]])
            left_col = left_col | (cat & ((t & bit) != 0))
            thr = np.where(cat, t & ~bit, thr).astype(np.int32)
        return orig, np.where(split, thr, 0).astype(np.int32), left_col

    def split_counts(self, counts) -> np.ndarray:
        """Internal nodes per original feature from counts per coded column ``(..., d')``."""
        c = np.asarray(counts)
        out = np.zeros(c.shape[:-1] + (self.d_original,), c.dtype)
        for j in range(self.d):
            out[..., self.source[j]] += c[..., j]
        return out


def missing_rules(codes, n_bins, categorical=None) -> MissingRules | None:
    """The coding of :mod:`bayestrees.inference.missing` for training codes ``(n, d)`` with the binner's
    value bins per feature ``n_bins`` ``(d,)`` (``categorical``: bool (d,), the features split by
    subsets of their categories, whose missing values are one more category); None when no
    training value is missing."""
    c = np.asarray(codes)
    miss = missing_code(c.dtype)
    has = np.any(c == miss, axis=0)
    if not has.any():
        return None
    cat = np.zeros(c.shape[1], bool) if categorical is None else np.asarray(categorical, bool)
    source, left, doubled = [], [], []
    for j in range(c.shape[1]):
        two = bool(has[j]) and not cat[j]
        for side in ((True, False) if two else (False,)):
            source.append(j)
            left.append(side)
            doubled.append(two)
    return MissingRules(source=np.asarray(source, np.int64), missing_left=np.asarray(left, bool),
                        doubled=np.asarray(doubled, bool), n_bins=np.asarray(n_bins, np.int64), missing=int(miss),
                        categorical=cat if cat.any() else None)


def split_log_weights(rules: MissingRules) -> np.ndarray:
    """``log`` of the split-variable prior of the coded columns: ``1 / (2 d)`` for each of a feature's
    two columns, ``1 / d`` for the others (``d`` original features)."""
    d = rules.d_original
    return np.where(rules.doubled, -np.log(2.0 * d), -np.log(float(d)))


#: the most categories (a missing value counting as one) of a feature split by subsets
MAX_SUBSET_CATEGORIES = proposals.MAX_SUBSET_CATEGORIES


def subset_features(data: TrainingData) -> np.ndarray:
    """bool (d,): the categorical features split by subsets of their categories, those with at most
    :data:`MAX_SUBSET_CATEGORIES` categories (with one for missing values); a ``UserWarning`` names
    those with more, which keep their order by mean response."""
    feats = data.binner.features_
    miss = np.any(np.asarray(data.codes) == missing_code(np.asarray(data.codes).dtype), axis=0)
    out = np.zeros(data.d, bool)
    wide = []
    for j, fb in enumerate(feats):
        if fb.kind == "categorical":
            k = int(data.n_bins[j]) + int(miss[j])
            if k <= MAX_SUBSET_CATEGORIES:
                out[j] = True
            else:
                wide.append(f"{fb.name!r} ({k})")
    if wide:
        warnings.warn(f"categorical features with more than {MAX_SUBSET_CATEGORIES} categories split as values ordered by "
                      f"their mean response, not by subsets: {', '.join(wide)}; group rare categories to split by "
                      f"subsets", UserWarning, stacklevel=3)
    return out


def column_categories(codes, subsets, rules: MissingRules | None) -> np.ndarray | None:
    """The root category mask of each coded column of ``codes`` (:func:`bayestrees.inference.intervals.root_categories`)
    where its feature splits by subsets (``subsets``: bool (d,), :func:`subset_features`), 0 for the
    others; None when no feature does."""
    subsets = np.asarray(subsets, bool)
    if not subsets.any():
        return None
    return intervals.root_categories(codes, subsets[np.arange(subsets.size) if rules is None else rules.source])


def subset_attrs(categories, rules: MissingRules | None, feature_names) -> dict:
    """The InferenceData attribute naming the features split by subsets (``subset_split_features``,
    read by the plots), or ``{}`` when none is."""
    if categories is None:
        return {}
    names = sorted({feature_names[j if rules is None else int(rules.source[j])]
                    for j in np.flatnonzero(np.asarray(categories))})
    return {"subset_split_features": ", ".join(names)} if names else {}


def route_coded(feature, threshold, codes, max_depth: int, categories, rules: MissingRules | None) -> np.ndarray:
    """Leaf slots ``(..., n)`` of the binner's codes ``(n, d)`` under trees whose rules are on the coded
    columns (``feature``, ``threshold`` ``(..., S)``), category masks included
    (:func:`bayestrees.inference.heap.route_batch`)."""
    codes = np.asarray(codes)
    return heap.route_batch(feature, threshold, codes if rules is None else rules.code(codes), max_depth, categories)

