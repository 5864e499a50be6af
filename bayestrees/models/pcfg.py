"""``bt.PCFGTree``: the BCART-PCFG tree random variable for the model context.

>>> with bt.Model():
...     X = bt.Data("X", X_train)
...     t = bt.PCFGTree("t", X, y_train, log_phi=2.0, alpha=1.0, max_bins=10)
...     idata = bt.sample(draws=500, random_seed=0)      # exact independent posterior trees
...     bt.set_data({"X": X_test})
...     bt.sample_posterior_predictive(idata, extend_inferencedata=True, predictions=True)

``kind`` is ``"classification"`` (Dirichlet leaves; labels of any type) or
``"regression"`` (Normal-inverse-gamma leaves); by default it is inferred:
float targets with non-integer values mean regression.  After sampling,
``t.posterior_`` holds the exact posterior (MAP tree, evidence, predictive).
"""
from __future__ import annotations

import jax
import numpy as np

from ..data import check_X, check_y_classification, check_y_regression
from ..estimators.pcfg import bin_for_pcfg, pcfg_idata
from ..inference.pcfg import resolve_dtype
from ..inference.pcfg_posterior import check_alpha, check_phi, fit_posterior
from ..inference.pcfg_structure import DEFAULT_MEMORY_BUDGET
from ..tree import predict as tree_predict
from ..convert import trees_from_inferencedata
from .base import TreeRV

__all__ = ["PCFGTree"]


class PCFGTree(TreeRV):
    """Exact posterior over decision trees (Sullivan et al.) as a model variable.

    Parameters
    ----------
    name : str
    X : Data or array (n, d)
    y : array (n,)
    log_phi : float, default 2.0
    alpha : float or array (n_classes,), default 1.0
    max_bins : int, default 10
    kind : {"classification", "regression", None}
    method : {"box", "row"}, default "box"
    memory_budget : int or None, default 4 GB
    dtype : {"float32", "float64"}, default "float32"
        Precision of the exact programme; float64 needs
        ``jax.config.update("jax_enable_x64", True)`` first (``ValueError`` otherwise).
    """

    family = "pcfg"

    def __init__(self, name, X, y, *, log_phi=2.0, alpha=1.0, max_bins=10, kind=None, method="box",
                 memory_budget=DEFAULT_MEMORY_BUDGET, dtype="float32", model=None):
        super().__init__(name, X, y, model=model, log_phi=log_phi, alpha=alpha, max_bins=max_bins, kind=kind,
                         method=method, memory_budget=memory_budget, dtype=dtype)
        check_phi(log_phi)
        resolve_dtype(dtype)
        if kind not in (None, "classification", "regression"):
            raise ValueError(f"kind must be 'classification', 'regression' or None, got {kind!r}")
        self.posterior_ = None

    def _kind(self, y):
        k = self.params["kind"]
        if k is not None:
            return k
        arr = np.asarray(y)
        if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and not np.all(arr == np.round(arr)):
            return "regression"
        return "classification"

    def _fit(self, key, draws, chains, progressbar):
        p = self.params
        X, y = self.X_value, self.y_value
        kind = self._kind(y)
        if kind == "classification":
            codes_y, classes = check_y_classification(y, len(X))
            self.classes_ = classes
            kw = dict(alpha=check_alpha(p["alpha"], len(classes)), n_classes=len(classes))
        else:
            codes_y = check_y_regression(y, len(X))
            self.classes_ = None
            kw = {}
        binner, codes, nb = bin_for_pcfg(X, p["max_bins"], codes_y, kind == "classification")
        self.binner_ = binner
        post = fit_posterior(codes, nb, codes_y, kind=kind, log_phi=p["log_phi"], method=p["method"],
                             memory_budget=p["memory_budget"], dtype=p["dtype"], **kw)
        self.posterior_ = post
        self.kind_ = kind
        names = None if self.classes_ is None else [str(c) for c in self.classes_]
        idata = pcfg_idata(post, key, draws, chains, output_names=names)
        self.fitted_ = True
        return idata

    def _predict_draws(self, idata, X, key):
        check_X(X, allow_nan=False)
        codes = self.binner_.transform(X).astype(np.int32)
        trees = trees_from_inferencedata(idata)
        vals = np.asarray(tree_predict(trees, codes))           # (chain, draw, n, V)
        if self.kind_ == "classification":
            logits = np.log(np.maximum(vals, 1e-300))
            lab = np.asarray(jax.random.categorical(key, logits, axis=-1))
            out = {self.name: self.classes_[lab], f"{self.name}_proba": vals}
            dims = {self.name: ["obs"], f"{self.name}_proba": ["obs", "output"]}
        else:
            out = {f"{self.name}_mu": vals[..., 0]}
            dims = {f"{self.name}_mu": ["obs"]}
        return out, dims
