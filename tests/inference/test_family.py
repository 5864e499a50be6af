"""The family protocol and the one vocabulary (``bayestrees.inference.family``, ``bayestrees.families``)."""
import inspect
import warnings

import numpy as np
import pytest

import bayestrees as bt
from bayestrees.families import REGISTRY, get_family, presets
from bayestrees.inference.family import Family, config_defaults, config_help

ESTIMATORS = [
    bt.BayesianForestRegressor, bt.BayesianForestClassifier, bt.EmpiricalBayesianForestRegressor,
    bt.EmpiricalBayesianForestClassifier, bt.SubSampleForestRegressor, bt.SubSampleForestClassifier,
    bt.PCFGTreeRegressor, bt.PCFGTreeClassifier, bt.SafeBayesForestRegressor, bt.SafeBayesForestClassifier,
    bt.BayesianCARTRegressor, bt.BayesianCARTClassifier, bt.BETRegressor, bt.BETClassifier,
    bt.BARTRegressor, bt.BARTClassifier,
]


def test_registry_holds_every_family_once():
    assert sorted(REGISTRY) == ["bart", "bayesian_cart", "bayesian_forest", "bet", "pcfg", "safe_bayes"]
    for name, fam in REGISTRY.items():
        assert isinstance(fam, Family) and fam.name == name
        assert {"draws", "chains"} <= set(config_defaults(fam.config)), name
        assert fam.likelihood or fam.no_likelihood, name
    assert get_family("bet") is REGISTRY["bet"]
    with pytest.raises(ValueError, match="the families are"):
        get_family("gbm")
    assert set(presets()) == {"bf", "ebf", "ssf", "rf", "dt", "et", "pcfg", "safebayes", "bcart", "bet", "bart"}


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_estimator_defaults_are_the_configs(cls):
    """The config dataclass is the single source of the defaults: an estimator parameter named as a
    config field has the field's default (a None on either side means "resolved by the task")."""
    defaults = config_defaults(cls._family.config)
    sig = inspect.signature(cls.__init__).parameters
    shared = [k for k in sig if k in defaults]
    assert "draws" in shared
    for k in shared:
        est, cfg = sig[k].default, defaults[k]
        if est is None or cfg is None:
            continue
        assert est == cfg, f"{cls.__name__}.{k}: estimator default {est!r}, config default {cfg!r}"


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_one_place_for_the_result_and_one_idata_rule(cls):
    """Every estimator fits through the one ``FamilyEstimator.fit`` (its body ``_fit``) and builds
    ``idata_`` by it.  The forests' ``fit`` adds Dask input, BART's the row weights and the rows to
    predict at (``sample_weight``, ``X_predict``), both before calling it."""
    from bayestrees.estimators.base import FamilyEstimator

    assert issubclass(cls, FamilyEstimator)
    assert cls._fit is FamilyEstimator._fit
    assert cls.fit is FamilyEstimator.fit or cls.fit.__qualname__.startswith(("_ForestMixin", "_BARTMixin"))


#: (estimator or model class, old name, new name, value)
OLD_NAMES = [
    (bt.BayesianForestRegressor, "n_estimators", "draws", 7),
    (bt.SafeBayesForestClassifier, "n_estimators", "draws", 7),
    (bt.SafeBayesForestClassifier, "alpha", "leaf_concentration", 0.5),
    (bt.PCFGTreeClassifier, "n_samples", "draws", 7),
    (bt.PCFGTreeClassifier, "alpha", "leaf_concentration", 0.5),
    (bt.PCFGTreeRegressor, "n_samples", "draws", 7),
    (bt.BayesianCARTClassifier, "alpha_leaves", "leaf_concentration", 0.5),
    (bt.BETClassifier, "alpha_leaves", "leaf_concentration", 0.25),
]


@pytest.mark.parametrize("cls, old, new, value", OLD_NAMES, ids=lambda v: getattr(v, "__name__", str(v)))
def test_old_estimator_names_warn_and_still_work(cls, old, new, value):
    from sklearn.base import clone

    est = cls(**{old: value})
    assert clone(est).get_params()[old] == value                # get_params/clone keep the old parameter
    with pytest.warns(FutureWarning, match=f"'{old}' is renamed '{new}'"):
        config = est._config()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert config == cls(**{new: value})._config()
    with pytest.raises(TypeError, match=f"give '{new}' only"):
        cls(**{old: value, new: value})._config()


@pytest.mark.parametrize("cls, old, new, value", [
    (bt.PCFGTree, "alpha", "leaf_concentration", 0.5),
    (bt.PCFGTree, "nig_prior", "leaf_prior", (0.0, 1.0, 2.0, 2.0)),
    (bt.SafeBayesForest, "alpha", "leaf_concentration", 0.5),
    (bt.BayesianCART, "alpha_leaves", "leaf_concentration", 0.5),
    (bt.BETMixture, "alpha_leaves", "leaf_concentration", 0.5),
], ids=lambda v: getattr(v, "__name__", str(v)))
def test_old_model_names_warn_and_still_work(cls, old, new, value):
    X = np.random.default_rng(0).uniform(size=(40, 2))
    y = (X[:, 0] > 0.5).astype(int) if new == "leaf_concentration" else X[:, 0]
    with bt.Model():
        with pytest.warns(FutureWarning, match=f"'{old}' is renamed '{new}'"):
            rv = cls("f", X, y, **{old: value})
    with bt.Model():
        assert cls("f", X, y, **{new: value}).config == rv.config


def test_model_variables_take_the_configs_fields_and_refuse_others():
    X = np.random.default_rng(0).uniform(size=(40, 2))
    with bt.Model():
        with pytest.raises(ValueError, match="unknown parameter"):
            bt.BETMixture("f", X, X[:, 0], alpha_leaf=1.0)
        with pytest.raises(ValueError, match="set by bt.sample"):
            bt.BayesianCART("f", X, X[:, 0], draws=10)
        rv = bt.BayesianCART("g", X, X[:, 0], temperatures=(1.0, 0.5))   # every config field is a parameter
        assert rv.config.temperatures == (1.0, 0.5)


def test_every_config_field_has_help():
    for fam in REGISTRY.values():
        helps = config_help(fam.config)
        missing = sorted(set(config_defaults(fam.config)) - set(helps))
        assert not missing, f"{fam.name}: no help for {missing}"
        assert all(helps.values()), fam.name


def test_bet_n_trees_counts_components_of_at_least_q_rows():
    from bayestrees.inference.bet import component_rows

    rng = np.random.default_rng(3)
    X = rng.uniform(size=(80, 2))
    y = np.where(X[:, 0] > 0.5, 2.0, -2.0) + 0.3 * rng.normal(size=80)
    q = 12
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # slice overflow notices
        est = bt.BETRegressor(max_trees=6, min_leaf_rows=q, draws=20, tune=20, alpha_dp=3.0, max_depth=2,
                              max_bins=8, random_state=0).fit(X, y)
    post = est.idata_.posterior
    z = np.asarray(post["Z"])
    rows = component_rows(z, 6)
    assert rows.sum(-1).tolist() == np.full(z.shape[:2], 80).tolist()
    np.testing.assert_array_equal(np.asarray(post["n_trees"]), (rows >= q).sum(-1))
    np.testing.assert_array_equal(np.asarray(post["n_components"]), (rows > 0).sum(-1))
    assert np.all(post["n_trees"] <= post["n_components"])
    np.testing.assert_array_equal(est.n_trees_, np.asarray(post["n_trees"]))
    np.testing.assert_array_equal(est.n_components_, np.asarray(post["n_components"]))
