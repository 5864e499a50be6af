"""bayestrees.plots: every plot draws on ``ax=``, returns its Axes, and shows what it claims."""
import arviz as az
import numpy as np
import pytest

import bayestrees as bt

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from bayestrees import plots  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def forest():
    """A small forest regressor on two features, the first one carrying the signal."""
    r = np.random.default_rng(0)
    X = r.uniform(size=(80, 2))
    y = np.where(X[:, 0] < 0.5, 0.0, 2.0) + 0.1 * r.normal(size=80)
    return bt.BayesianForestRegressor(n_estimators=8, min_samples_leaf=5, random_state=0).fit(X, y), X, y


def _hand_built(n_chains=2, n_draws=30, d=3, seed=1):
    """InferenceData with BET's names (n_trees, xi_bar) and the contract's n_leaves / split_counts."""
    r = np.random.default_rng(seed)
    xi = r.dirichlet([8.0, 3.0, 1.0][:d], size=(n_chains, n_draws))
    return az.from_dict(
        posterior={"n_trees": r.integers(1, 5, size=(n_chains, n_draws)),
                   "xi_bar": xi,
                   "n_leaves": r.integers(1, 7, size=(n_chains, n_draws)),
                   "split_counts": r.poisson([3.0, 1.0, 0.2][:d], size=(n_chains, n_draws, d))},
        dims={"xi_bar": ["feature"], "split_counts": ["feature"]},
        coords={"feature": ["a", "b", "c"][:d]},
    )


def test_bet_plots_on_hand_built_inferencedata():
    idata = _hand_built()
    ax = plots.plot_n_trees(idata)
    assert len(ax.get_lines()) == 2  # one trace per chain
    np.testing.assert_array_equal(ax.get_lines()[1].get_ydata(), idata.posterior.n_trees.values[1])
    assert ax.get_xlabel() == "draw" and ax.get_ylabel() == "number of trees"
    fig, given = plt.subplots()
    ax = plots.plot_xi_bar(idata, ax=given)
    assert ax is given
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels[0] == "a"  # largest posterior mean first
    heights = [p.get_height() for p in ax.patches]
    np.testing.assert_allclose(heights[0], idata.posterior.xi_bar.sel(feature="a").mean().item())


def test_bet_plots_name_the_missing_variable():
    idata = az.from_dict(posterior={"n_leaves": np.ones((1, 5))})
    with pytest.raises(ValueError, match="n_trees"):
        plots.plot_n_trees(idata)
    with pytest.raises(ValueError, match="xi_bar"):
        plots.plot_xi_bar(idata)
    with pytest.raises(TypeError, match="InferenceData"):
        plots.plot_xi_bar({"xi_bar": 1})


def test_variable_importance_kinds():
    idata = _hand_built(d=3)
    counts = idata.posterior.split_counts.values.reshape(-1, 3)
    for kind, expected in (("counts", counts.mean(0)), ("inclusion", (counts > 0).mean(0))):
        ax = plots.plot_variable_importance(idata, kind=kind)
        names = [t.get_text() for t in ax.get_yticklabels()]
        widths = dict(zip(names, [p.get_width() for p in ax.patches]))
        for j, f in enumerate("abc"):
            np.testing.assert_allclose(widths[f], expected[j])
    ax = plots.plot_variable_importance(idata)  # share of splits: a draw's shares sum to 1
    assert ax.get_xlabel().startswith("share of splits") and ax.get_xlim()[1] <= 1.0
    with pytest.raises(ValueError, match="kind"):
        plots.plot_variable_importance(idata, kind="gain")


def test_n_leaves_one_fit_and_a_comparison():
    a, b = _hand_built(seed=1), _hand_built(seed=2)
    ax = plots.plot_n_leaves(a)
    assert ax.get_xlabel() == "number of leaves" and ax.get_ylabel() == "posterior probability"
    ax = plots.plot_n_leaves({"first": a, "second": b})
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["first", "second"]


def test_tree_from_estimator_and_from_inferencedata(forest):
    est, X, _ = forest
    ax = plots.plot_tree(est, index=2)
    assert ax.texts, "a small tree is drawn with split labels"
    assert any("x0" in t.get_text() for t in ax.texts)
    ax = plots.plot_tree(est.idata_, draw=2, feature_names=["first", "second"])
    assert any("first" in t.get_text() for t in ax.texts)
    with pytest.raises(ValueError, match="out of range"):
        plots.plot_tree(est.idata_, draw=99)


def test_partial_dependence_one_and_two_features(forest):
    est, X, _ = forest
    ax = plots.plot_partial_dependence(est, X, 0, grid_resolution=8)
    line = ax.get_lines()[0]
    y = line.get_ydata()
    assert y[-1] - y[0] > 1.0  # the step from 0 to 2 in the first feature
    axes = plots.plot_partial_dependence(est, X, [0, 1], grid_resolution=5)
    assert len(axes) == 2 and axes[0].get_xlabel() == "x0" and axes[1].get_ylabel() == "x1"
    with pytest.raises(ValueError, match="out of range"):
        plots.plot_partial_dependence(est, X, 5)
    with pytest.raises(ValueError, match="predict_draws"):
        plots.plot_partial_dependence(object(), X, 0)


def test_safebayes_operating_curve_and_extreme_trees():
    rng = np.random.default_rng(12)
    X = rng.normal(size=(50, 2))
    y = (X[:, 0] > 0).astype(int)
    clf = bt.SafeBayesForestClassifier(40, max_internal=31, random_state=0).fit(X, y)
    ax = plots.plot_operating_curve(clf.operating_curve_, m_marker=clf.effective_sample_size_)
    assert len(ax) == 2 and ax[0].get_xscale() == "log"
    fig = plots.plot_extreme_trees(clf, n=2)
    assert len(fig.axes) == 4
    top = int(np.argmax(clf.log_weights_))
    assert str(top) in fig.axes[0].get_title()


def test_bt_plots_is_exported():
    assert bt.plots.plot_tree is plots.plot_tree
