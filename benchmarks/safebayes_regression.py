"""Safe-Bayesian random forest with Normal-inverse-gamma leaves (beyond the paper).

Data: mcycle (133 rows, 1 feature) and wine quality (6497 rows, 11 numeric
features + colour), 80/20 split repeated 5 times, 1000 prior trees,
lam = 0.475, root of every prior tree split (``--no-root-splits``: may be a
leaf).  Reports test RMSE (mean +- sd) and mean log predictive density
for m = 5, m = "auto" (the default: 5-fold cross-validation on the training
rows by log predictive density), BMA (m = N) and the best tree, next to
scikit-learn's random forest (1000 trees, max_features = 0.5), and the
weigh+predict wall time (m = 5) after compilation.  Writes
benchmarks/results/safebayes_regression[_root_leaf].json.

Data: ``--data-dir``, else ``BAYESTREES_DATA``, else ``../shared/data``
relative to the repository root.

Usage::

    .venv/bin/python benchmarks/safebayes_regression.py [--repeats 5] [--trees 1000] [--no-root-splits]
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

import bayestrees as bt

DATA = Path(os.environ.get("BAYESTREES_DATA", Path(__file__).resolve().parents[1].parent / "shared" / "data"))
OUT = Path(__file__).resolve().parent / "results"


def load(name):
    import pandas as pd

    if name == "mcycle":
        df = pd.read_csv(DATA / "mcycle.csv")
        return df[["times"]].to_numpy(float), df["accel"].to_numpy(float)
    if name == "wine_quality":
        df = pd.read_csv(DATA / "wine_quality.csv")
        df["color"] = (df["color"] == "red").astype(float)
        return df.drop(columns="quality").to_numpy(float), df["quality"].to_numpy(float)
    raise ValueError(name)


def main():
    from sklearn.ensemble import RandomForestRegressor
    from sklearn.model_selection import train_test_split

    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--trees", type=int, default=1000)
    ap.add_argument("--datasets", nargs="*", default=["mcycle", "wine_quality"])
    ap.add_argument("--root-splits", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--data-dir", default=None)
    a = ap.parse_args()
    global DATA
    if a.data_dir is not None:
        DATA = Path(a.data_dir)
    rs = a.root_splits
    res = {}
    for name in a.datasets:
        X, y = load(name)
        rec = {k: {"rmse": [], "lp": []} for k in ("m5", "auto", "bma", "best")}
        rec["rf"] = {"rmse": []}
        rec["time"], rec["m_auto"] = [], []
        for r in range(a.repeats):
            Xa, Xb, ya, yb = train_test_split(X, y, test_size=0.2, random_state=r)
            reg = bt.SafeBayesForestRegressor(a.trees, effective_sample_size=5, root_splits=rs, random_state=0)
            if r == 0:
                reg.fit(Xa, ya).predict(Xb)
            t0 = time.perf_counter()
            reg.fit(Xa, ya)
            p = reg.predict(Xb)
            rec["time"].append(time.perf_counter() - t0)
            for key, method in (("m5", "safe"), ("bma", "bma"), ("best", "best")):
                pp = p if method == "safe" else reg.predict(Xb, method)
                rec[key]["rmse"].append(float(np.sqrt(np.mean((pp - yb) ** 2))))
                rec[key]["lp"].append(reg.log_predictive(Xb, yb, method))
            auto = bt.SafeBayesForestRegressor(a.trees, effective_sample_size="auto", root_splits=rs,
                                               random_state=0).fit(Xa, ya)
            rec["auto"]["rmse"].append(float(np.sqrt(np.mean((auto.predict(Xb) - yb) ** 2))))
            rec["auto"]["lp"].append(auto.log_predictive(Xb, yb))
            rec["m_auto"].append(auto.effective_sample_size_)
            rf = RandomForestRegressor(a.trees, max_features=0.5, n_jobs=2, random_state=r).fit(Xa, ya)
            rec["rf"]["rmse"].append(float(np.sqrt(np.mean((rf.predict(Xb) - yb) ** 2))))
        res[name] = rec

        def ms(v):
            return f"{np.mean(v):8.3f}+-{np.std(v, ddof=1):6.3f}"

        print(f"{name:13s} RMSE  m=5 {ms(rec['m5']['rmse'])}  auto {ms(rec['auto']['rmse'])} "
              f"(m~{np.median(rec['m_auto']):.0f})  BMA {ms(rec['bma']['rmse'])}  best {ms(rec['best']['rmse'])}"
              f"  RF {ms(rec['rf']['rmse'])}", flush=True)
        print(f"{'':13s} logpd m=5 {ms(rec['m5']['lp'])}  auto {ms(rec['auto']['lp'])}  BMA {ms(rec['bma']['lp'])}"
              f"  best {ms(rec['best']['lp'])};  weigh+predict {np.mean(rec['time']):.3f}s", flush=True)
    OUT.mkdir(parents=True, exist_ok=True)
    suffix = "" if rs else "_root_leaf"
    args = {k: v for k, v in vars(a).items() if k != "data_dir"}
    with open(OUT / f"safebayes_regression{suffix}.json", "w") as fh:
        json.dump({"args": args, "results": res}, fh, indent=1)


if __name__ == "__main__":
    main()
