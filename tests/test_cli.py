"""The command line: `bayestrees fit` on a CSV file, `bayestrees demo`, and `--help`."""
import arviz as az
import numpy as np
import pandas as pd
import pytest

import bayestrees as bt
from bayestrees.cli import build_parser, main


def test_help_lists_the_commands(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    out = capsys.readouterr().out
    assert "demo" in out and "fit" in out


def test_fit_writes_summary_posterior_and_model(tmp_path):
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


def test_fit_bcart_from_the_command_line(tmp_path):
    r = np.random.default_rng(1)
    df = pd.DataFrame({"a": r.integers(0, 6, 90) / 6, "b": r.normal(size=90)})
    df["y"] = np.where(df["a"] < 0.5, 0.0, 3.0) + 0.2 * r.normal(size=90)
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
    model = bt.load(out / "model.pkl")
    assert np.sqrt(np.mean((model.predict(df[["a", "b"]]) - df["y"]) ** 2)) < 0.6


def test_fit_reports_a_missing_target_column(tmp_path):
    csv = tmp_path / "d.csv"
    pd.DataFrame({"a": [1.0, 2.0]}).to_csv(csv, index=False)
    with pytest.raises(SystemExit, match="target column"):
        main(["fit", str(csv), "--target", "nope"])


def test_demo_runs_every_family(tmp_path, capsys):
    rc = main(["demo", "--out", str(tmp_path), "--trees", "4", "--draws", "40"])
    assert rc == 0
    out = capsys.readouterr().out
    for part in ("[1/5]", "[2/5]", "[3/5]", "[4/5]", "[5/5]", "LOO comparison", "figure written"):
        assert part in out
    assert (tmp_path / "demo_mcycle.png").stat().st_size > 1000
    assert (tmp_path / "mcycle_bayesian_forest.nc").exists()
