"""BET (Duan, Clancy & Szczesniak): the paper's simulations I-III, breast cancer, and speed.

Simulations (our reading of the paper's Tables 1-3; the exact boxes are not restated here):

* I: 300 rows, 100 per region, X uniform in a box per region, y ~ N(mean, 0.5^2):
  R1 = X1 in [0, .5] (mean 1), R2 = X1 in (.5, 1], X2 in [0, .5] (mean 3),
  R3 = X1 in (.5, 1], X2 in (.5, 1] (mean 5); X3 uniform on [0, 1] everywhere (no signal).
  Expected: one tree with the three regions.
* II: the rows of I duplicated (same X) with the means shifted by +2 (3, 5, 7): two trees.
* III: two partition schemes mixed: 300 rows as I, and 300 rows whose regions are on X2, X3
  (X2 <= .5: mean 2; X2 > .5, X3 <= .5: mean 4; X2 > .5, X3 > .5: mean 0).  Expected: two trees
  most of the time (paper: 9,665 of 10,000 steps).

Chain lengths as the paper: I and II 10,000 steps, the last 5,000 kept; III 20,000 steps, the first
10,000 burn-in (kept draws thinned by 5 for storage; ``n_trees`` is read from every kept step).

Breast cancer (Wisconsin, 683 complete rows, 9 covariates): in-sample misclassification of the
cluster-specific estimator after a chain of 10,000 steps (last 5,000 kept); half-split
cross-validation (342 train / 341 test, 10 seeds) with the ensemble estimator, and BF, RF
(``bt.BayesianForestClassifier``, 100 trees, weights exponential / multinomial) and
``bt.BayesianCARTClassifier`` on the same splits.

Speed: 10,000 sweeps on the breast-cancer data after compilation (1 chain), and 4 chains, vmapped
(``chain_method="vectorized"``) and in threads (``"parallel"``).

Run from the repository root::

    nice .venv/bin/python benchmarks/bet_paper.py all
    nice .venv/bin/python benchmarks/bet_paper.py sims|cancer|speed [--quick]
"""
from __future__ import annotations

import json
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from forest_common import RESULTS, machine, parser  # noqa: E402

import bayestrees as bt  # noqa: E402

# exact binning (every distinct value its own code) for the simulations: region borders at 0.5 are then
# representable; the chain starts with the rows spread over 4 trees (init_trees)
BET_SIM = dict(alpha_dp=1.0, delta=2.0, min_leaf_rows=5, max_trees=10, init_trees=4, max_depth=4, max_bins=1024)
BET_BC = dict(alpha_dp=1.0, delta=2.0, min_leaf_rows=5, max_trees=10, init_trees=4, max_depth=4, max_bins=10)


def _write(out, rec):
    rec = {**rec, "machine": machine(), "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    with open(out, "a") as fh:
        fh.write(json.dumps(rec, default=float) + "\n")
    print(json.dumps({k: v for k, v in rec.items() if k != "machine"}, default=float), flush=True)


def _regions(rng, n_per, means, axes):
    """``3 * n_per`` rows: region boxes on ``axes = (a, b)`` (a <= .5 | a > .5, b <= .5 | a > .5, b > .5)."""
    X = rng.uniform(size=(3 * n_per, 3))
    a, b = axes
    X[:n_per, a] = rng.uniform(0.0, 0.5, n_per)
    X[n_per:, a] = rng.uniform(0.5, 1.0, 2 * n_per)
    X[n_per:2 * n_per, b] = rng.uniform(0.0, 0.5, n_per)
    X[2 * n_per:, b] = rng.uniform(0.5, 1.0, n_per)
    mean = np.repeat(np.asarray(means, float), n_per)
    return X, mean + 0.5 * rng.normal(size=3 * n_per), mean


def simulation(which, rng):
    X, y, m = _regions(rng, 100, (1.0, 3.0, 5.0), (0, 1))
    if which == "I":
        return X, y, m
    if which == "II":
        y2 = m + 2.0 + 0.5 * rng.normal(size=len(m))
        return np.vstack([X, X]), np.concatenate([y, y2]), np.concatenate([m, m + 2.0])
    X2, y2, m2 = _regions(rng, 100, (2.0, 4.0, 0.0), (1, 2))
    return np.vstack([X, X2]), np.concatenate([y, y2]), np.concatenate([m, m2])


def run_sims(args, out):
    lengths = {"I": (5000, 5000), "II": (5000, 5000), "III": (10000, 10000)}
    for which in ("I", "II", "III"):
        tune, keep = lengths[which]
        if args.quick:
            tune, keep = 300, 300
        rng = np.random.default_rng(0)
        X, y, m = simulation(which, rng)
        t0 = time.perf_counter()
        with warnings.catch_warnings(record=True) as wlist:
            warnings.simplefilter("always", RuntimeWarning)
            reg = bt.BETRegressor(**BET_SIM, draws=keep // 5, thin=5, tune=tune, random_state=0).fit(X, y)
        wall = time.perf_counter() - t0
        nt = reg.result_.info.n_trees.ravel()                      # every kept step (thin 5: the kept ones)
        dist = {int(k): int(v) for k, v in sorted(Counter(nt.tolist()).items())}
        best = reg.best_ensemble_
        occ = np.flatnonzero(best["occupied"])
        trees = [bt.tree.to_text(bt.tree.index_tree(best["trees"], int(j)), feature_names=["X1", "X2", "X3"])
                 for j in occ]
        leaves = [int(np.sum(np.asarray(best["trees"].left[j]) == -1)) for j in occ]
        rmse_cluster = float(np.sqrt(np.mean((reg.predict_cluster() - m) ** 2)))
        # trees holding at least q rows in each kept draw (tiny components of a few rows left out)
        Z = np.asarray(reg.result_.draws.z).reshape(-1, len(y))
        q = BET_SIM["min_leaf_rows"]
        big = [int(np.sum(np.bincount(z, minlength=BET_SIM["max_trees"]) >= q)) for z in Z]
        big_dist = {int(k): int(v) for k, v in sorted(Counter(big).items())}
        small_rows = float(np.mean([np.sum(np.bincount(z)[np.bincount(z) < q]) for z in Z]))
        _write(out, {"bench": "bet_sim", "simulation": which, "n": len(y), "tune": tune, "kept_steps": keep,
                     "thin": 5, "n_trees_dist_over_kept_draws": dist, "best_n_trees": best["n_trees"],
                     "best_leaves_per_tree": leaves, "trees_with_q_rows_dist": big_dist,
                     "mean_rows_in_trees_below_q": small_rows, "best_w": [float(best["w"][j]) for j in occ],
                     "rmse_cluster_vs_true_mean": rmse_cluster, "wall_s": wall,
                     "warnings": [str(w.message) for w in wlist], "settings": BET_SIM})
        for j, t in zip(occ, trees):
            print(f"--- simulation {which}, best ensemble, tree {j} (w = {best['w'][j]:.3f})\n{t}", flush=True)


def load_cancer(data_dir):
    rows = [r.strip().split(",") for r in open(Path(data_dir) / "breast_cancer_wisconsin.data") if r.strip()]
    rows = [r for r in rows if "?" not in r]
    a = np.asarray(rows, dtype=float)
    return a[:, 1:10], a[:, 10].astype(int)


def run_cancer(args, out):
    X, y = load_cancer(args.data_dir)
    assert X.shape == (683, 9), X.shape
    tune, keep = (5000, 5000) if not args.quick else (300, 300)
    t0 = time.perf_counter()
    if args.skip_in_sample:
        tune = 0
    if args.skip_in_sample:
        return _half_splits(args, out, X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        clf = bt.BETClassifier(**BET_BC, draws=keep // 5, thin=5, tune=tune, random_state=0).fit(X, y)
    nt = Counter(clf.result_.info.n_trees.ravel().tolist())
    _write(out, {"bench": "bet_cancer_in_sample", "n": len(y), "tune": tune, "kept_steps": keep,
                 "misclass_cluster": float(np.mean(clf.predict_cluster() != y)),
                 "misclass_ensemble": float(np.mean(clf.predict(X) != y)),
                 "n_trees_dist": {int(k): int(v) for k, v in sorted(nt.items())},
                 "xi_bar": [float(v) for v in clf.xi_bar_], "overflow": clf.result_.overflow_total,
                 "wall_s": time.perf_counter() - t0, "settings": BET_BC})
    _half_splits(args, out, X, y)


def _half_splits(args, out, X, y):
    seeds = range(10) if not args.quick else range(2)
    cv_tune, cv_keep = (args.cv_tune, args.cv_kept) if not args.quick else (200, 200)
    methods = args.cv_methods.split(",")
    if not set(methods) <= {"bet", "bf", "rf", "bcart"}:
        raise SystemExit(f"--cv-methods: unknown model in {args.cv_methods!r} (known: bet, bf, rf, bcart)")
    res = {k: [] for k in methods}
    for s in seeds:
        perm = np.random.default_rng(s).permutation(len(y))
        tr, te = perm[:342], perm[342:]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            bet = bt.BETClassifier(**BET_BC, draws=max(1, cv_keep // 5), thin=5, tune=cv_tune, chains=args.cv_chains,
                                   random_state=s)
            models = {"bet": bet,
                      "bf": bt.BayesianForestClassifier(100, weights="exponential", random_state=s),
                      "rf": bt.BayesianForestClassifier(100, weights="multinomial", max_features="sqrt",
                                                        random_state=s),
                      "bcart": bt.BayesianCARTClassifier(draws=1000, tune=1000, chains=4, max_depth=6, max_bins=10,
                                                         random_state=s)}
            models = {k: v for k, v in models.items() if k in methods}
            rec = {"bench": "bet_cancer_half_split", "seed": s, "bet_tune": cv_tune, "bet_kept": cv_keep,
                   "bet_chains": args.cv_chains}
            for name, mdl in models.items():
                t0 = time.perf_counter()
                mdl.fit(X[tr], y[tr])
                err = float(np.mean(mdl.predict(X[te]) != y[te]))
                res[name].append(err)
                rec[name] = err
                rec[f"{name}_s"] = time.perf_counter() - t0
            if "bet" in models:
                rec["bet_mean_n_trees"] = float(np.mean(bet.n_trees_))
        _write(out, rec)
    _write(out, {"bench": "bet_cancer_half_split_summary", "splits": len(list(seeds)), "bet_tune": cv_tune,
                 "bet_kept": cv_keep, "bet_chains": args.cv_chains,
                 **{f"{k}_mean": float(np.mean(v)) for k, v in res.items()},
                 **{f"{k}_sd": float(np.std(v, ddof=1)) if len(v) > 1 else 0.0 for k, v in res.items()}})


def run_speed(args, out):
    import jax

    from bayestrees.data import prepare_data
    from bayestrees.inference.bet.fit import BETConfig, fit_bet

    X, y = load_cancer(args.data_dir)
    data = prepare_data(X, y, task="classification", max_bins=10, allow_nan=False)
    sweeps = args.sweeps if not args.quick else 500
    kw = {k: v for k, v in BET_BC.items() if k != "max_bins"}
    runs = [(1, "vectorized")] + [(4, m) for m in args.chain_methods.split(",")]
    first = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for chains, method in runs:  # compile (and 10 sweeps), timed apart
            t0 = time.perf_counter()
            fit_bet(jax.random.key(0), data, BETConfig(**kw, draws=1, tune=10, chains=chains, chain_method=method))
            first[chains, method] = time.perf_counter() - t0
        # the configurations take turns, so a slow spell of the machine hits them alike
        times = {r: [] for r in runs}
        for rep in range(args.speed_repeats):
            for chains, method in runs:
                cfg = BETConfig(**kw, draws=1, tune=sweeps, chains=chains, chain_method=method)
                t0, c0 = time.perf_counter(), time.process_time()
                r = fit_bet(jax.random.key(1), data, cfg)
                run, cpu = time.perf_counter() - t0, time.process_time() - c0
                times[chains, method].append(run)
                _write(out, {"bench": "bet_speed", "data": "breast_cancer", "n": data.n, "chains": chains,
                             "chain_method": method, "sweeps": sweeps, "repeat": rep,
                             "first_call_s (compile + 10 sweeps)": first[chains, method], "run_s": run,
                             "cpu_s (all threads)": cpu,
                             "per_sweep_ms": 1000 * run / sweeps, "ratio_to_one_chain_this_repeat":
                             run / times[runs[0]][-1], "n_trees_last": int(np.asarray(r.draws.n_trees).ravel()[-1]),
                             "settings": BET_BC})
    one = np.asarray(times[runs[0]])
    _write(out, {"bench": "bet_speed_summary", "sweeps": sweeps, "repeats": args.speed_repeats,
                 **{f"median_ratio_{c}_chains_{m}": float(np.median(np.asarray(times[c, m]) / one))
                    for c, m in runs[1:]},
                 **{f"ratios_{c}_chains_{m}": (np.asarray(times[c, m]) / one).round(3).tolist() for c, m in runs[1:]}})


def main():
    p = parser("BET paper reproduction")
    p.add_argument("part", choices=["sims", "cancer", "speed", "all"])
    p.add_argument("--cv-chains", type=int, default=1, help="BET chains per half-split fit (pooled draws)")
    p.add_argument("--cv-methods", default="bet,bf,rf,bcart", help="half-split: the models to fit (comma-separated)")
    p.add_argument("--cv-tune", type=int, default=3000, help="BET tuning steps per half-split fit")
    p.add_argument("--cv-kept", type=int, default=2000, help="BET kept steps per half-split fit (thinned by 5)")
    p.add_argument("--sweeps", type=int, default=10000, help="speed: sweeps per timed run (the issue's 10,000)")
    p.add_argument("--speed-repeats", type=int, default=3, help="speed: timed runs of each configuration, in turn")
    p.add_argument("--chain-methods", default="vectorized,parallel",
                   help="speed: how the 4 chains run (comma-separated; 1 chain runs unbatched either way)")
    p.add_argument("--skip-in-sample", action="store_true", help="cancer: only the half-split comparison")
    args = p.parse_args()
    out = Path(args.out) if args.out else RESULTS / ("bet_paper_quick.jsonl" if args.quick else "bet_paper.jsonl")
    out.parent.mkdir(parents=True, exist_ok=True)
    for part, fn in (("speed", run_speed), ("sims", run_sims), ("cancer", run_cancer)):
        if args.part in (part, "all"):
            fn(args, out)


if __name__ == "__main__":
    main()
