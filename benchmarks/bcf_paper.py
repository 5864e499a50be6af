"""Bayesian causal forests on the simulation designs of Hahn, Murray & Carvalho (2020, section 6).

Every replication draws one data set and fits, in this run, on the same rows and the same
propensity estimate:

* ``bayestrees``: ``bt.BCFRegressor`` at its defaults (4 chains of 1,000 + 1,000);
* ``slearner``: ``bt.BARTRegressor`` on ``[X, z]`` at its defaults, the effect at a row the
  difference of its predictions at ``z = 1`` and ``z = 0`` (the S-learner);
* ``stochtree``: stochtree's ``BCFModel`` at its defaults (5 grow-from-root sweeps, then 100 MCMC
  draws), and ``stochtree_long``: 4 chains of 1,000 + 1,000 MCMC steps (``num_gfr=0``), the length
  of ours.  stochtree runs in its own virtual environment (``--stochtree-python``, default
  ``.venv-stochtree/bin/python``), in a worker process of this script, on the same arrays.

The designs (section 6 of the paper): ``x1, x2, x3 ~ N(0, 1)``, ``x4 ~ Bernoulli(1/2)``, ``x5`` one of
three levels with ``g(1) = 2, g(2) = -1, g(3) = -4``; prognostic function linear ``1 + g(x5) + x1 x3``
or nonlinear ``-6 + g(x5) + 6 |x3 - 1|``; effect homogeneous ``3`` or heterogeneous ``1 + 2 x2 x4``;
propensity ``0.8 Phi(3 mu(x) / s - 0.5 x1) + 0.05 + u / 10`` (``s`` the sd of ``mu`` over the rows,
``u ~ U(0, 1)``): targeted selection; ``y = mu + tau z + N(0, 1)``.  The propensity given to every
method is the estimate ``bt.BCFRegressor`` makes by default (the posterior mean of a 50-tree
``bt.BARTClassifier``); the S-learner sees it as a feature too.

Per fit: RMSE of the CATE at the training rows, the ATE's estimate and error, whether its 95%
interval covers the sample ATE, the interval's length, seconds.  Records (JSON lines) go to
``--out``; the summary table is printed.

    .venv/bin/python benchmarks/bcf_paper.py --n 250 --reps 5
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DESIGNS = ("linear-homogeneous", "linear-heterogeneous", "nonlinear-homogeneous", "nonlinear-heterogeneous")


def design(name: str, n: int, seed: int):
    """``(X, y, z, tau, pi)`` of the paper's design ``name`` (module docstring)."""
    from scipy.stats import norm

    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3))
    x4 = rng.binomial(1, 0.5, n)
    x5 = rng.integers(1, 4, n)
    g = np.where(x5 == 1, 2.0, np.where(x5 == 2, -1.0, -4.0))
    linear, hetero = name.startswith("linear"), name.endswith("heterogeneous")
    mu = 1 + g + x[:, 0] * x[:, 2] if linear else -6 + g + 6 * np.abs(x[:, 2] - 1)
    tau = 1 + 2 * x[:, 1] * x4 if hetero else np.full(n, 3.0)
    pi = 0.8 * norm.cdf(3 * mu / mu.std() - 0.5 * x[:, 0]) + 0.05 + rng.uniform(size=n) / 10
    z = rng.binomial(1, pi)
    y = mu + tau * z + rng.normal(size=n)
    return np.column_stack([x, x4, x5]).astype(float), y, z, tau, pi


def metrics(tau_draws: np.ndarray, tau: np.ndarray) -> dict:
    """From effect draws at the training rows ``(draws, n)``."""
    ate = tau_draws.mean(1)
    lo, hi = np.quantile(ate, [0.025, 0.975])
    return dict(cate_rmse=float(np.sqrt(np.mean((tau_draws.mean(0) - tau) ** 2))), ate=float(ate.mean()),
                ate_true=float(tau.mean()), ate_error=float(ate.mean() - tau.mean()),
                covers=bool(lo <= tau.mean() <= hi), ate_length=float(hi - lo))


def fit_bayestrees(X, y, z, pihat, seed):
    import bayestrees as bt

    t = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m = bt.BCFRegressor(random_state=seed).fit(X, y, z, pihat=pihat)
    sec = time.perf_counter() - t
    draws = np.asarray(m.idata_.posterior["tau"]).reshape(-1, len(y))
    worst = max((row["rhat"] for row in m.convergence_.table.values() if np.isfinite(row["rhat"])), default=float("nan"))
    return draws, sec, dict(max_rhat=float(worst), warned=any("converged" in str(w.message) for w in caught))


def fit_slearner(X, y, z, pihat, seed):
    import bayestrees as bt

    A = np.column_stack([X, pihat, z])
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = bt.BARTRegressor(random_state=seed).fit(A, y)
    sec = time.perf_counter() - t
    A1, A0 = A.copy(), A.copy()
    A1[:, -1], A0[:, -1] = 1, 0
    return m.predict_draws(A1) - m.predict_draws(A0), sec, {}


def stochtree_worker(path_in: str, path_out: str) -> None:
    """Run in stochtree's environment: fit each configuration on the arrays of ``path_in``."""
    from stochtree import BCFModel

    d = np.load(path_in)
    out = {}
    configs = {"stochtree": dict(), "stochtree_long": dict(num_gfr=0, num_burnin=1000, num_mcmc=1000, num_chains=4)}
    for name in json.loads(str(d["methods"])):
        kw = dict(configs[name])
        chains = kw.pop("num_chains", 1)
        t = time.perf_counter()
        m = BCFModel()
        m.sample(X_train=d["X"], Z_train=d["z"], y_train=d["y"], propensity_train=d["pihat"],
                 general_params=dict(random_seed=int(d["seed"]), num_chains=chains), **kw)
        sec = time.perf_counter() - t
        out[name] = dict(tau_draws=np.asarray(m.tau_hat_train).T.tolist(), seconds=sec)
    Path(path_out).write_text(json.dumps(out))


def fit_stochtree(methods, X, y, z, pihat, seed, python):
    with tempfile.TemporaryDirectory() as tmp:
        fin, fout = os.path.join(tmp, "in.npz"), os.path.join(tmp, "out.json")
        np.savez(fin, X=X, y=y, z=z, pihat=pihat, seed=seed, methods=json.dumps(list(methods)))
        subprocess.run([python, __file__, "--stochtree-worker", fin, fout], check=True, cwd=ROOT)
        res = json.loads(Path(fout).read_text())
    return {k: (np.asarray(v["tau_draws"]), v["seconds"], {}) for k, v in res.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[250, 500])
    ap.add_argument("--designs", nargs="+", default=list(DESIGNS), choices=DESIGNS)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--first-rep", type=int, default=0)
    ap.add_argument("--methods", nargs="+", default=["bayestrees", "slearner", "stochtree", "stochtree_long"])
    ap.add_argument("--stochtree-python", default=str(ROOT / ".venv-stochtree" / "bin" / "python"))
    ap.add_argument("--out", default=str(RESULTS / "bcf_paper.jsonl"))
    ap.add_argument("--stochtree-worker", nargs=2, metavar=("IN", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.stochtree_worker:
        return stochtree_worker(*args.stochtree_worker)

    import jax

    from bayestrees.estimators.bcf import estimate_propensity

    rows = []
    for n in args.n:
        for dname in args.designs:
            for rep in range(args.first_rep, args.first_rep + args.reps):
                seed = 10_000 * n + 100 * DESIGNS.index(dname) + rep
                X, y, z, tau, pi = design(dname, n, seed)
                pihat, _ = estimate_propensity(X, z, rep)
                fits = {}
                if "bayestrees" in args.methods:
                    fits["bayestrees"] = fit_bayestrees(X, y, z, pihat, rep)
                if "slearner" in args.methods:
                    fits["slearner"] = fit_slearner(X, y, z, pihat, rep)
                peers = [m for m in args.methods if m.startswith("stochtree")]
                if peers:
                    fits.update(fit_stochtree(peers, X, y, z, pihat, rep, args.stochtree_python))
                jax.clear_caches()   # this data set's compiled programs (else 20 GB after 76 fits: lab notes)
                for method, (draws, sec, extra) in fits.items():
                    rec = dict(design=dname, n=n, rep=rep, seed=seed, method=method, seconds=round(sec, 2),
                               **metrics(draws, tau), **extra)
                    rows.append(rec)
                    print(json.dumps(rec), flush=True)
                    with open(args.out, "a") as fh:
                        fh.write(json.dumps(rec) + "\n")
    print("\n| n | design | method | reps | CATE RMSE | ATE bias | ATE RMSE | 95% coverage | interval length | s/fit |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    keys = sorted({(r["n"], r["design"], r["method"]) for r in rows}, key=lambda k: (k[0], DESIGNS.index(k[1]), k[2]))
    for n, dname, method in keys:
        rs = [r for r in rows if (r["n"], r["design"], r["method"]) == (n, dname, method)]
        err = np.array([r["ate_error"] for r in rs])
        print(f"| {n} | {dname} | {method} | {len(rs)} | {np.mean([r['cate_rmse'] for r in rs]):.3f} | {err.mean():+.3f} | "
              f"{np.sqrt(np.mean(err ** 2)):.3f} | {np.mean([r['covers'] for r in rs]):.2f} | "
              f"{np.mean([r['ate_length'] for r in rs]):.2f} | {np.mean([r['seconds'] for r in rs]):.1f} |")


if __name__ == "__main__":
    sys.exit(main())
