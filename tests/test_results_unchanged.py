"""Restructuring moves no result: fixed fits of every family give bit-identical outputs.

A fixed list of fits (every family, both tasks where the family has both, fixed seeds, the
Bayesian CART update schemes and tempering) is run, and every array that a user sees is hashed: the predictions on new rows
and every variable of the InferenceData groups (``posterior``, ``trees``, ``sample_stats``,
``log_likelihood``, ``observed_data``, ``constant_data``).  The hashes were recorded in
``tests/results_digests.json`` before the code was moved (the package restructure of
issue 27), and this test recomputes them.

Bit identity is a property of one compiler on one kind of processor: the same jax/jaxlib, the
same XLA flags and the same vector instructions give the same floating-point programs (XLA's CPU
kernel libraries choose their code by the processor's features).  The record is therefore keyed
by the jax version, the XLA flags and the processor's architecture and vector features, and the
test is skipped (saying why) where there is no record.  The fits' own results are kept
independent of the matrix kernels where that was found to matter (the forests' prefix sums add in
a fixed order; ``docs/lab-notes``).  To record for the current toolchain and processor, after
checking by other means that nothing moved::

    BAYESTREES_RECORD_DIGESTS=1 python -m pytest tests/test_results_unchanged.py

A fit whose outputs moved on purpose is recorded again on the processor at hand and removed from
the other processors' records, where it is then skipped until recorded there.

A variable renamed on purpose is listed in ``RENAMED`` (new name -> recorded name) so that its
values are still compared.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import warnings
from pathlib import Path

import jax
import numpy as np
import pytest

import bayestrees as bt

RECORD = Path(__file__).with_name("results_digests.json")
GROUPS = ("posterior", "trees", "sample_stats", "log_likelihood", "observed_data", "constant_data")

#: ``{fit name: {"group/new": "group/recorded"}}``: variables renamed on purpose since the record
RENAMED: dict[str, dict[str, str]] = {}

#: sample_stats variables that measure time, not results
TIMING = {"sampling_time", "time", "elapsed"}


def _data(task: str, n: int = 60, p: int = 3, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n + 20, p))
    if task in ("regression", "weighted", "named_rows"):
        y = 2.0 * (X[:, 0] > 0.5) + X[:, 1] + 0.3 * rng.normal(size=n + 20)
    elif task == "counts":
        y = rng.poisson(np.exp(0.5 + np.sin(3 * X[:, 0]))).astype(np.float32)
    elif task == "binary":
        y = (X[:, 0] + 0.3 * rng.normal(size=n + 20) > 0.5).astype(int)
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
        # the paper's sweep alone, the default when these were recorded (the default now adds a regrowth)
        "bet_reg": ("regression", lambda: bt.BETRegressor(max_trees=4, active_trees=2, init_trees=2, particles=0,
                                                          **mcmc)),
        "bet_clf": ("classification", lambda: bt.BETClassifier(max_trees=4, active_trees=2, init_trees=2, particles=0,
                                                               **mcmc)),
        # BART (recorded before the tree-sampling core was joined into one)
        "bart_reg": ("regression", lambda: bt.BARTRegressor(m=8, **mcmc)),
        "bart_probit": ("binary", lambda: bt.BARTClassifier(m=8, **mcmc)),
        "bart_weights": ("weighted", lambda: bt.BARTRegressor(m=8, **mcmc)),
        "bart_sparse": ("regression", lambda: bt.BARTRegressor(m=8, sparse=True, **mcmc)),
        "bart_slides": ("regression", lambda: bt.BARTRegressor(m=8, slide=2, move_probs=(0.4, 0.4, 0.2, 0.0),
                                                               **mcmc)),
        "bart_no_trees": ("named_rows", lambda: bt.BARTRegressor(m=8, keep_trees=False, **mcmc)),
        # tree functions in NumPyro models: the conjugate Normal path, the Gamma-Poisson leaves, the general
        # (Laplace) path, several outputs
        "treefn_normal": ("regression", _treefn_normal),
        "treefn_gamma_poisson": ("counts", lambda: _treefn_poisson("loggamma")),
        "treefn_general": ("counts", lambda: _treefn_poisson("normal")),
        "treefn_outputs": ("classification", _treefn_outputs),
    }


class _ModelFit:
    """A NumPyro model with tree functions, fitted by ``bt.sample_model``: ``fit(X, y)``, ``idata_``."""

    def __init__(self, model, **kw):
        self.model, self.kw = model, kw

    def fit(self, X, y):
        self.idata_ = bt.sample_model(self.model, X, y, draws=30, tune=30, chains=2, random_seed=0, **self.kw).idata
        return self


def _treefn_normal():
    import numpyro
    import numpyro.distributions as dist

    def model(X, y=None):
        sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
        f = bt.bart_function("f", X, m=4, max_depth=3, min_leaf_rows=2)
        numpyro.sample("y", dist.Normal(f, sigma), obs=y)

    return _ModelFit(model, slide=0)   # grow and prune, the default of sums of trees when this was recorded


def _treefn_poisson(leaf_prior: str):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    def model(X, y=None):
        f = bt.bart_function("f", X, m=4, max_depth=3, min_leaf_rows=2, leaf_prior=leaf_prior)
        numpyro.sample("y", dist.Poisson(jnp.exp(f)), obs=y)

    return _ModelFit(model, slide=0)   # grow and prune, the default of sums on this path when this was recorded


def _treefn_outputs():
    import numpyro
    import numpyro.distributions as dist

    def model(X, y=None):
        f = bt.bart_function("f", X, m=3, outputs=3, max_depth=3)
        numpyro.sample("y", dist.Categorical(logits=f), obs=y)

    return _ModelFit(model, slide=0)   # grow and prune, the default of sums on this path when this was recorded


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
        est = make()
        if task == "weighted":
            est.fit(X, y, sample_weight=1.0 + (np.arange(len(y)) % 3))
        elif task == "named_rows":   # no trees kept: the new rows are named when fitting
            est.fit(X, y, X_predict=X_new)
        else:
            est.fit(X, y)
    out = {}
    if not isinstance(est, _ModelFit):
        out["predict"] = _digest(est.predict(X_new))
        if task in ("classification", "binary"):
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


def processor() -> str:
    """The processor's architecture and the vector instructions XLA's code and kernels may use.

    XLA compiles for the host it runs on, and its CPU kernel libraries pick their code by the
    processor's features at run time, so one toolchain can round differently on two processors.
    The vendor is part of the key: an Intel Xeon and an AMD EPYC with the same vector extensions
    (AVX-512) gave different leaf values for 12 of the 25 fits under one toolchain (LLVM tunes
    its code for the host's processor, not only for its instruction set).
    """
    arch = platform.machine() or "unknown"
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return f"{arch} {platform.processor()}".strip()
    flags, vendor = set(), ""
    for line in text.splitlines():
        if line.startswith(("flags", "Features")) and not flags:
            flags = set(line.split(":", 1)[1].split())
        elif line.startswith(("vendor_id", "CPU implementer")) and not vendor:
            vendor = line.split(":", 1)[1].strip()
    simd = [f for f in ("avx512f", "avx2", "fma", "asimd", "sve") if f in flags]
    return " ".join([arch] + simd + ([vendor] if vendor else []))


def toolchain() -> str:
    """The key of the record: jax and jaxlib versions, the XLA flags in force, the processor."""
    import jaxlib

    flags = " ".join(sorted(os.environ.get("XLA_FLAGS", "").split()))
    return (f"jax {jax.__version__} jaxlib {jaxlib.__version__} x64 {jax.config.jax_enable_x64} | {flags}"
            f" | cpu {processor()}")


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
    if name not in record:   # a fit whose outputs moved on purpose, recorded again on another processor only
        pytest.skip(f"no digests of {name} recorded for this toolchain ({toolchain()}); see the module docstring")
    want = record[name]
    renamed = RENAMED.get(name, {})
    # a recorded name that a renamed variable now holds is compared under it, not under its new meaning
    got = {renamed.get(k, k): v for k, v in got.items() if k in renamed or k not in renamed.values()}
    missing = sorted(set(want) - set(got))
    changed = sorted(k for k in want if k in got and got[k] != want[k])
    assert not missing, f"{name}: outputs no longer produced: {missing}"
    assert not changed, f"{name}: outputs that moved: {changed}"
