"""Command line: ``bayestrees demo``, ``fit``, ``predict``, ``summary`` and ``plot``.

Run ``bayestrees --help`` or ``bayestrees COMMAND --help``.  A bad file or
column name ends the command with one line on standard error (``error: ...``)
and exit status 2, never a traceback.
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from .inference.family import renamed_params


class CLIError(Exception):
    """A user error reported as one line (``error: ...``) with exit status 2."""


def _models() -> dict:
    """``{model name: (family, title, config params)}``: every family's presets (:mod:`bayestrees.families`)."""
    from .families import presets

    return presets()


#: ``{model name: one line}`` for every ``--model`` choice, read from the families' registry
MODELS = {name: title for name, (_, title, _) in _models().items()}

#: config fields that are not command-line options: set by the model name, by ``--quiet`` or given as
#: Python objects; BART's ``keep_trees``: without trees a fit predicts only at rows named when fitting,
#: which the command line does not take; BART's ``slide``: it needs ``move_probs``, which the command line
#: does not take
_NOT_OPTIONS = {"kind", "progressbar", "prior", "leaf_model", "leaf_prior", "move_probs", "temperatures",
                "keep_trees", "slide"}


def _say(msg: str) -> None:
    print(msg, flush=True)


def _estimators(family) -> list:
    """The public estimator classes of ``family`` (subclasses of ``FamilyEstimator`` naming it)."""
    from .estimators.base import FamilyEstimator

    stack, found = [FamilyEstimator], []
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if not cls.__name__.startswith("_") and getattr(cls, "_family", None) is family and cls not in found:
            found.append(cls)
    return found


def _estimator_class(family, task: str, preset: dict):
    """The estimator of ``family`` for ``task`` whose fixed parameters (a forest's kind) match ``preset``."""
    from .inference.family import config_defaults

    defaults = config_defaults(family.config)
    found = [cls for cls in _estimators(family) if cls._task == task
             and all(preset.get(k, defaults.get(k)) == v for k, v in cls._fixed_params().items())]
    if len(found) != 1:
        raise ValueError(f"no single {task} estimator for the {family.name} family with {preset}: {found}")
    return found[0]


def make_estimator(model: str, task: str, *, random_state: int | None = None, progressbar: bool = True, **params):
    """The estimator for a ``--model`` choice and a task ("regression"/"classification").

    Parameters
    ----------
    model : str
        A key of :data:`MODELS`.
    task : {"regression", "classification"}
    random_state : int, optional
        The estimator's ``random_state`` (``seed``, its former name here, warns).
    progressbar : bool
        Where the estimator has a progress bar.
    **params
        Hyperparameters by their estimator names (``draws``, ``min_samples_leaf``, ``tune``, ...);
        None or a name the chosen estimator does not take is left out, so the estimator's own
        default (its family config's) applies.  The model name's own settings (``dt``: one tree
        without weights) take precedence.

    Returns
    -------
    an unfitted estimator
    """
    params = renamed_params(params, {"seed": "random_state"}, "make_estimator")
    random_state = params.pop("random_state", random_state)
    models = _models()
    if model not in models:
        raise ValueError(f"unknown model {model!r}; choose one of {sorted(models)}")
    family, _, preset = models[model]
    cls = _estimator_class(family, task, preset)
    names = set(cls._get_param_names())
    kw = {k: v for k, v in params.items() if v is not None and k in names}
    kw.update({k: v for k, v in preset.items() if k in names})
    if "random_state" in names:
        kw["random_state"] = random_state
    if "progressbar" in names:
        kw["progressbar"] = progressbar
    return cls(**kw)


def _auto(text: str):
    """A command-line value as a Python one: an int, a float, None, True/False or the string."""
    low = text.strip().lower()
    if low in ("none", "null"):
        return None
    if low in ("true", "false"):
        return low == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def _options() -> dict:
    """``{option name: help}``: the fields of every family's config that the command line sets.

    Help texts and defaults are read from the config dataclasses (:func:`~bayestrees.inference.family.config_help`,
    :func:`~bayestrees.inference.family.config_defaults`); an option shared by several families lists
    each family's default.
    """
    from .families import REGISTRY
    from .inference.family import config_defaults, config_help

    texts, defaults = {}, {}
    for fam in REGISTRY.values():
        helps = config_help(fam.config)
        fields = dict(config_defaults(fam.config), max_bins=fam.max_bins)
        helps.setdefault("max_bins", "bins per feature")
        params = {p for cls in _estimators(fam) for p in cls._get_param_names()}
        for name, default in fields.items():
            if name in _NOT_OPTIONS or name not in params:
                continue
            texts.setdefault(name, helps.get(name, name.replace("_", " ")))
            defaults.setdefault(name, []).append(f"{fam.name} {default!r}")
    return {name: f"{texts[name]} (default: {'; '.join(defaults[name])})".replace("%", "%%") for name in texts}


def _per_tree_means(idata, names):
    """The posterior to summarise: ``idata`` itself, or, where a variable of ``names`` has a ``tree``
    dimension (BART's ``n_leaves`` and ``depth``, one value per tree of the sum), a copy of its
    posterior with those variables averaged over the trees of each draw, so that a table shows one
    row per variable, not one per tree; and the note that says so (None when nothing was averaged)."""
    post = idata.posterior
    per_tree = [v for v in names if v in post and "tree" in post[v].dims]
    if not per_tree:
        return idata, None
    m = post.sizes["tree"]
    table = post[list(names)].copy()
    for v in per_tree:
        table[v] = post[v].mean("tree")
    return table, f"{', '.join(per_tree)}: the mean over the {m} trees of each draw"


def _rmse(a, b) -> float:
    return float(np.sqrt(np.mean((np.asarray(a) - np.asarray(b)) ** 2)))


def cmd_demo(args) -> int:
    """Run every family on data shipped with the package and write a figure."""
    import bayestrees as bt
    from bayestrees.convergence import ConvergenceWarning
    from bayestrees.datasets import load_haberman, load_mcycle

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    _say("bayestrees demo: every family on data shipped with the package")
    _say(f"  output folder: {out.resolve()}")

    # -- regression: motorcycle data
    X, y = load_mcycle()
    _say(f"\n[1/7] Bayesian forest on the motorcycle data ({X.shape[0]} rows): time -> head acceleration")
    t0 = time.perf_counter()
    bf = bt.BayesianForestRegressor(draws=args.trees, min_samples_leaf=3, random_state=args.seed,
                                    progressbar=True).fit(X, y)
    cart = bt.BayesianForestRegressor(draws=1, weights="none", min_samples_leaf=3).fit(X, y)
    ebf = bt.EmpiricalBayesianForestRegressor(draws=args.trees, trunk_min_samples_leaf=30,
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

    # -- regression: BART on the same data
    # BART's slow mode is read from the kept steps, not shortened by tuning: 1,000 draws of every 2nd step
    bart_kw = (dict(m=50, chains=4, tune=500, draws=1000, thin=2) if args.draws is None
               else dict(m=20, chains=2, tune=args.draws, draws=args.draws))
    kept = f"{bart_kw['draws']} draws" + (f" of every {bart_kw['thin']}nd step" if bart_kw.get("thin", 1) == 2 else "")
    _say(f"\n[2/7] BART: a sum of {bart_kw['m']} small trees by Bayesian backfitting MCMC ({bart_kw['chains']} "
         f"chains, {bart_kw['tune']} tuning steps + {kept} each; a step moves every tree once)")
    t0 = time.perf_counter()
    bart = bt.BARTRegressor(random_state=args.seed, progressbar=True, **bart_kw).fit(X, y)
    bart_draws = bart.predict_draws(grid)
    conv = bart.convergence_.table["sigma"]
    _say(f"      fitted in {time.perf_counter() - t0:.1f}s (includes JIT compilation); in-sample RMSE "
         f"{_rmse(bart.predict(X), y):.2f}; noise sd (sigma) {float(bart.idata_.posterior['sigma'].mean()):.1f} g; "
         f"leaves per tree {float(bart.idata_.posterior['n_leaves'].mean()):.2f}; R-hat of sigma {conv['rhat']:.3f}, "
         f"bulk ESS {conv['ess_bulk']:.0f}")

    # -- classification: Haberman survival
    Xc, yc, names = load_haberman()
    perm = rng.permutation(len(yc))
    tr, te = perm[:230], perm[230:]
    _say(f"\n[3/7] classifiers on Haberman survival ({len(tr)} train / {len(te)} test rows, features {names})")
    bfc = bt.BayesianForestClassifier(draws=args.trees, min_samples_leaf=5,
                                      random_state=args.seed).fit(Xc[tr], yc[tr])
    _say(f"      Bayesian forest accuracy: {np.mean(bfc.predict(Xc[te]) == yc[te]):.3f}")
    _say("\n[4/7] BCART-PCFG: exact posterior over trees (5 bins per feature)")
    pc = bt.PCFGTreeClassifier(max_bins=5).fit(Xc[tr], yc[tr])
    _say(f"      MAP-tree accuracy: {np.mean(pc.predict(Xc[te]) == yc[te]):.3f}; "
         f"log evidence {float(pc.log_evidence_):.2f}")
    _say("\n[5/7] safe-Bayesian random forest (1000 prior trees, importance weights)")
    sb = bt.SafeBayesForestClassifier(random_state=args.seed).fit(Xc[tr], yc[tr])
    _say(f"      accuracy: {np.mean(sb.predict(Xc[te]) == yc[te]):.3f}")
    # the default scheme: local moves on a ladder of 8 temperatures, then a particle Gibbs regrowth of the tree
    lengths = {"draws": 600, "tune": 200} if args.draws is None else {"draws": args.draws, "tune": args.draws}
    bc = bt.BayesianCARTClassifier(chains=4, max_depth=5, random_state=args.seed, progressbar=True, **lengths)
    _say(f"\n[6/7] Bayesian CART by MCMC (4 chains, {bc.tune} tuning steps + {bc.draws} draws each; each step "
         f"makes 25 rounds of local moves on a ladder of 8 temperatures, then regrows the tree by particle Gibbs)")
    t0 = time.perf_counter()
    bc.fit(Xc[tr], yc[tr])
    _say(f"      fitted in {time.perf_counter() - t0:.1f}s (includes JIT compilation); accuracy: "
         f"{np.mean(bc.predict(Xc[te]) == yc[te]):.3f}; leaves per tree: "
         f"{float(bc.idata_.posterior['n_leaves'].mean()):.1f}; share of steps that changed the tree "
         f"{bc.acceptance_['mixed']:.2f}; R-hat of n_leaves "
         f"{bc.convergence_.table['n_leaves']['rhat']:.3f}")
    bet_draws = 500 if args.draws is None else args.draws
    _say(f"\n[7/7] BET: a Dirichlet-process mixture of trees (slice sampler; {bet_draws} tuning sweeps + "
         f"{bet_draws} draws, at most 24 trees)")
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:   # said below in one line, not hidden
        warnings.simplefilter("always", ConvergenceWarning)
        bet = bt.BETClassifier(max_trees=24, max_depth=3, draws=bet_draws, tune=bet_draws, random_state=args.seed,
                               progressbar=True).fit(Xc[tr], yc[tr])
    for w in caught:
        if not issubclass(w.category, ConvergenceWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    n_trees = np.bincount(np.asarray(bet.n_trees_).ravel())
    share = ", ".join(f"{k}: {c / n_trees.sum():.2f}" for k, c in enumerate(n_trees) if c)
    ranking = ", ".join(f"{nm} {v:.2f}" for nm, v in zip(names, np.asarray(bet.xi_bar_)))
    _say(f"      fitted in {time.perf_counter() - t0:.1f}s (includes JIT compilation); accuracy (ensemble "
         f"estimator): {np.mean(bet.predict(Xc[te]) == yc[te]):.3f}")
    _say(f"      trees per draw (components of at least min_leaf_rows rows; share of draws): {share}; "
         f"variable ranking (xi bar): {ranking}")
    if bet.convergence_.problems:
        ess = bet.convergence_.table.get("n_trees", {}).get("ess_bulk", float("nan"))
        _say(f"      convergence: BET's one chain has not converged (bulk ESS of n_trees {ess:.0f} of {bet_draws} "
             f"draws): its mixture moves slowly between numbers of trees, so read the shares above as one chain's; "
             f"for inference run chains=4 and more sweeps, and check bet.convergence_")
    try:
        with warnings.catch_warnings():   # the Pareto-k warnings of LOO: one line below
            warnings.filterwarnings("ignore", message="Estimated shape parameter of Pareto", category=UserWarning)
            cmp = bt.compare({"PCFG": pc.idata_, "Bayesian CART": bc.idata_, "BET": bet.idata_})
        _say("      LOO comparison (bt.compare):\n" + "\n".join(
            "        " + line for line in cmp[["rank", "elpd_loo", "p_loo", "elpd_diff"]].to_string().splitlines()))
        flagged = [str(name) for name, bad in cmp["warning"].items() if bool(bad)]
        if flagged:
            _say(f"      LOO's Pareto k is above ArviZ's threshold for some rows of {', '.join(flagged)}: those rows weigh heavily "
                 f"on their own fit, so the LOO estimate is less reliable there (bt.loo(idata, pointwise=True) "
                 f"names them)")
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
    ax.plot(grid[:, 0], bart_draws.mean(0), "C2", lw=2, ls="--", label="BART mean")
    ax.plot(grid[:, 0], cart.predict(grid), "C3", lw=1, label="CART")
    ax.set_xlabel("time (ms)")
    ax.set_ylabel("acceleration (g)")
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title("bayestrees demo: motorcycle data")
    fig.tight_layout()
    png = out / "demo_mcycle.png"
    fig.savefig(png, dpi=100)
    _say(f"\nfigure written to {png}")
    _say("next: bayestrees summary " + str(nc) + "; bayestrees fit DATA.csv --target COLUMN (then predict, "
         "summary, plot); the tutorials in tutorials/ walk through every family")
    return 0


def _read_table(path: Path):
    """A CSV (header row) or Parquet file as a DataFrame; :class:`CLIError` for a missing or unreadable file."""
    try:
        import pandas as pd
    except ImportError:
        raise CLIError("reading CSV/Parquet needs pandas: pip install 'bayestrees[io]'") from None
    if not path.exists():
        raise CLIError(f"no such file: {path}")
    if path.is_dir():
        raise CLIError(f"{path} is a folder, not a data file")
    try:
        if path.suffix.lower() in (".parquet", ".pq"):
            df = pd.read_parquet(path)
        else:
            df = pd.read_csv(path)
    except ImportError as e:
        raise CLIError(f"cannot read {path}: {e}") from None
    except Exception as e:  # parser errors, binary files, bad encodings: one line, no traceback
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CLIError(f"cannot read {path} as a {'Parquet' if path.suffix.lower() in ('.parquet', '.pq') else 'CSV'} "
                       f"table: {first}") from None
    if df.shape[0] == 0 or df.shape[1] == 0:
        raise CLIError(f"{path} holds no data rows (columns: {list(df.columns)})")
    return df


def _columns_or_fail(df, names, path, what: str):
    missing = [c for c in names if c not in df.columns]
    if missing:
        raise CLIError(f"{what} {missing} not in {path}; its columns: {list(df.columns)}")


def cmd_fit(args) -> int:
    """Fit a model on a CSV or Parquet file; write a summary, the posterior (NetCDF) and the model."""
    import arviz as az

    df = _read_table(Path(args.data))
    if args.target not in df.columns:
        raise CLIError(f"target column {args.target!r} not in {args.data}; its columns: {list(df.columns)}")
    y = df.pop(args.target)
    if args.features:
        _columns_or_fail(df, args.features, args.data, "feature columns")
        df = df[args.features]
    if df.shape[1] == 0:
        raise CLIError(f"{args.data} has no feature column besides the target {args.target!r}")
    from .data import infer_task

    task = infer_task(y, args.task)  # the library's one task-inference rule
    yv = y.to_numpy()
    est = make_estimator(args.model, task, random_state=args.random_state, progressbar=not args.quiet,
                         **{name: getattr(args, name) for name in _options()})
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
    scalars = [v for v in ("n_leaves", "depth", "sigma", "n_trees") if v in idata.posterior]
    table, note = _per_tree_means(idata, scalars)
    summary = az.summary(table, var_names=scalars, kind="stats") if scalars else None
    lines = [f"model: {args.model} ({MODELS[args.model]})", f"task: {task}", f"data: {args.data}",
             f"rows: {len(df)}, features: {list(df.columns)}", f"fit time: {el:.2f}s", fit_line]
    if summary is not None:
        lines += ["", "posterior summary of tree size:" + (f" ({note})" if note else ""), summary.to_string()]
    (out / "summary.txt").write_text("\n".join(lines) + "\n")
    idata.to_netcdf(str(out / "posterior.nc"))
    est.save(out / "model.pkl")
    _say("\n".join(lines))
    _say(f"\nwrote {out / 'summary.txt'}, {out / 'posterior.nc'} and {out / 'model.pkl'}")
    _say(f"next: bayestrees predict {out / 'model.pkl'} NEW.csv --out predictions.csv; "
         f"bayestrees summary {out / 'posterior.nc'}; bayestrees plot {out / 'posterior.nc'}")
    return 0


# -- predict ----------------------------------------------------------------------------------------
def _load_model(path: Path):
    import pickle

    from .estimators.base import load

    if not path.exists():
        raise CLIError(f"no such file: {path}")
    if path.is_dir():
        raise CLIError(f"{path} is a folder, not a model file (bayestrees fit writes OUT/model.pkl)")
    try:
        return load(path)
    except ValueError as e:
        raise CLIError(str(e)) from None
    except (pickle.UnpicklingError, EOFError, AttributeError, ImportError, TypeError, IndexError, KeyError):
        raise CLIError(f"{path} is not a bayestrees model file (write one with bayestrees fit or est.save)") from None


def _feature_frame(model, df, path, target: str | None):
    """The columns the model was fitted on, in its order (by name when it knows them)."""
    names = getattr(model, "feature_names_in_", None)
    if names is not None:
        names = [str(c) for c in names]
        _columns_or_fail(df, names, path, "feature columns of the model")
        return df[names]
    if target is not None and target in df.columns:
        df = df.drop(columns=target)
    if df.shape[1] != model.n_features_in_:
        raise CLIError(f"{path} has {df.shape[1]} feature columns but the model was fitted on "
                       f"{model.n_features_in_} (unnamed) features")
    return df


def cmd_predict(args) -> int:
    """Predict with a saved model on a table; write the posterior mean, class probabilities and intervals."""
    import pandas as pd

    if not 0 < args.prob < 1:
        raise CLIError(f"--prob must be in (0, 1), got {args.prob}")
    model = _load_model(Path(args.model))
    df = _read_table(Path(args.data))
    X = _feature_frame(model, df, args.data, args.target)
    pct = f"{args.prob * 100:g}"
    out = pd.DataFrame(index=df.index)
    has_interval = hasattr(model, "predict_interval")
    if hasattr(model, "predict_proba"):
        proba = np.asarray(model.predict_proba(X))
        classes = [str(c) for c in model.classes_]
        out["prediction"] = np.asarray(model.classes_)[np.argmax(proba, axis=1)]
        for j, c in enumerate(classes):
            out[f"proba_{c}"] = proba[:, j]
        if has_interval:
            try:
                iv = np.asarray(model.predict_interval(X, prob=args.prob))
            except (TypeError, ValueError, NotImplementedError):
                iv, has_interval = None, False
            if iv is not None and iv.ndim == 3:
                for j, c in enumerate(classes):
                    out[f"proba_{c}_lower_{pct}"] = iv[:, j, 0]
                    out[f"proba_{c}_upper_{pct}"] = iv[:, j, 1]
            else:
                has_interval = False
    else:
        out["mean"] = np.asarray(model.predict(X))
        if has_interval:
            iv = np.asarray(model.predict_interval(X, prob=args.prob))
            out[f"lower_{pct}"] = iv[:, 0]
            out[f"upper_{pct}"] = iv[:, 1]
    dest = Path(args.out)
    if dest.parent and not dest.parent.exists():
        dest.parent.mkdir(parents=True, exist_ok=True)
    out.to_csv(dest, index=False)
    note = "" if has_interval else f" (no interval columns: {type(model).__name__} gives no credible interval here)"
    _say(f"wrote {len(out)} predictions of {type(model).__name__} to {dest}: columns {list(out.columns)}{note}")
    return 0


# -- summary ----------------------------------------------------------------------------------------
def _family(idata):
    """The file's family from the registry (None for a family it does not know)."""
    from .families import REGISTRY

    return REGISTRY.get(str(idata.posterior.attrs.get("family", "")))


def _read_idata(path: Path):
    import arviz as az

    if not path.exists():
        raise CLIError(f"no such file: {path}")
    if path.is_dir():
        if (path / "posterior.nc").exists():
            path = path / "posterior.nc"
        else:
            raise CLIError(f"{path} is a folder without posterior.nc")
    try:
        idata = az.from_netcdf(str(path))
    except Exception as e:  # not NetCDF / not HDF5: one line, no traceback
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CLIError(f"cannot read {path} as an ArviZ NetCDF file: {first}") from None
    if "posterior" not in idata.groups():
        raise CLIError(f"{path} has no posterior group (groups: {idata.groups()})")
    return idata


def _summary_vars(idata, wanted=None) -> list[str]:
    post = idata.posterior
    if wanted:
        missing = [v for v in wanted if v not in post]
        if missing:
            raise CLIError(f"posterior variables {missing} not in the file; it has {list(post.data_vars)}")
        return list(wanted)
    # per-component variables of a mixture are left out: their labels switch between draws; per-tree
    # variables of a sum of trees (BART) are summarised by their mean over the trees (_per_tree_means)
    return [v for v in ("n_leaves", "depth", "sigma", "n_trees", "split_counts", "xi_bar")
            if v in post and (set(post[v].dims) <= {"chain", "draw", "feature"}
                              or set(post[v].dims) == {"chain", "draw", "tree"})]


def cmd_summary(args) -> int:
    """Print the ``az.summary`` table and the diagnostics that matter for the file's family."""
    import warnings

    import arviz as az

    from .diagnostics import loo

    idata = _read_idata(Path(args.posterior))
    post = idata.posterior
    family = str(post.attrs.get("family", "unknown"))
    task = str(post.attrs.get("task", "unknown"))
    nc, nd = post.sizes.get("chain", 1), post.sizes.get("draw", 0)
    fam = _family(idata)
    mcmc = fam is not None and fam.mcmc
    _say(f"file: {args.posterior}")
    _say(f"family: {family}, task: {task}, {nc} chain(s) x {nd} draw(s); groups: {', '.join(idata.groups())}")
    names = _summary_vars(idata, args.var_names)
    kind = "all" if mcmc or nc > 1 else "stats"
    source, note = _per_tree_means(idata, names)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ArviZ warns about few chains / constant draws; the table says enough
        table = az.summary(source, var_names=names, kind=kind, hdi_prob=args.prob)
    _say("\nposterior summary (az.summary" + (f"; {note}" if note else "") + "):")
    _say(table.to_string())
    if mcmc:
        from .convergence import check_convergence

        # the estimators' and the model context's table and message (bayestrees.convergence)
        _say("\nconvergence (R-hat above 1.01, bulk ESS below 100 per chain, chains that never moved):")
        _say(str(check_convergence(idata)))
    else:
        if fam is not None and fam.draws_are:
            _say(f"\nno R-hat/ESS: {fam.draws_are}.")
    acc = {k: v for k, v in post.attrs.items() if k.startswith("acceptance_")}
    if acc:
        _say("acceptance rates: " + ", ".join(f"{k[len('acceptance_'):]} {float(v):.3f}" for k, v in acc.items()))
    if "sample_stats" in idata.groups():
        ss = idata.sample_stats
        for v in ss.data_vars:
            if "accept" in v and (np.issubdtype(ss[v].dtype, np.number) or ss[v].dtype == bool):
                _say(f"sample_stats.{v}: mean {float(np.mean(ss[v].values)):.3f}")
    keys = fam.summary_attrs if fam is not None else ()
    if any(k in post.attrs for k in keys):
        _say(f"{family}: " + ", ".join(
            f"{k} {post.attrs[k]:.4g}" if isinstance(post.attrs[k], (float, np.floating)) else f"{k} {post.attrs[k]}"
            for k in keys if k in post.attrs))
    if "log_likelihood" in idata.groups():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = loo(idata, pointwise=True)
        k = np.asarray(res.pareto_k)
        _say(f"\nLOO: elpd_loo {res.elpd_loo:.2f} (se {res.se:.2f}), p_loo {res.p_loo:.2f}; "
             f"Pareto k > 0.7 at {int(np.sum(k > 0.7))} of {k.size} rows")
    else:
        _say("\nno log_likelihood group: LOO is not defined for this family (compare on held-out data)")
    return 0


# -- plot -------------------------------------------------------------------------------------------
def cmd_plot(args) -> int:
    """Write the main figures of a fit: leaf counts, variable importance, a tree, traces, BET's and PD plots."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise CLIError("plotting needs matplotlib: pip install 'bayestrees[plot]'") from None
    import arviz as az

    from . import plots

    idata = _read_idata(Path(args.posterior))
    post = idata.posterior
    family = str(post.attrs.get("family", "unknown"))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    written = []

    def save(fig, name):
        fig.savefig(out / name, dpi=args.dpi)
        plt.close(fig)
        written.append(out / name)

    if "n_leaves" in post:
        ax = plots.plot_n_leaves(idata)
        ax.set_title(f"{family}: posterior of the number of leaves")
        save(ax.figure, "n_leaves.png")
    if "split_counts" in post:
        ax = plots.plot_variable_importance(idata)
        save(ax.figure, "variable_importance.png")
    model = _load_model(Path(args.model)) if args.model else None
    if "trees" in idata.groups():
        binner = getattr(model, "binner_", None)  # thresholds in the data's units (bin codes without it)
        which = "the heaviest tree" if "component" in post.dims else "the tree"
        ax = plots.plot_tree(idata, binner=binner, title=f"{family}: {which} of chain 0, draw 0")
        save(ax.figure, "tree.png")
    trace_vars = [v for v in ("n_leaves", "depth", "sigma", "n_trees")
                  if v in post and set(post[v].dims) <= {"chain", "draw"}]  # not a mixture's per-component ones
    fam = _family(idata)
    if fam is not None and fam.mcmc and trace_vars:
        axes = az.plot_trace(idata, var_names=trace_vars, compact=True, backend_kwargs={"layout": "constrained"})
        save(np.asarray(axes).ravel()[0].figure, "trace.png")
    if "n_trees" in post:
        save(plots.plot_n_trees(idata).figure, "n_trees.png")
    if "xi_bar" in post:
        save(plots.plot_xi_bar(idata).figure, "xi_bar.png")
    if model is not None:
        if hasattr(model, "operating_curve_"):
            ax = plots.plot_operating_curve(model.operating_curve_, m_marker=model.effective_sample_size_)
            save(ax[0].figure, "operating_curve.png")
        if args.data and hasattr(model, "predict_draws"):
            df = _read_table(Path(args.data))
            X = _feature_frame(model, df, args.data, args.target)
            feats = args.features
            if feats:
                _columns_or_fail(X, feats, args.data, "--features")
            else:  # the feature with the largest posterior share of splits
                sc = post["split_counts"]
                extra = [d for d in sc.dims if d not in ("chain", "draw", "feature")]
                share = sc.sum(extra) if extra else sc
                mean = share.mean(("chain", "draw"))
                feats = [str(mean["feature"].values[int(np.argmax(mean.values))])]
            if len(feats) > 2:
                raise CLIError("--features takes one or two columns")
            res = plots.plot_partial_dependence(model, X, feats if len(feats) == 2 else feats[0])
            save((res[0] if len(feats) == 2 else res).figure, "partial_dependence.png")
    if not written:
        raise CLIError(f"{args.posterior} holds nothing to plot (posterior variables: {list(post.data_vars)})")
    _say("wrote " + ", ".join(str(p) for p in written))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bayestrees", description="Bayesian inference over decision trees (JAX).")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    d = sub.add_parser("demo", help="run every family on data shipped with the package and write a figure",
                       description="Fits a Bayesian forest, an empirical Bayesian forest, CART and BART to the "
                                   "motorcycle data, and Bayesian-forest, PCFG, safe-Bayes and Bayesian CART (MCMC) "
                                   "classifiers to Haberman's survival data; prints what it did and writes a "
                                   "figure and a NetCDF posterior.")
    d.add_argument("--out", default="bayestrees-demo", help="output folder (default: ./bayestrees-demo)")
    d.add_argument("--trees", type=int, default=100, help="trees per forest (default 100)")
    d.add_argument("--draws", type=int, default=None,
                   help="tuning steps and draws per chain of BART, Bayesian CART and BET (default: BART 500 "
                        "tuning steps + 1000 draws of every 2nd step, 50 trees; Bayesian CART 200 + 600 steps of "
                        "local moves on a ladder of temperatures and a particle Gibbs regrowth; 500 + 500 sweeps for "
                        "BET; given, BART runs 20 trees, 2 chains, every step kept)")
    d.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    d.set_defaults(func=cmd_demo)
    f = sub.add_parser("fit", help="fit a model to a CSV or Parquet file",
                       description="Fit a tree model to a table. Writes OUT/summary.txt, OUT/posterior.nc "
                                   "(ArviZ InferenceData, draw = tree) and OUT/model.pkl (bayestrees.load, "
                                   "bayestrees predict).",
                       epilog="example: bayestrees fit housing.csv --target price --model bf --out fit-bf")
    f.add_argument("data", help="CSV (header row) or Parquet file")
    f.add_argument("--target", required=True, help="name of the response column")
    f.add_argument("--model", default="bf", choices=sorted(MODELS),
                   help="; ".join(f"{k}: {v}" for k, v in MODELS.items()))
    f.add_argument("--task", default="auto", choices=["auto", "regression", "classification"],
                   help="auto: labels, and whole numbers with at most 20 distinct values, are classification")
    f.add_argument("--features", nargs="+", help="feature columns (default: every other column)")
    f.add_argument("--random-state", "--seed", dest="random_state", type=int, default=0,
                   help="the estimator's random_state (default 0; --seed is its former name)")
    g = f.add_argument_group("hyperparameters", "read from the families' configs; an option that the chosen "
                             "model does not take is ignored, one not given keeps the model's default")
    for name, text in _options().items():
        flags = ["--" + name.replace("_", "-")] + (["--n-estimators"] if name == "draws" else [])
        g.add_argument(*flags, dest=name, type=_auto, default=None, metavar="VALUE", help=text)
    f.add_argument("--out", default="bayestrees-fit", help="output folder")
    f.add_argument("--quiet", action="store_true", help="no progress bar")
    f.set_defaults(func=cmd_fit)
    pr = sub.add_parser("predict", help="predict with a saved model on a CSV or Parquet file",
                        description="Writes one row per input row: regression 'mean' and the credible interval "
                                    "of the function ('lower_90', 'upper_90'); classification 'prediction' (the "
                                    "most probable class), 'proba_<class>' and their intervals where the family "
                                    "gives posterior draws (forests, Bayesian CART).",
                        epilog="example: bayestrees predict fit-bf/model.pkl new.csv --out pred.csv")
    pr.add_argument("model", help="model file written by bayestrees fit (OUT/model.pkl) or est.save")
    pr.add_argument("data", help="CSV (header row) or Parquet file with the model's feature columns")
    pr.add_argument("--out", default="predictions.csv", help="output CSV (default: predictions.csv)")
    pr.add_argument("--prob", type=float, default=0.9, help="credible interval probability (default 0.9)")
    pr.add_argument("--target", help="a column to ignore when the model's feature names are unknown")
    pr.set_defaults(func=cmd_predict)
    su = sub.add_parser("summary", help="summarise a posterior file (az.summary and the family's diagnostics)",
                        description="Prints az.summary of the tree-size variables (n_leaves, depth, sigma, "
                                    "split_counts; BET's n_trees, xi_bar), R-hat and ESS for MCMC, acceptance "
                                    "rates, and LOO where the file has a log_likelihood group.")
    su.add_argument("posterior", help="NetCDF file written by bayestrees fit (OUT/posterior.nc) or idata.to_netcdf")
    su.add_argument("--var-names", nargs="+", help="posterior variables to summarise")
    su.add_argument("--prob", type=float, default=0.9, help="HDI probability (default 0.9)")
    su.set_defaults(func=cmd_summary)
    pl = sub.add_parser("plot", help="write the main figures of a fit as PNG files",
                        description="From the posterior: n_leaves.png, variable_importance.png, tree.png, and "
                                    "trace.png for MCMC (n_trees.png, xi_bar.png for BET). With --model: "
                                    "operating_curve.png (safe-Bayes); with --model and --data: "
                                    "partial_dependence.png.",
                        epilog="example: bayestrees plot fit-bc/posterior.nc --model fit-bc/model.pkl "
                               "--data train.csv --out figures")
    pl.add_argument("posterior", help="NetCDF file (or the folder bayestrees fit wrote)")
    pl.add_argument("--model", help="model file, for the safe-Bayes operating curve and partial dependence")
    pl.add_argument("--data", help="table whose rows the partial dependence averages over")
    pl.add_argument("--target", help="a column of --data to ignore when the model's feature names are unknown")
    pl.add_argument("--features", nargs="+", help="one or two features for the partial dependence "
                                                  "(default: the most used feature)")
    pl.add_argument("--out", default="bayestrees-figures", help="output folder (default: ./bayestrees-figures)")
    pl.add_argument("--dpi", type=int, default=110, help="resolution of the PNG files (default 110)")
    pl.set_defaults(func=cmd_plot)
    return p


def main(argv=None) -> int:
    """Run the command line; returns the exit status (0 ok, 1 no command, 2 an error reported in one line)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 1
    try:
        with warnings.catch_warnings():
            # ArviZ's notices about its coming API changes say nothing about the user's fit; they are
            # silenced for this command only (the library itself sets no warning filter)
            warnings.filterwarnings("ignore", category=FutureWarning, module="arviz")
            return int(args.func(args) or 0)
    except (CLIError, ValueError) as e:
        msg = str(e).strip().splitlines()
        print(f"error: {msg[0] if msg else type(e).__name__}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
