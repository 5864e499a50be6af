"""The command line: `bayestrees fit`, `predict`, `summary`, `plot` on CSV files, `demo`, `--help`,
and one-line errors for bad files and column names."""
import arviz as az
import numpy as np
import pandas as pd
import pytest

import bayestrees as bt
from bayestrees.cli import MODELS, build_parser, main, make_estimator


def test_help_lists_the_commands(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    out = capsys.readouterr().out
    for command in ("demo", "fit", "predict", "summary", "plot"):
        assert command in out


def _expect_error(capsys, argv, fragment):
    """``main(argv)`` fails with exit status 2 and one line on stderr that contains ``fragment``."""
    capsys.readouterr()
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], err
    assert "Traceback" not in err


def test_fit_writes_summary_posterior_and_model(tmp_path, capsys):
    r = np.random.default_rng(0)
    df = pd.DataFrame({"a": r.normal(size=120), "b": r.normal(size=120), "c": r.choice(["u", "v"], 120)})
    df["price"] = 3 * df["a"] + (df["c"] == "u") + 0.1 * r.normal(size=120)
    csv = tmp_path / "data.csv"
    df.to_csv(csv, index=False)
    out = tmp_path / "fit"
    rc = main(["fit", str(csv), "--target", "price", "--model", "bf", "--n-estimators", "6",
               "--min-samples-leaf", "3", "--n-jobs", "2", "--out", str(out), "--quiet"])
    assert rc == 0
    summary = (out / "summary.txt").read_text()
    assert "in-sample RMSE" in summary and "n_leaves" in summary
    idata = az.from_netcdf(str(out / "posterior.nc"))
    assert idata.posterior.sizes["draw"] == 6
    model = bt.load(out / "model.pkl")
    assert model.n_jobs == 2
    pred = model.predict(df.drop(columns="price"))
    assert np.sqrt(np.mean((pred - df["price"]) ** 2)) < 1.0
    # predict from the command line: columns found by name (order and the target column do not matter)
    new = df[["c", "price", "b", "a"]].iloc[:30]
    new.to_csv(tmp_path / "new.csv", index=False)
    rc = main(["predict", str(out / "model.pkl"), str(tmp_path / "new.csv"), "--out", str(tmp_path / "p.csv"),
               "--prob", "0.8"])
    assert rc == 0
    p = pd.read_csv(tmp_path / "p.csv")
    assert list(p.columns) == ["mean", "lower_80", "upper_80"] and len(p) == 30
    np.testing.assert_allclose(p["mean"], pred[:30], rtol=1e-5)
    assert np.all(p["lower_80"] <= p["mean"] + 1e-6) and np.all(p["mean"] <= p["upper_80"] + 1e-6)
    # a feature column missing from the new data: one line, exit status 2
    new.drop(columns="b").to_csv(tmp_path / "bad.csv", index=False)
    _expect_error(capsys, ["predict", str(out / "model.pkl"), str(tmp_path / "bad.csv")], "['b'] not in")


def test_fit_bcart_from_the_command_line(tmp_path, capsys):
    r = np.random.default_rng(1)
    df = pd.DataFrame({"a": r.integers(0, 6, 90) / 6, "b": r.normal(size=90), "g": r.choice(list("pqr"), 90)})
    df["y"] = np.where(df["a"] < 0.5, 0.0, 3.0) + 0.2 * r.normal(size=90)
    X = df[["a", "b", "g"]]
    csv = tmp_path / "d.csv"
    df.to_csv(csv, index=False)
    out = tmp_path / "bc"
    rc = main(["fit", str(csv), "--target", "y", "--model", "bcart", "--draws", "40", "--tune", "200",
               "--chains", "2", "--out", str(out), "--quiet"])
    assert rc == 0
    assert "sigma" in (out / "summary.txt").read_text()
    idata = az.from_netcdf(str(out / "posterior.nc"))
    assert idata.posterior.sizes["chain"] == 2 and idata.posterior.sizes["draw"] == 40
    assert "log_likelihood" in idata.groups()
    assert idata.posterior.attrs["subset_split_features"] == "g"   # a string column splits by subsets
    model = bt.load(out / "model.pkl")
    assert np.sqrt(np.mean((model.predict(X) - df["y"]) ** 2)) < 0.6
    # fit -> predict -> summary -> plot on the files the fit wrote
    rc = main(["predict", str(out / "model.pkl"), str(csv), "--out", str(tmp_path / "pred.csv")])
    assert rc == 0
    p = pd.read_csv(tmp_path / "pred.csv")
    np.testing.assert_allclose(p["mean"], model.predict(X), rtol=1e-5)
    assert np.all(p["upper_90"] > p["lower_90"])
    capsys.readouterr()
    assert main(["summary", str(out / "posterior.nc")]) == 0
    text = capsys.readouterr().out
    for part in ("bayesian_cart", "2 chain(s) x 40 draw(s)", "r_hat", "ess_bulk", "convergence (R-hat", "n_leaves",
                 "acceptance rates: mixed", "LOO: elpd_loo"):
        assert part in text, part
    figs = tmp_path / "figs"
    assert main(["plot", str(out / "posterior.nc"), "--model", str(out / "model.pkl"), "--data", str(csv),
                 "--target", "y", "--out", str(figs)]) == 0
    for name in ("n_leaves", "variable_importance", "tree", "trace", "partial_dependence"):
        assert (figs / f"{name}.png").stat().st_size > 5000, name


def test_every_model_choice_builds_its_estimator():
    for model in MODELS:
        for task in ("regression", "classification"):
            est = make_estimator(model, task, draws=7, tune=3, chains=2, random_state=1)
            assert hasattr(est, "fit") and hasattr(est, "predict")
    bet = make_estimator("bet", "classification", draws=7, tune=3, chains=2)
    assert type(bet) is bt.BETClassifier and (bet.draws, bet.tune, bet.chains) == (7, 3, 2)
    assert make_estimator("pcfg", "regression", draws=7).draws == 7
    with pytest.warns(FutureWarning, match="'seed' is renamed 'random_state'"):
        assert make_estimator("bf", "regression", seed=3).random_state == 3
    # the model names of a family pick its estimator and settings; the rest keeps the config's defaults
    assert type(make_estimator("ebf", "regression")) is bt.EmpiricalBayesianForestRegressor
    dt = make_estimator("dt", "classification", draws=50, min_samples_leaf=3)
    assert (dt.draws, dt.weights, dt.min_samples_leaf) == (1, "none", 3)


def test_fit_help_reads_the_configs():
    """Every hyperparameter option's help and defaults come from the families' config dataclasses."""
    from bayestrees.families import REGISTRY
    from bayestrees.inference.family import config_defaults

    text = build_parser()._subparsers._group_actions[0].choices["fit"].format_help()
    for name in ("--draws", "--leaf-concentration", "--min-samples-leaf", "--alpha-dp", "--log-phi", "--tune"):
        assert name in text, name
    assert f"bet {config_defaults(REGISTRY['bet'].config)['leaf_concentration']!r}" in " ".join(text.split())
    with pytest.raises(ValueError, match="unknown model"):
        make_estimator("gbm", "regression")


def test_bad_files_and_column_names_are_one_line_errors(tmp_path, capsys):
    csv = tmp_path / "d.csv"
    pd.DataFrame({"a": [1.0, 2.0]}).to_csv(csv, index=False)
    _expect_error(capsys, ["fit", str(csv), "--target", "nope"], "target column 'nope' not in")
    _expect_error(capsys, ["fit", str(csv), "--target", "a", "--features", "zz"], "['zz'] not in")
    _expect_error(capsys, ["fit", str(tmp_path / "missing.csv"), "--target", "a"], "no such file")
    _expect_error(capsys, ["predict", str(csv), str(csv)], "not a bayestrees model file")
    _expect_error(capsys, ["predict", str(tmp_path / "none.pkl"), str(csv)], "no such file")
    _expect_error(capsys, ["summary", str(csv)], "cannot read")
    _expect_error(capsys, ["summary", str(tmp_path / "none.nc")], "no such file")
    _expect_error(capsys, ["plot", str(csv), "--out", str(tmp_path / "f")], "cannot read")
    binary = tmp_path / "b.csv"
    binary.write_bytes(bytes(range(256)) * 4)
    _expect_error(capsys, ["fit", str(binary), "--target", "a"], "cannot read")


def test_demo_runs_every_family(tmp_path, capsys):
    rc = main(["demo", "--out", str(tmp_path), "--trees", "4", "--draws", "40"])
    assert rc == 0
    out = capsys.readouterr().out
    for part in ("[1/7]", "[2/7]", "[3/7]", "[4/7]", "[5/7]", "[6/7]", "[7/7]", "LOO comparison", "figure written"):
        assert part in out
    assert "BART: a sum of 20 small trees" in out and "R-hat of sigma" in out.split("[2/7]")[1].split("[3/7]")[0]
    assert "trees per draw (components of at least min_leaf_rows rows" in out and "BET" in out.split("LOO comparison")[1]
    assert (tmp_path / "demo_mcycle.png").stat().st_size > 1000
    assert (tmp_path / "mcycle_bayesian_forest.nc").exists()


def test_fit_and_summary_of_bart_give_one_row_per_variable(tmp_path, capsys):
    """BART's n_leaves and depth hold one value per tree: the fit summary and ``bayestrees summary``
    show their mean over the trees of each draw, one row each, not one row per tree."""
    r = np.random.default_rng(2)
    df = pd.DataFrame({"a": r.random(80), "b": r.random(80)})
    df["y"] = 2 * np.sin(3 * df["a"]) + 0.2 * r.normal(size=80)
    csv = tmp_path / "d.csv"
    df.to_csv(csv, index=False)
    out = tmp_path / "bart"
    rc = main(["fit", str(csv), "--target", "y", "--model", "bart", "--m", "12", "--draws", "20", "--tune", "20",
               "--chains", "2", "--max-depth", "3", "--out", str(out), "--quiet"])
    assert rc == 0
    text = (out / "summary.txt").read_text()
    assert "n_leaves, depth: the mean over the 12 trees of each draw" in text
    rows = [line.split()[0] for line in text.split("posterior summary of tree size")[1].splitlines()[2:] if line]
    assert rows == ["n_leaves", "depth", "sigma"], text
    capsys.readouterr()
    assert main(["summary", str(out / "posterior.nc")]) == 0
    summary = capsys.readouterr().out
    table = summary.split("posterior summary (az.summary")[1].split("convergence")[0]
    assert "the mean over the 12 trees of each draw" in table
    names = [line.split()[0] for line in table.splitlines()[2:] if line.strip()]
    assert names[:3] == ["n_leaves", "depth", "sigma"] and "n_leaves[0]" not in table and "r_hat" in table
    assert len(names) == 3 + 2  # and split_counts per feature


def test_fit_and_predict_bart_of_three_classes(tmp_path, capsys):
    """Three classes take BART's multinomial logit from the command line: the fit, its summary and
    ``predict`` with one probability column per class."""
    r = np.random.default_rng(4)
    df = pd.DataFrame({"a": r.random(90), "b": r.random(90)})
    df["y"] = np.array(["lo", "mid", "hi"])[np.minimum((df["a"] * 3).astype(int), 2)]
    csv = tmp_path / "d.csv"
    df.to_csv(csv, index=False)
    out = tmp_path / "bart3"
    rc = main(["fit", str(csv), "--target", "y", "--model", "bart", "--m", "8", "--draws", "20", "--tune", "20",
               "--chains", "2", "--max-depth", "3", "--out", str(out), "--quiet"])
    assert rc == 0
    capsys.readouterr()
    pred = tmp_path / "pred.csv"
    assert main(["predict", str(out / "model.pkl"), str(csv), "--out", str(pred)]) == 0
    table = pd.read_csv(pred)
    proba = table[[f"proba_{c}" for c in ("hi", "lo", "mid")]].to_numpy()
    np.testing.assert_allclose(proba.sum(1), 1.0, rtol=1e-6)
    assert set(table["prediction"]) <= {"hi", "lo", "mid"}
