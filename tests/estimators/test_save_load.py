"""``save``/``bt.load`` round trips of the estimators not covered elsewhere: after loading, every
prediction equals the original's exactly.

Covered here: the BCART-PCFG estimators (each ``predict_with``), the Bayesian CART classifier,
BET (regressor and classifier), the empirical Bayesian and sub-sample forests (regressor and
classifier).  Elsewhere, in the same shape: the Bayesian forest regressor (``test_forest.py``),
the Bayesian CART regressor (``test_bcart_api.py``), the BET classifier's probabilities to
rounding (``test_bet_api.py``), both safe-Bayes estimators (``test_safebayes.py``), a forest
fitted on Dask (``test_distributed.py``) and the command line (``test_cli.py``).

Each model is saved straight after ``fit`` (before any prediction built a cache), loaded, and
then both predict: ``predict``, ``predict_proba``, ``predict_draws``, ``predict_interval`` and
the family's own outputs, compared with ``assert_array_equal``.  One test loads every file in a
fresh Python process, so a file does not lean on anything left in the process that wrote it.
"""
from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import bayestrees as bt
from bayestrees.convergence import ConvergenceWarning

ROOT = Path(__file__).resolve().parents[2]

_MCMC = dict(draws=40, tune=60, max_depth=2, max_bins=6, random_state=0)
_BET = dict(max_trees=3, active_trees=3, init_trees=2, min_leaf_rows=3)

#: name -> (estimator, task); settings as in ``test_predict_interval.py`` (the same programs)
MODELS = {
    "pcfg_reg": (lambda: bt.PCFGTreeRegressor(max_bins=6, draws=8, random_state=0), "regression"),
    "pcfg_clf": (lambda: bt.PCFGTreeClassifier(max_bins=6, draws=8, random_state=0), "classification"),
    "bcart_clf": (lambda: bt.BayesianCARTClassifier(chains=2, **_MCMC), "classification"),
    "bet_reg": (lambda: bt.BETRegressor(**_BET, **_MCMC), "regression"),
    "bet_clf": (lambda: bt.BETClassifier(**_BET, **_MCMC), "classification"),
    "ebf_reg": (lambda: bt.EmpiricalBayesianForestRegressor(draws=30, trunk_min_samples_leaf=20, min_samples_leaf=3,
                                                            random_state=0), "regression"),
    "ebf_clf": (lambda: bt.EmpiricalBayesianForestClassifier(draws=30, trunk_min_samples_leaf=20,
                                                             min_samples_leaf=3, random_state=0), "classification"),
    "ssf_reg": (lambda: bt.SubSampleForestRegressor(draws=30, n_blocks=3, min_samples_leaf=3, random_state=0),
                "regression"),
    "ssf_clf": (lambda: bt.SubSampleForestClassifier(draws=30, n_blocks=3, min_samples_leaf=3, random_state=0),
                "classification"),
}


def _data(task: str, n: int = 60, seed: int = 0):
    """The data of ``test_predict_interval.py``."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, 2))
    X[:, 0] = rng.integers(0, 6, n) / 6
    f = np.where(X[:, 0] < 0.5, -1.0, 1.0) + 0.5 * X[:, 1]
    if task == "regression":
        return X, 10.0 + f + 0.4 * rng.normal(size=n)
    return X, np.where(f + 0.5 * rng.normal(size=n) > 0.2, "b", "a")


#: rows to predict at: training rows and points between the training values
XQ = np.array([[0.0, 0.1], [1 / 6, 0.5], [0.5, 0.3], [5 / 6, 0.95], [0.25, 0.7], [0.6, 0.05]])


def _outputs(name: str, est) -> dict:
    """Every prediction the estimator offers, as numpy arrays (labels as strings)."""
    out = {"predict": np.asarray(est.predict(XQ))}
    if hasattr(est, "predict_proba"):
        out["predict_proba"] = np.asarray(est.predict_proba(XQ))
    if hasattr(est, "predict_draws"):
        out["predict_draws"] = np.asarray(est.predict_draws(XQ))
        out["predict_interval"] = np.asarray(est.predict_interval(XQ, 0.8))
    if name.startswith("pcfg"):
        for mode in ("map", "posterior", "samples"):
            est.set_params(predict_with=mode)
            out[f"predict_{mode}"] = np.asarray(est.predict(XQ))
            if hasattr(est, "predict_proba"):
                out[f"predict_proba_{mode}"] = np.asarray(est.predict_proba(XQ))
        est.set_params(predict_with="map")
        out["log_evidence"] = np.asarray(est.log_evidence_)
        out["n_leaves_posterior"] = np.asarray(est.n_leaves_posterior(8))
    if name.startswith("bet"):
        out["predict_cluster"] = np.asarray(est.predict_cluster())
        out["n_trees"] = np.asarray(est.n_trees_)
        out["xi_bar"] = np.asarray(est.xi_bar_)
    if name.startswith("bcart"):
        out["acceptance"] = np.asarray([est.acceptance_[k] for k in sorted(est.acceptance_)])
    out["mu"] = np.asarray(est.idata_.posterior["mu"].values)
    return {k: v.astype(str) if v.dtype.kind in "OU" else v for k, v in out.items()}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """Every model fitted and saved at once after ``fit``: ``{name: (estimator, path)}``."""
    folder = tmp_path_factory.mktemp("models")
    out = {}
    for name, (make, task) in MODELS.items():
        X, y = _data(task)
        with warnings.catch_warnings():   # short chains: ConvergenceWarning; BET's slice past max_trees: RuntimeWarning
            warnings.simplefilter("ignore", ConvergenceWarning)
            warnings.simplefilter("ignore", RuntimeWarning)
            est = make().fit(X, y)
        path = folder / f"{name}.pkl"
        est.save(path)
        out[name] = (est, path)
    return out


@pytest.mark.parametrize("name", list(MODELS))
def test_loaded_model_predicts_exactly_as_the_original(saved, name):
    est, path = saved[name]
    back = bt.load(path)
    assert type(back) is type(est) and back is not est
    assert back.get_params() == est.get_params()
    if hasattr(est, "classes_"):
        np.testing.assert_array_equal(back.classes_, est.classes_)
    want, got = _outputs(name, est), _outputs(name, back)
    assert set(got) == set(want)
    for k in want:
        assert got[k].dtype == want[k].dtype, k
        np.testing.assert_array_equal(got[k], want[k], err_msg=f"{name}: {k}")


_LOAD_SCRIPT = r'''
import json, sys
import numpy as np
sys.path.insert(0, "tests/estimators")
import bayestrees as bt
import test_save_load as T

paths, out = json.loads(sys.argv[1]), sys.argv[2]
arrays = {}
for name, path in paths.items():
    for k, v in T._outputs(name, bt.load(path)).items():
        arrays[f"{name}/{k}"] = v
np.savez(out, **arrays)
'''


def test_files_load_in_a_fresh_process(saved, tmp_path):
    """The files load and predict the same in a new Python process (nothing of the writer's process needed)."""
    paths = {name: str(path) for name, (_, path) in saved.items()}
    out = tmp_path / "outputs.npz"
    res = subprocess.run([sys.executable, "-c", _LOAD_SCRIPT, json.dumps(paths), str(out)], capture_output=True,
                         text=True, cwd=ROOT, timeout=600)
    assert res.returncode == 0, res.stderr[-4000:]
    with np.load(out) as z:
        got = {k: z[k] for k in z.files}
    for name, (est, _) in saved.items():
        for k, v in _outputs(name, est).items():
            np.testing.assert_array_equal(got[f"{name}/{k}"], v, err_msg=f"{name}: {k}")


def test_a_file_that_is_not_a_model_is_refused(tmp_path):
    import pickle

    path = tmp_path / "other.pkl"
    with open(path, "wb") as fh:
        pickle.dump({"weights": [1, 2, 3]}, fh)
    with pytest.raises(ValueError, match="not a bayestrees model file"):
        bt.load(path)
