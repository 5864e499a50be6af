"""Restructuring moves no result: fixed fits of every family give bit-identical outputs.

A fixed list of fits (every family, both tasks where the family has both, fixed seeds, the
Bayesian CART update schemes and tempering) is run, and every array that a user sees is hashed: the predictions on new rows
and every variable of the InferenceData groups (``posterior``, ``trees``, ``sample_stats``,
``log_likelihood``, ``observed_data``, ``constant_data``).  The hashes were recorded in
``tests/results_digests.json`` before the code was moved (the package restructure of
issue 27), and this test recomputes them.

Bit identity is a property of one compiler: the same jax/jaxlib and the same XLA flags give
the same floating-point programs.  The record is therefore keyed by the jax version and the
XLA flags, and the test is skipped (saying why) under a toolchain with no record.  To record
for the current toolchain, after checking by other means that nothing moved::

    BAYESTREES_RECORD_DIGESTS=1 python -m pytest tests/test_results_unchanged.py

A variable renamed on purpose is listed in ``RENAMED`` (new name -> recorded name) so that its
values are still compared.
"""
from __future__ import annotations

import hashlib
import json
import os
import warnings
from pathlib import Path

import jax
import numpy as np
import pytest

import bayestrees as bt

RECORD = Path(__file__).with_name("results_digests.json")
GROUPS = ("posterior", "trees", "sample_stats", "log_likelihood", "observed_data", "constant_data")

#: ``{fit name: {"group/new": "group/recorded"}}``: variables renamed on purpose since the record
RENAMED: dict[str, dict[str, str]] = {
    # BET: n_trees now counts the model's trees (components of at least q = min_leaf_rows rows); the
    # former n_trees, every occupied component, is n_components
    "bet_reg": {"posterior/n_components": "posterior/n_trees"},
    "bet_clf": {"posterior/n_components": "posterior/n_trees"},
}

#: sample_stats variables that measure time, not results
TIMING = {"sampling_time", "time", "elapsed"}


def _data(task: str, n: int = 60, p: int = 3, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n + 20, p))
    if task == "regression":
        y = 2.0 * (X[:, 0] > 0.5) + X[:, 1] + 0.3 * rng.normal(size=n + 20)
    else:
        y = (X[:, 0] + 0.3 * rng.normal(size=n + 20) > 0.5).astype(int) + (X[:, 1] > 0.7)
    return X[:n], y[:n], X[n:]


def _fits():
    """``{name: (task, estimator factory)}``: the fixed list, every family and task."""
    mcmc = dict(draws=30, tune=30, chains=2, random_state=0)
    return {
        "bf_reg": ("regression", lambda: bt.BayesianForestRegressor(draws=6, random_state=0, n_jobs=1)),
        "bf_clf": ("classification", lambda: bt.BayesianForestClassifier(draws=6, random_state=1, n_jobs=1)),
        "ebf_reg": ("regression", lambda: bt.EmpiricalBayesianForestRegressor(
            draws=6, trunk_min_samples_leaf=20, random_state=2, n_jobs=1)),
        "ssf_clf": ("classification", lambda: bt.SubSampleForestClassifier(
            draws=6, n_blocks=2, random_state=3, n_jobs=1)),
        "pcfg_reg": ("regression", lambda: bt.PCFGTreeRegressor(max_bins=6, draws=20, random_state=0)),
        "pcfg_clf": ("classification", lambda: bt.PCFGTreeClassifier(max_bins=6, draws=20, random_state=1,
                                                                     predict_with="samples")),
        "safebayes_reg": ("regression", lambda: bt.SafeBayesForestRegressor(
            draws=200, effective_sample_size=30, random_state=0)),
        "safebayes_clf": ("classification", lambda: bt.SafeBayesForestClassifier(
            draws=200, effective_sample_size=30, random_state=1)),
        # the local moves, the default scheme when these were recorded (the default is now particle Gibbs)
        "bcart_reg": ("regression", lambda: bt.BayesianCARTRegressor(scheme="moves", **mcmc)),
        "bcart_clf": ("classification", lambda: bt.BayesianCARTClassifier(scheme="moves", **mcmc)),
        "bcart_pgibbs": ("regression", lambda: bt.BayesianCARTRegressor(scheme="pgibbs", particles=4, **mcmc)),
        "bcart_sweep": ("classification", lambda: bt.BayesianCARTClassifier(scheme="sweep", **mcmc)),
        "bcart_tempered": ("regression", lambda: bt.BayesianCARTRegressor(scheme="moves", temperatures=(1.0, 0.5),
                                                                              **mcmc)),
        "bet_reg": ("regression", lambda: bt.BETRegressor(max_trees=4, active_trees=2, init_trees=2, **mcmc)),
        "bet_clf": ("classification", lambda: bt.BETClassifier(max_trees=4, active_trees=2, init_trees=2, **mcmc)),
    }


def _digest(a) -> str:
    a = np.ascontiguousarray(np.asarray(a))
    h = hashlib.sha256(f"{a.dtype.str}{a.shape}".encode())
    if a.dtype.kind == "O":
        h.update(repr(a.tolist()).encode())
    else:
        h.update(a.tobytes())
    return h.hexdigest()[:24]


def digests(name: str) -> dict[str, str]:
    """Hash of every output of the fit ``name``: predictions and InferenceData variables."""
    task, make = _fits()[name]
    X, y, X_new = _data(task)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = make().fit(X, y)
    out = {"predict": _digest(est.predict(X_new))}
    if task == "classification":
        out["predict_proba"] = _digest(est.predict_proba(X_new))
    idata = est.idata_
    for group in GROUPS:
        if not hasattr(idata, group):
            continue
        ds = getattr(idata, group)
        for var in sorted(ds.data_vars):
            if group == "sample_stats" and var in TIMING:
                continue
            out[f"{group}/{var}"] = _digest(ds[var].values)
    return out


def toolchain() -> str:
    """The key of the record: jax and jaxlib versions and the XLA flags in force."""
    import jaxlib

    flags = " ".join(sorted(os.environ.get("XLA_FLAGS", "").split()))
    return f"jax {jax.__version__} jaxlib {jaxlib.__version__} x64 {jax.config.jax_enable_x64} | {flags}"


def _record() -> dict:
    return json.loads(RECORD.read_text()) if RECORD.exists() else {}


@pytest.mark.parametrize("name", sorted(_fits()))
def test_fit_outputs_are_bit_identical_to_the_record(name):
    got = digests(name)
    if os.environ.get("BAYESTREES_RECORD_DIGESTS"):
        # each process writes its own file; merged by hand (pytest-xdist workers would race)
        path = RECORD.with_name(f"results_digests.{os.getpid()}.json")
        rec = json.loads(path.read_text()) if path.exists() else {}
        rec.setdefault(toolchain(), {})[name] = got
        path.write_text(json.dumps(rec, indent=1, sort_keys=True))
        return
    record = _record().get(toolchain())
    if record is None:
        pytest.skip(f"no digests recorded for this toolchain ({toolchain()}); see the module docstring")
    want = record[name]
    renamed = RENAMED.get(name, {})
    # a recorded name that a renamed variable now holds is compared under it, not under its new meaning
    got = {renamed.get(k, k): v for k, v in got.items() if k in renamed or k not in renamed.values()}
    missing = sorted(set(want) - set(got))
    changed = sorted(k for k in want if k in got and got[k] != want[k])
    assert not missing, f"{name}: outputs no longer produced: {missing}"
    assert not changed, f"{name}: outputs that moved: {changed}"
