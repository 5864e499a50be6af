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


def _stumps(n_draws=3, capacity=7):
    """``n_draws`` stumps splitting feature 0 at code 2 (leaf values 0 and 2), in numpy."""
    left = np.full(capacity, -2, np.int32)
    right = left.copy()
    left[:3], right[:3] = [1, -1, -1], [2, -1, -1]
    feature = np.full(capacity, -1, np.int32)
    feature[0] = 0
    threshold = np.zeros(capacity, np.int32)
    threshold[0] = 2
    value = np.zeros((capacity, 1), np.float32)
    value[2, 0] = 2.0
    count = np.zeros(capacity, np.int32)
    count[:3] = [10, 6, 4]
    depth = np.array([0, 1, 1] + [0] * (capacity - 3), np.int32)
    one = bt.tree.Tree(feature, threshold, left, right, np.zeros(capacity, bool), value,
                       count.astype(np.float32), count, depth, np.int32(3))
    return bt.tree.Tree(*[np.stack([a] * n_draws) for a in one])


class _StepModel:
    """A stand-in estimator: draw ``d`` of the function is ``d + 2 * (x0 > 0.5)``."""

    def __init__(self, n_draws=5, classes=None):
        self.n_draws, self.classes_ = n_draws, classes

    def predict_draws(self, X):
        x0 = np.asarray(X, float)[:, 0]
        f = np.arange(self.n_draws)[:, None] + 2.0 * (x0 > 0.5)[None]
        if self.classes_ is None:
            return f
        p = 1 / (1 + np.exp(-f))
        return np.stack([1 - p, p], -1)


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
    big = az.from_dict(posterior={"n_leaves": np.full((1, 4), 30)})
    ax = plots.plot_n_leaves(big, max_leaves=12)  # every draw above the limit: nothing drawn, no error
    assert ax.patches[0].get_data().values.sum() == 0


def test_tree_from_a_tree_and_from_inferencedata():
    trees = _stumps()
    ax = plots.plot_tree(trees, index=1)
    assert [t.get_text() for t in ax.texts if "<=" in t.get_text()] == ["x0\n<= bin 2"]
    assert sorted(t.get_text() for t in ax.texts if "<=" not in t.get_text()) == ["0", "2"]  # leaf values
    idata = bt.convert.to_inferencedata(trees, family="test", task="regression", feature_names=["first", "second"])
    ax = plots.plot_tree(idata, draw=2)
    assert any(t.get_text().startswith("first") for t in ax.texts)  # names from constant_data
    with pytest.raises(ValueError, match="out of range"):
        plots.plot_tree(idata, draw=3)
    with pytest.raises(TypeError, match="Tree"):
        plots.plot_tree("not a tree")


def test_partial_dependence_one_and_two_features():
    r = np.random.default_rng(0)
    X = r.uniform(size=(40, 2))
    model = _StepModel(n_draws=5)
    ax = plots.plot_partial_dependence(model, X, 0, grid_resolution=8)
    g, mean = ax.get_lines()[0].get_data()
    np.testing.assert_allclose(mean, 2.0 + 2.0 * (g > 0.5))  # mean over draws 0..4 is 2
    band = ax.collections[0].get_paths()[0].vertices[:, 1]
    assert band.min() == pytest.approx(np.quantile(np.arange(5), 0.05)) and band.max() == pytest.approx(
        np.quantile(np.arange(5), 0.95) + 2.0)
    axes = plots.plot_partial_dependence(model, X, [0, 1], grid_resolution=4)
    assert len(axes) == 2 and axes[0].get_xlabel() == "x0" and axes[1].get_ylabel() == "x1"
    ax = plots.plot_partial_dependence(_StepModel(classes=np.array(["no", "yes"])), X, 0, grid_resolution=4)
    assert ax.get_ylabel() == "P(class = yes)"
    with pytest.raises(ValueError, match="out of range"):
        plots.plot_partial_dependence(model, X, 5)
    skewed = np.column_stack([r.exponential(size=200) ** 3, r.uniform(size=200)])  # a long right tail
    ax = plots.plot_partial_dependence(model, skewed, 0, grid_resolution=8)
    rug = [ln for ln in ax.get_lines() if ln.get_label() == "deciles of the data"][0]
    np.testing.assert_allclose(rug.get_xdata(), np.quantile(skewed[:, 0], np.linspace(0.1, 0.9, 9)))
    assert ax.dataLim.x1 <= np.quantile(skewed[:, 0], 0.98) + 1e-12  # the maximum does not stretch the axis
    with pytest.raises(ValueError, match="predict_draws"):
        plots.plot_partial_dependence(object(), X, 0)


def test_operating_curve_marks_bma_and_the_chosen_m():
    m = np.geomspace(1, 1e4, 30)
    curve = {"m": m, "accuracy": 0.7 + 0.1 * (m > 50), "log_predictive": -0.6 + 0.01 * np.log(m), "n_train": 200}
    ax = plots.plot_operating_curve(curve, m_marker=60.0)
    assert ax[0].get_xscale() == "log" and ax[0].get_ylabel() == "accuracy"
    labels = [t.get_text() for t in ax[0].get_legend().get_texts()]
    assert labels == ["m = N = 200 (BMA)", "chosen m = 60"]
    np.testing.assert_allclose(ax[1].get_lines()[0].get_ydata(), curve["log_predictive"])


def test_bt_plots_is_exported():
    assert bt.plots.plot_tree is plots.plot_tree


@pytest.mark.filterwarnings("ignore::bayestrees.convergence.ConvergenceWarning")  # a short run
def test_plot_tree_of_an_estimator_labels_a_subset_rule_by_its_categories():
    """A fitted estimator (not only its InferenceData) whose tree splits a categorical column by a
    subset: the box names the categories in the rule's mask, not the first ``mask + 1`` categories
    as an ordered threshold would."""
    import pandas as pd

    rng = np.random.default_rng(7)
    shop = rng.integers(0, 6, 120)
    y = np.where(np.isin(shop, [0, 2, 5]), 1.0, -1.0) + 0.1 * rng.normal(size=120)
    table = pd.DataFrame({"shop": pd.Categorical([f"s{k}" for k in shop])})
    est = bt.BayesianCARTRegressor(draws=20, tune=40, chains=1, max_depth=2, scheme="moves",
                                   random_state=0).fit(table, y)
    ax = plots.plot_tree(est, chain=0, draw=19, ax=plt.subplots(figsize=(8, 4))[1])
    mask = int(np.asarray(est.trees_.threshold)[0, 19, 0])
    assert np.asarray(est.trees_.feature)[0, 19, 0] == 0
    want = est.binner_.features_[0].subset_label(mask)
    assert 0 < bin(mask).count("1") < 6 and any(want in t.get_text() for t in ax.texts), \
        (want, [t.get_text() for t in ax.texts])
