"""Every family through the same posterior-contract checks (docs/design.md, "The posterior contract")."""
import arviz as az
import numpy as np
import pytest

import bayestrees as bt


def _clf_data(n=90, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.integers(0, 5, size=(n, 3)).astype(float)
    y = np.where((X[:, 0] >= 2) ^ (rng.random(n) < 0.1), "yes", "no")
    return X, y


def _reg_data(n=90, seed=1):
    rng = np.random.default_rng(seed)
    X = rng.integers(0, 5, size=(n, 3)).astype(float)
    y = np.where(X[:, 0] >= 2, 1.5, -1.5) + 0.4 * rng.normal(size=n)
    return X, y


FAMILIES = {
    "forest": dict(clf=lambda: bt.BayesianForestClassifier(draws=8, min_samples_leaf=3, random_state=0),
                   reg=lambda: bt.BayesianForestRegressor(draws=8, min_samples_leaf=3, random_state=0),
                   likelihood=False, sigma=False),
    "pcfg": dict(clf=lambda: bt.PCFGTreeClassifier(max_bins=5, draws=40, random_state=0),
                 reg=lambda: bt.PCFGTreeRegressor(max_bins=5, draws=40, random_state=0),
                 likelihood=True, sigma=False),
    "safebayes": dict(clf=lambda: bt.SafeBayesForestClassifier(draws=200, random_state=0),
                      reg=lambda: bt.SafeBayesForestRegressor(draws=200, random_state=0),
                      likelihood=True, sigma=False),
    "bcart": dict(clf=lambda: bt.BayesianCARTClassifier(draws=40, tune=200, chains=2, max_depth=3, max_bins=5,
                                                        random_state=0),
                  reg=lambda: bt.BayesianCARTRegressor(draws=40, tune=200, chains=2, max_depth=3, max_bins=5,
                                                       random_state=0),
                  likelihood=True, sigma=True),
    "bet": dict(clf=lambda: bt.BETClassifier(draws=30, tune=60, max_trees=4, max_depth=3, max_bins=5, random_state=0),
                reg=lambda: bt.BETRegressor(draws=30, tune=60, max_trees=4, max_depth=3, max_bins=5, random_state=0),
                likelihood=True, sigma=False, extra={"n_trees", "n_components", "w", "Z", "xi", "xi_bar"}),
    "bart": dict(clf=lambda: bt.BARTClassifier(m=10, draws=40, tune=100, chains=2, max_depth=3, max_bins=5,
                                               random_state=0),
                 reg=lambda: bt.BARTRegressor(m=10, draws=40, tune=100, chains=2, max_depth=3, max_bins=5,
                                              random_state=0),
                 likelihood=True, sigma=True),
}

_FITS = {}


def _fit(family, task):
    if (family, task) not in _FITS:
        X, y = _clf_data() if task == "clf" else _reg_data()
        _FITS[family, task] = (FAMILIES[family][task]().fit(X, y), X, y)
    return _FITS[family, task]


@pytest.mark.parametrize("task", ["clf", "reg"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_contract(family, task, tmp_path):
    est, X, y = _fit(family, task)
    spec = FAMILIES[family]
    idata = est.idata_
    groups = set(idata.groups())
    assert {"posterior", "trees", "observed_data", "constant_data"} <= groups
    assert ("log_likelihood" in groups) == spec["likelihood"]
    post = idata.posterior
    allowed = {"n_leaves", "depth", "split_counts", "mu"} | ({"sigma"} if spec["sigma"] and task == "reg" else set())
    allowed |= spec.get("extra", set())
    assert set(post.data_vars) == allowed
    assert list(post["split_counts"].coords["feature"].values) == ["x0", "x1", "x2"]
    assert post["mu"].dims == (("chain", "draw", "obs", "class") if task == "clf" else ("chain", "draw", "obs"))
    assert post["mu"].sizes["obs"] == len(y)
    assert list(idata.constant_data["feature_names"].values) == ["x0", "x1", "x2"]
    np.testing.assert_array_equal(np.asarray(idata.observed_data["y"]).astype(str), np.asarray(y).astype(str))
    # az.summary with no arguments prints only the meaningful quantities
    rows = az.summary(idata, kind="stats").index
    assert {r.split("[")[0] for r in rows} == allowed
    # trees round trip through NetCDF and still predict like the estimator's draws
    path = tmp_path / "idata.nc"
    idata.to_netcdf(str(path))
    back = az.from_netcdf(str(path))
    trees = bt.convert.trees_from_inferencedata(back)
    assert trees.feature.shape[:2] == (post.sizes["chain"], post.sizes["draw"])
    assert np.array_equal(np.asarray(trees.left), np.asarray(bt.convert.trees_from_inferencedata(idata).left))
    if spec["likelihood"]:
        ll = idata.log_likelihood["y"]
        assert ll.dims == ("chain", "draw", "obs") and np.all(np.isfinite(ll.values))
        assert np.isfinite(bt.loo(idata).elpd_loo)
    else:
        with pytest.raises(ValueError, match="likelihood"):
            bt.loo(idata)
    for g in groups:
        assert idata[g].attrs.get("family"), g


def test_compare_across_families():
    models = {name: _fit(name, "clf")[0].idata_ for name in ("pcfg", "safebayes", "bcart", "bet")}
    cmp = bt.compare(models)
    assert set(cmp.index) == set(models) and np.all(np.isfinite(cmp["elpd_loo"]))
    with pytest.raises(ValueError, match="Bayesian bootstrap"):
        bt.compare({**models, "forest": _fit("forest", "clf")[0].idata_})
