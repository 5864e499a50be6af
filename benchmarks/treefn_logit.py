"""Tree functions in a logistic model: the logit path (Polya-Gamma draws) against the general path.

A Bernoulli model with a logit link, ``bt.bart_function`` (``--m`` trees, default 50) plus a fixed
offset at the logit of the training rows' mean (no other site, so that the trees alone are
measured; ``--intercept`` adds a Normal(0, 1.5^2) intercept updated by NUTS)::

    f = bt.bart_function("f", X, m=m)
    numpyro.sample("y", dist.Bernoulli(logits=offset + f), obs=y)

Data: ``--data sim`` (``--n`` rows, 5 uniform features, log-odds ``-0.3 + 1.5 sin(pi x0 x1) + 2 (x2 -
0.5) - [x3 > 0.7]``) or a real binary set from the benchmark data folder (``--data breast``: breast
cancer Wisconsin, 683 complete rows, 9 features; ``--data pima``: Pima diabetes, 768 rows, 8
features).  A quarter of the rows (at most 2,000) is held out.

Each path (``--paths``: ``logit``, ``conjugate="auto"``, which takes the logit path on this model;
``general``, ``conjugate=False``) is fitted ``--fits`` times with the same data and sampler seeds 1,
2, ...: the first fit compiles, the others load its programs from the compilation cache, so their
times are the times after compilation.  Per fit it prints and writes
(``benchmarks/results/treefn_logit.jsonl``): the seconds, the largest R-hat and the smallest bulk ESS
of the function at 10 held-out rows, R-hat and bulk ESS of the number of leaves summed over the
trees, the mean held-out log score per row of the posterior mean probability, a logistic
regression's (scikit-learn, no penalty) and scikit-learn's gradient boosting's with the log loss.

    python benchmarks/treefn_logit.py --data sim --n 2000
    python benchmarks/treefn_logit.py --data breast
"""
from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import arviz as az
import numpy as np
import numpyro
import numpyro.distributions as dist

import bayestrees as bt

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
RESULTS = Path(__file__).resolve().parent / "results" / "treefn_logit.jsonl"


def load(name: str, n: int, rng):
    if name == "sim":
        X = rng.uniform(size=(n, 5))
        eta = -0.3 + 1.5 * np.sin(np.pi * X[:, 0] * X[:, 1]) + 2.0 * (X[:, 2] - 0.5) - 1.0 * (X[:, 3] > 0.7)
        y = (rng.uniform(size=n) < 1.0 / (1.0 + np.exp(-eta))).astype(float)
        return X, y
    if name == "breast":
        rows = [r.split(",") for r in (DATA / "breast_cancer_wisconsin.data").read_text().split()]
        rows = [r for r in rows if "?" not in r and len(r) == 11]
        a = np.asarray(rows, float)
        return a[:, 1:10], (a[:, 10] == 4).astype(float)
    if name == "pima":
        a = np.genfromtxt(DATA / "pima_diabetes.csv", delimiter=",", skip_header=1)
        return a[:, :8], a[:, 8].astype(float)
    raise ValueError(name)


def log_score(p, y):
    p = np.clip(p, 1e-12, 1 - 1e-12)
    return float(np.mean(y * np.log(p) + (1 - y) * np.log1p(-p)))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="sim", choices=("sim", "breast", "pima"))
    ap.add_argument("--n", type=int, default=2000, help="training and held-out rows of --data sim")
    ap.add_argument("--m", type=int, default=50)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--tune", type=int, default=1000)
    ap.add_argument("--paths", nargs="+", default=["logit", "general"], choices=("logit", "general"))
    ap.add_argument("--intercept", action="store_true")
    ap.add_argument("--fits", type=int, default=2,
                    help="fits per path, sampler seeds 1, 2, ...: the first compiles, the others load its programs")
    ap.add_argument("--slide", type=lambda v: v if v == "auto" else int(v), default="auto",
                    help="sample_model's slide (the logit path only; default 'auto')")
    ap.add_argument("--local-moves", type=int, default=None, help="bt.sample_model's local_moves (moves of every "
                    "tree a step; default the library's)")
    ap.add_argument("--particles", type=lambda v: v if v == "auto" else int(v), default="auto",
                    help="bt.sample_model's particles (a particle Gibbs regrowth of every tree a step)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(RESULTS))
    a = ap.parse_args(argv)
    rng = np.random.default_rng(a.seed)
    X, y = load(a.data, a.n + min(a.n // 4, 2000) if a.data == "sim" else 0, rng)
    order = rng.permutation(len(y))
    n_test = min(len(y) // 4, 2000)
    test, train = order[:n_test], order[n_test:]
    Xtr, ytr, Xte, yte = X[train], y[train].astype(np.float32), X[test], y[test]
    pbar = float(np.clip(ytr.mean(), 0.01, 0.99))
    offset = float(np.log(pbar / (1 - pbar)))

    def model(X, y=None):
        b0 = numpyro.sample("b0", dist.Normal(0.0, 1.5)) if a.intercept else 0.0
        f = bt.bart_function("f", X, m=a.m)
        numpyro.sample("y", dist.Bernoulli(logits=offset + b0 + f), obs=y)

    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.linear_model import LogisticRegression

    peers = {"glm": LogisticRegression(C=np.inf, max_iter=5000).fit(Xtr, ytr),
             "hgb": HistGradientBoostingClassifier(random_state=0).fit(Xtr, ytr)}
    peer_scores = {k: log_score(v.predict_proba(Xte)[:, 1], yte) for k, v in peers.items()}
    for path in a.paths:
        for seed in range(1, a.fits + 1):
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fit = bt.sample_model(model, Xtr, ytr, draws=a.draws, tune=a.tune, chains=a.chains, random_seed=seed,
                                      conjugate="auto" if path == "logit" else False, slide=a.slide,
                                      local_moves=a.local_moves, particles=a.particles, log_likelihood=False)
            seconds = time.perf_counter() - t0
            f_new = fit.function("f", Xte)                     # (chain, draw, n_test)
            b0 = np.asarray(fit.idata.posterior["b0"])[..., None] if a.intercept else 0.0
            p = 1.0 / (1.0 + np.exp(-(offset + b0 + f_new)))
            ds = az.convert_to_dataset({"f": f_new[..., :10]})
            leaves = az.convert_to_dataset({"leaves": np.asarray(fit.idata.posterior["f_n_leaves"]).sum(-1)})
            rec = dict(data=a.data, n_train=len(train), n_test=n_test, m=a.m, chains=a.chains, draws=a.draws,
                       tune=a.tune, path=path, slide=a.slide, local_moves=a.local_moves,
                       particles=a.particles, intercept=a.intercept, sampler_seed=seed, seconds=seconds,
                       compiled=seed == 1, rhat_f_max=float(az.rhat(ds)["f"].max()),
                       ess_f_min=float(az.ess(ds)["f"].min()), rhat_leaves=float(az.rhat(leaves)["leaves"]),
                       ess_leaves=float(az.ess(leaves)["leaves"]), log_score=log_score(p.mean(axis=(0, 1)), yte),
                       glm_log_score=peer_scores["glm"], hgb_log_score=peer_scores["hgb"],
                       time=time.strftime("%Y-%m-%d %H:%M:%S"))
            if a.intercept:
                b = az.convert_to_dataset({"b0": np.asarray(fit.idata.posterior["b0"])})
                rec.update(rhat_b0=float(az.rhat(b)["b0"]), ess_b0=float(az.ess(b)["b0"]))
            print(json.dumps(rec), flush=True)
            with open(a.out, "a") as fh:
                fh.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
