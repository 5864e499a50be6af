"""Command line: ``bayestrees demo`` and ``bayestrees fit``.

Run ``bayestrees --help`` or ``bayestrees fit --help``.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

MODELS = {
    "bf": "Bayesian forest (Bayesian-bootstrap weighted CART)",
    "ebf": "empirical Bayesian forest (CART trunk + Bayesian forest per trunk leaf)",
    "ssf": "sub-sample forest (a forest per random block of rows)",
    "rf": "random forest (multinomial bootstrap weights)",
    "dt": "single CART tree",
    "et": "extra trees (random thresholds, no bootstrap)",
    "pcfg": "BCART-PCFG: exact posterior over trees (small feature counts)",
    "safebayes": "safe-Bayesian random forest (prior trees, importance weights)",
    "bcart": "Bayesian CART by MCMC (grow/prune/change/swap moves, vmapped chains)",
}


def _say(msg: str) -> None:
    print(msg, flush=True)


def make_estimator(model: str, task: str, n_estimators: int, min_samples_leaf: int, seed: int | None,
                   trunk_min_samples_leaf: int = 1000, n_blocks: int = 5, progressbar: bool = True,
                   n_jobs: int | None = None, draws: int = 1000, tune: int = 1000, chains: int = 4):
    """The estimator for a ``--model`` choice and a task ("regression"/"classification")."""
    import bayestrees as bt

    reg = task == "regression"
    common = dict(min_samples_leaf=min_samples_leaf, random_state=seed, progressbar=progressbar, n_jobs=n_jobs)
    if model in ("bf", "rf", "dt", "et"):
        cls = bt.BayesianForestRegressor if reg else bt.BayesianForestClassifier
        kw = {"bf": dict(weights="exponential"), "rf": dict(weights="multinomial"),
              "dt": dict(weights="none"), "et": dict(weights="none", splitter="random")}[model]
        return cls(n_estimators=1 if model == "dt" else n_estimators, **kw, **common)
    if model == "ebf":
        cls = bt.EmpiricalBayesianForestRegressor if reg else bt.EmpiricalBayesianForestClassifier
        return cls(n_estimators=n_estimators, trunk_min_samples_leaf=trunk_min_samples_leaf, **common)
    if model == "ssf":
        cls = bt.SubSampleForestRegressor if reg else bt.SubSampleForestClassifier
        return cls(n_estimators=n_estimators, n_blocks=n_blocks, **common)
    if model == "pcfg":
        return bt.PCFGTreeRegressor() if reg else bt.PCFGTreeClassifier()
    if model == "safebayes":
        cls = bt.SafeBayesForestRegressor if reg else bt.SafeBayesForestClassifier
        return cls(random_state=seed)
    if model == "bcart":
        cls = bt.BayesianCARTRegressor if reg else bt.BayesianCARTClassifier
        return cls(draws=draws, tune=tune, chains=chains, random_state=seed, progressbar=progressbar)
    raise ValueError(f"unknown model {model!r}; choose one of {sorted(MODELS)}")


def _rmse(a, b) -> float:
    return float(np.sqrt(np.mean((np.asarray(a) - np.asarray(b)) ** 2)))


def cmd_demo(args) -> int:
    """Run every family on data shipped with the package and write a figure."""
    import bayestrees as bt
    from bayestrees.datasets import load_haberman, load_mcycle

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    _say("bayestrees demo: every family on data shipped with the package")
    _say(f"  output folder: {out.resolve()}")

    # -- regression: motorcycle data
    X, y = load_mcycle()
    _say(f"\n[1/5] Bayesian forest on the motorcycle data ({X.shape[0]} rows): time -> head acceleration")
    t0 = time.perf_counter()
    bf = bt.BayesianForestRegressor(n_estimators=args.trees, min_samples_leaf=3, random_state=args.seed,
                                    progressbar=True).fit(X, y)
    cart = bt.BayesianForestRegressor(n_estimators=1, weights="none", min_samples_leaf=3).fit(X, y)
    ebf = bt.EmpiricalBayesianForestRegressor(n_estimators=args.trees, trunk_min_samples_leaf=30,
                                              min_samples_leaf=3, random_state=args.seed).fit(X, y)
    _say(f"      fitted {args.trees} trees in {time.perf_counter() - t0:.1f}s (includes JIT compilation); "
         f"leaves per tree: {bf.n_leaves_.mean():.1f} on average")
    grid = np.linspace(X.min(), X.max(), 300)[:, None]
    draws = bf.predict_draws(grid)
    lo, hi = np.quantile(draws, [0.05, 0.95], axis=0)
    _say(f"      in-sample RMSE: CART {_rmse(cart.predict(X), y):.2f}, Bayesian forest {_rmse(bf.predict(X), y):.2f}, "
         f"empirical Bayesian forest {_rmse(ebf.predict(X), y):.2f}")
    idata = bf.idata_
    nc = out / "mcycle_bayesian_forest.nc"
    idata.to_netcdf(str(nc))
    _say(f"      posterior (draw = tree) written to {nc}")

    # -- classification: Haberman survival
    Xc, yc, names = load_haberman()
    perm = rng.permutation(len(yc))
    tr, te = perm[:230], perm[230:]
    _say(f"\n[2/5] classifiers on Haberman survival ({len(tr)} train / {len(te)} test rows, features {names})")
    bfc = bt.BayesianForestClassifier(n_estimators=args.trees, min_samples_leaf=5,
                                      random_state=args.seed).fit(Xc[tr], yc[tr])
    _say(f"      Bayesian forest accuracy: {np.mean(bfc.predict(Xc[te]) == yc[te]):.3f}")
    _say("\n[3/5] BCART-PCFG: exact posterior over trees (5 bins per feature)")
    pc = bt.PCFGTreeClassifier(max_bins=5).fit(Xc[tr], yc[tr])
    _say(f"      MAP-tree accuracy: {np.mean(pc.predict(Xc[te]) == yc[te]):.3f}; "
         f"log evidence {float(pc.log_evidence_):.2f}")
    _say("\n[4/5] safe-Bayesian random forest (1000 prior trees, importance weights)")
    sb = bt.SafeBayesForestClassifier(random_state=args.seed).fit(Xc[tr], yc[tr])
    _say(f"      accuracy: {np.mean(sb.predict(Xc[te]) == yc[te]):.3f}")
    _say(f"\n[5/5] Bayesian CART by MCMC (4 chains, {args.draws} tuning steps + {args.draws} draws each)")
    t0 = time.perf_counter()
    bc = bt.BayesianCARTClassifier(draws=args.draws, tune=args.draws, chains=4, max_depth=5, random_state=args.seed,
                                   progressbar=True).fit(Xc[tr], yc[tr])
    acc = bc.acceptance_
    _say(f"      fitted in {time.perf_counter() - t0:.1f}s (includes JIT compilation); accuracy: "
         f"{np.mean(bc.predict(Xc[te]) == yc[te]):.3f}; leaves per tree: "
         f"{float(bc.idata_.posterior['n_leaves'].mean()):.1f}; acceptance grow {acc['grow']:.2f}, "
         f"prune {acc['prune']:.2f}, change {acc['change']:.2f}, swap {acc['swap']:.2f}")
    try:
        cmp = bt.compare({"PCFG": pc.idata_, "Bayesian CART": bc.idata_})
        _say("      LOO comparison (bt.compare):\n" + "\n".join(
            "        " + line for line in cmp[["rank", "elpd_loo", "p_loo", "elpd_diff"]].to_string().splitlines()))
    except ValueError as e:  # a family without a likelihood: say why
        _say(f"      no LOO comparison: {e}")

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        _say("\nmatplotlib is not installed: skipping the figure (pip install 'bayestrees[plot]')")
        return 0
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.scatter(X[:, 0], y, s=10, c="k", alpha=0.6, label="data")
    ax.fill_between(grid[:, 0], lo, hi, color="C0", alpha=0.25, label="90% posterior interval")
    ax.plot(grid[:, 0], draws.mean(0), "C0", lw=2, label="Bayesian forest mean")
    ax.plot(grid[:, 0], cart.predict(grid), "C3", lw=1, label="CART")
    ax.set_xlabel("time (ms)")
    ax.set_ylabel("acceleration (g)")
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title("bayestrees demo: motorcycle data")
    fig.tight_layout()
    png = out / "demo_mcycle.png"
    fig.savefig(png, dpi=100)
    _say(f"\nfigure written to {png}")
    return 0


def _read_table(path: Path):
    try:
        import pandas as pd
    except ImportError:
        raise SystemExit("reading CSV/Parquet needs pandas: pip install 'bayestrees[io]'") from None
    if not path.exists():
        raise SystemExit(f"no such file: {path}")
    if path.suffix.lower() in (".parquet", ".pq"):
        return pd.read_parquet(path)
    return pd.read_csv(path)


def cmd_fit(args) -> int:
    """Fit a model on a CSV or Parquet file; write a summary, the posterior (NetCDF) and the model."""
    import arviz as az

    df = _read_table(Path(args.data))
    if args.target not in df.columns:
        raise SystemExit(f"target column {args.target!r} not in the file; columns: {list(df.columns)}")
    y = df.pop(args.target)
    if args.features:
        missing = [c for c in args.features if c not in df.columns]
        if missing:
            raise SystemExit(f"feature columns not in the file: {missing}")
        df = df[args.features]
    from .data import infer_task

    task = infer_task(y, args.task)  # the library's one task-inference rule
    yv = y.to_numpy()
    est = make_estimator(args.model, task, args.n_estimators, args.min_samples_leaf, args.seed,
                         args.trunk_min_samples_leaf, args.n_blocks, progressbar=not args.quiet, n_jobs=args.n_jobs,
                         draws=args.draws, tune=args.tune, chains=args.chains)
    _say(f"fitting {args.model} ({MODELS[args.model]}) for {task} on {len(df)} rows x {df.shape[1]} features")
    t0 = time.perf_counter()
    est.fit(df, yv)
    el = time.perf_counter() - t0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    pred = est.predict(df)
    if task == "regression":
        fit_line = f"in-sample RMSE: {_rmse(pred, yv):.6g}"
    else:
        fit_line = f"in-sample accuracy: {np.mean(pred == yv):.4f}"
    idata = est.idata_
    scalars = [v for v in ("n_leaves", "depth", "sigma") if v in idata.posterior]
    summary = az.summary(idata, var_names=scalars, kind="stats") if scalars else None
    lines = [f"model: {args.model} ({MODELS[args.model]})", f"task: {task}", f"data: {args.data}",
             f"rows: {len(df)}, features: {list(df.columns)}", f"fit time: {el:.2f}s", fit_line]
    if summary is not None:
        lines += ["", "posterior summary of tree size:", summary.to_string()]
    (out / "summary.txt").write_text("\n".join(lines) + "\n")
    idata.to_netcdf(str(out / "posterior.nc"))
    if hasattr(est, "save"):
        est.save(out / "model.pkl")
    _say("\n".join(lines))
    _say(f"\nwrote {out / 'summary.txt'}, {out / 'posterior.nc'} and {out / 'model.pkl'}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bayestrees", description="Bayesian inference over decision trees (JAX).")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    d = sub.add_parser("demo", help="run every family on data shipped with the package and write a figure",
                       description="Fits a Bayesian forest, an empirical Bayesian forest and CART to the motorcycle "
                                   "data, and Bayesian-forest, PCFG, safe-Bayes and Bayesian CART (MCMC) "
                                   "classifiers to Haberman's survival data; prints what it did and writes a "
                                   "figure and a NetCDF posterior.")
    d.add_argument("--out", default="bayestrees-demo", help="output folder (default: ./bayestrees-demo)")
    d.add_argument("--trees", type=int, default=100, help="trees per forest (default 100)")
    d.add_argument("--draws", type=int, default=500, help="tuning steps and draws per Bayesian CART chain (default 500)")
    d.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    d.set_defaults(func=cmd_demo)
    f = sub.add_parser("fit", help="fit a model to a CSV or Parquet file",
                       description="Fit a tree model to a table. Writes OUT/summary.txt, OUT/posterior.nc "
                                   "(ArviZ InferenceData, draw = tree) and OUT/model.pkl (bayestrees.load).",
                       epilog="example: bayestrees fit housing.csv --target price --model bf --out fit-bf")
    f.add_argument("data", help="CSV (header row) or Parquet file")
    f.add_argument("--target", required=True, help="name of the response column")
    f.add_argument("--model", default="bf", choices=sorted(MODELS),
                   help="; ".join(f"{k}: {v}" for k, v in MODELS.items()))
    f.add_argument("--task", default="auto", choices=["auto", "regression", "classification"],
                   help="auto: labels, and whole numbers with at most 20 distinct values, are classification")
    f.add_argument("--features", nargs="+", help="feature columns (default: every other column)")
    f.add_argument("--n-estimators", type=int, default=100, help="trees (posterior draws) for forests")
    f.add_argument("--min-samples-leaf", type=int, default=1, help="minimum rows per leaf (forests)")
    f.add_argument("--trunk-min-samples-leaf", type=int, default=1000, help="EBF trunk leaf size")
    f.add_argument("--n-blocks", type=int, default=5, help="SSF blocks")
    f.add_argument("--draws", type=int, default=1000, help="kept draws per chain (bcart)")
    f.add_argument("--tune", type=int, default=1000, help="discarded tuning steps per chain (bcart)")
    f.add_argument("--chains", type=int, default=4, help="chains, run vmapped (bcart)")
    f.add_argument("--seed", type=int, default=0, help="random seed")
    f.add_argument("--n-jobs", type=int, default=1,
                   help="trees fitted at the same time by forests (-1: one per CPU core; default 1)")
    f.add_argument("--out", default="bayestrees-fit", help="output folder")
    f.add_argument("--quiet", action="store_true", help="no progress bar")
    f.set_defaults(func=cmd_fit)
    return p


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 1
    try:
        return int(args.func(args) or 0)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
