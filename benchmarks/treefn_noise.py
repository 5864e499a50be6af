"""Tree functions under non-Normal noise: the augmented and conjugate paths against the general path.

Three cases of issue "Trees inside user models that converge", each fitted on ``--n`` simulated rows
(5 uniform features; a quarter as many, at most 2,000, held out) with ``bt.sample_model``:

``--case student_t``: ``y = g(x) + 0.3 t_2`` with ``g(x) = 2 sin(pi x0) + x1 - [x2 > 0.6]``, the
tutorial's model (``y`` not scaled; the function's prior sd a robust sd of ``y``; ``sigma`` and ``nu``
by NUTS)::

    f = bt.bart_function("f", X, m=m, leaf_sd=scale / sqrt(m))
    sigma ~ HalfNormal(scale);  nu ~ Gamma(2, 0.1)
    y ~ StudentT(nu, centre + f, sigma)

  paths: ``augmented`` (``conjugate="auto"``: the Student-t path, Gamma latents of the scale mixture,
  then the BART family's step) and ``general`` (``conjugate=False``: the Laplace joint move).

``--case normal``: ``y = g(x) + 0.3 e``, ``e ~ N(0, 1)``, ``Normal(centre + f, sigma)`` (``sigma`` by NUTS):
  ``augmented`` is here the conjugate Normal path (``"auto"``), ``general`` the Laplace joint move.

``--case hetero``: ``y = g(x) + s(x) e`` with ``log s(x) = -1.2 + 1.2 x3 - 0.5 [x0 > 0.5]``, a mean
function and a noise function, two ways:

  * ``general``: the tutorial's, ``h`` the log sd about ``log(scale)`` with Normal leaves (prior sd 1),
    ``y ~ Normal(centre + f, scale exp(h))`` (``h`` by the general path);
  * ``augmented``: ``h`` the log precision about ``-2 log(scale)`` with log-gamma leaves (a product of
    trees for the precision, each tree's factor Gamma, prior sd of ``h`` 2, the same as the other's
    log sd prior sd of 1), ``y ~ Normal(centre + f, scale exp(-h / 2))`` (``h`` by the Gamma-Poisson
    path: its log density ``h / 2 - r^2 exp(h) / (2 scale^2)`` has that form).

  The two are different priors on the noise, compared as a user would choose between them.  ``f``
  takes the conjugate Normal path in both.

Each path is fitted ``--fits`` times with sampler seeds 1, 2, ...: the first compiles (its time less
the second's is the compile time), the others load its programs from the compilation cache.  Per fit
it prints and writes (``benchmarks/results/treefn_noise.jsonl``): the seconds, the largest R-hat and
the smallest bulk ESS of each function at 10 held-out rows and of every other site, and the mean
held-out log predictive density per row (the log of the mean over draws of each row's density),
beside a linear model with the same noise family by maximum likelihood (Student-t errors; Normal
errors of log-linear sd) and scikit-learn's gradient boosting (``absolute_error`` loss with a
Student-t fitted to its out-of-fold residuals; ``squared_error`` for the mean and a second model with
the ``gamma`` loss on the squared out-of-fold residuals for the variance).

    python benchmarks/treefn_noise.py --case student_t --n 2000
    python benchmarks/treefn_noise.py --case hetero --n 2000
    python benchmarks/treefn_noise.py --case student_t --paths augmented --slide 3
    python benchmarks/treefn_noise.py --case student_t --paths augmented --pymc    # and pymc-bart (.venv-pymc)
"""
from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
import warnings
from pathlib import Path

import arviz as az
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from scipy import optimize, stats

import bayestrees as bt
from bayestrees.inference.treefn.kernel import TreeMoves

RESULTS = Path(__file__).resolve().parent / "results" / "treefn_noise.jsonl"


def simulate(case: str, n: int, rng):
    X = rng.uniform(size=(n, 5))
    g = 2.0 * np.sin(np.pi * X[:, 0]) + X[:, 1] - 1.0 * (X[:, 2] > 0.6)
    if case == "student_t":
        return X, g + 0.3 * rng.standard_t(2.0, size=n)
    if case == "normal":
        return X, g + 0.3 * rng.normal(size=n)
    log_s = -1.2 + 1.2 * X[:, 3] - 0.5 * (X[:, 0] > 0.5)
    return X, g + np.exp(log_s) * rng.normal(size=n)


def student_t_glm(X, y):
    """Linear regression with Student-t errors by maximum likelihood: a function of new rows to
    ``(loc, scale, df)``."""
    A = np.column_stack([np.ones(len(y)), X])
    beta0 = np.linalg.lstsq(A, y, rcond=None)[0]

    def nll(p):
        b, log_s, log_df = p[:-2], p[-2], p[-1]
        return -np.sum(stats.t.logpdf(y, np.exp(log_df), A @ b, np.exp(log_s)))

    p = optimize.minimize(nll, np.concatenate([beta0, [np.log(np.std(y)), np.log(5.0)]]), method="L-BFGS-B").x
    return lambda Xn: (np.column_stack([np.ones(len(Xn)), Xn]) @ p[:-2], np.exp(p[-2]), np.exp(p[-1]))


def hetero_glm(X, y):
    """Linear mean and log-linear sd, Normal errors, by maximum likelihood."""
    A = np.column_stack([np.ones(len(y)), X])
    k = A.shape[1]
    beta0 = np.linalg.lstsq(A, y, rcond=None)[0]

    def nll(p):
        return -np.sum(stats.norm.logpdf(y, A @ p[:k], np.exp(A @ p[k:])))

    p = optimize.minimize(nll, np.concatenate([beta0, [np.log(np.std(y))], np.zeros(k - 1)]), method="L-BFGS-B").x
    return lambda Xn: (np.column_stack([np.ones(len(Xn)), Xn]) @ p[:k], np.exp(np.column_stack([np.ones(len(Xn)), Xn]) @ p[k:]))


def peers(case: str, Xtr, ytr, Xte, yte) -> dict:
    from sklearn.ensemble import HistGradientBoostingRegressor
    from sklearn.model_selection import cross_val_predict

    if case == "normal":
        A, Ate = (np.column_stack([np.ones(len(x)), x]) for x in (Xtr, Xte))
        beta, *_ = np.linalg.lstsq(A, ytr, rcond=None)
        s = np.std(ytr - A @ beta)
        oof = cross_val_predict(HistGradientBoostingRegressor(random_state=0), Xtr, ytr, cv=5)
        hgb = HistGradientBoostingRegressor(random_state=0).fit(Xtr, ytr)
        return dict(glm_log_score=float(np.mean(stats.norm.logpdf(yte, Ate @ beta, s))),
                    hgb_log_score=float(np.mean(stats.norm.logpdf(yte, hgb.predict(Xte), np.std(ytr - oof)))))

    if case == "student_t":
        loc, scale, df = student_t_glm(Xtr, ytr)(Xte)
        glm = float(np.mean(stats.t.logpdf(yte, df, loc, scale)))
        hgb = HistGradientBoostingRegressor(loss="absolute_error", random_state=0).fit(Xtr, ytr)
        oof = cross_val_predict(HistGradientBoostingRegressor(loss="absolute_error", random_state=0), Xtr, ytr, cv=5)
        df_r, _, s_r = stats.t.fit(ytr - oof, floc=0.0)   # the residuals out of fold
        return dict(glm_log_score=glm, hgb_log_score=float(np.mean(stats.t.logpdf(yte, df_r, hgb.predict(Xte), s_r))))
    loc, sd = hetero_glm(Xtr, ytr)(Xte)
    glm = float(np.mean(stats.norm.logpdf(yte, loc, sd)))
    mean = HistGradientBoostingRegressor(random_state=0).fit(Xtr, ytr)
    oof = cross_val_predict(HistGradientBoostingRegressor(random_state=0), Xtr, ytr, cv=5)   # residuals out of fold
    var = HistGradientBoostingRegressor(loss="gamma", random_state=0).fit(Xtr, (ytr - oof) ** 2 + 1e-12)
    return dict(glm_log_score=glm, hgb_log_score=float(np.mean(stats.norm.logpdf(yte, mean.predict(Xte),
                                                                                     np.sqrt(var.predict(Xte))))))


def lppd(logdens) -> float:
    """Mean over rows of the log of the mean over draws of ``exp(logdens)`` (chain, draw, row)."""
    flat = logdens.reshape(-1, logdens.shape[-1])
    mx = flat.max(0)
    return float(np.mean(mx + np.log(np.mean(np.exp(flat - mx), 0))))


def summary(values: dict) -> dict:
    """Largest R-hat and smallest bulk ESS of each array (chain, draw, ...)."""
    ds = az.convert_to_dataset(values)
    rh, es = az.rhat(ds), az.ess(ds)
    out = {}
    for k in values:
        out[f"rhat_{k}"] = float(rh[k].max())
        out[f"ess_{k}"] = float(es[k].min())
    return out


PYMC_PYTHON = Path(__file__).resolve().parents[1] / ".venv-pymc" / "bin" / "python"


def pymc_worker(data: str, result: str, draws: int, tune: int, chains: int, seed: int) -> None:
    """pymc-bart on the Student-t case (run in ``.venv-pymc``): ``pmb.BART("mu", X, y - centre, m)`` for
    the function, ``sigma`` and ``nu`` with the same priors, ``pm.sample``'s defaults (PGBART for the
    trees, NUTS for the rest); a short run first compiles.  The kept trees are matched to their chain and
    draw by their sum at training rows against the trace of ``mu`` (the order pymc-bart keeps them in
    is its processes'), then evaluated at the held-out rows."""
    import logging

    import pymc as pm
    import pymc_bart as pmb

    logging.getLogger("pymc").setLevel(logging.ERROR)
    warnings.simplefilter("ignore")
    d = np.load(data)
    Xtr, ytr, Xte, yte = d["Xtr"], d["ytr"], d["Xte"], d["yte"]
    centre, scale, m = float(d["centre"]), float(d["scale"]), int(d["m"])

    def build():
        with pm.Model() as model:
            mu = pmb.BART("mu", Xtr, ytr - centre, m=m)
            sigma = pm.HalfNormal("sigma", scale)
            nu = pm.Gamma("nu", 2.0, 0.1)
            pm.StudentT("y", nu=nu, mu=centre + mu, sigma=sigma, observed=ytr)
        return model, mu

    t0 = time.perf_counter()
    model, _ = build()
    with model:
        pm.sample(draws=5, tune=5, chains=1, cores=1, random_seed=seed + 100, progressbar=False,
                  compute_convergence_checks=False)
    compile_s = time.perf_counter() - t0
    model, mu = build()
    t0 = time.perf_counter()
    with model:
        idata = pm.sample(draws=draws, tune=tune, chains=chains, random_seed=seed, progressbar=False,
                          compute_convergence_checks=False)
    seconds = time.perf_counter() - t0
    k = 50
    trace = idata.posterior["mu"].values[:, :, :k]
    C, D = trace.shape[:2]
    flat = trace.reshape(C * D, -1)
    Xall = np.vstack([Xtr[:k], Xte])
    # every kept tree set's sum (pymc-bart may keep more sets than draws, e.g. some of the tuning
    # steps'): each draw takes the set whose sum at k training rows is its trace of mu
    V = np.stack([sum(np.asarray(tree.predict(x=Xall)).reshape(-1) for odim in entry for tree in odim)
                  for entry in mu.owner.op.all_trees])
    err = np.max(np.abs(flat[:, None, :] - V[None, :, :k]), axis=2)      # (draws, sets)
    pick = err.argmin(axis=1)
    worst = float(err[np.arange(C * D), pick].max())
    if worst > 1e-5 or len(set(pick.tolist())) != C * D:
        raise RuntimeError(f"could not match pymc-bart's kept trees to the trace (worst {worst})")
    f = V[pick, k:]
    f = f.reshape(C, D, -1)
    post = idata.posterior
    sigma, nu = (np.asarray(post[v])[..., None] for v in ("sigma", "nu"))
    rec = dict(seconds=seconds, compile_seconds=compile_s, match_worst_abs=worst,
               **summary({"f": f[..., :10], "sigma": np.asarray(post["sigma"]), "nu": np.asarray(post["nu"])}),
               log_score=lppd(stats.t.logpdf(yte, nu, centre + f, sigma)))
    Path(result).write_text(json.dumps(rec))


def run_pymc(a, Xtr, ytr, Xte, yte, centre, scale, base) -> dict:
    """The pymc-bart side in ``.venv-pymc`` (a subprocess of :func:`pymc_worker`): its record."""
    with tempfile.TemporaryDirectory() as tmp:
        data, result = Path(tmp) / "data.npz", Path(tmp) / "result.json"
        np.savez(data, Xtr=Xtr, ytr=ytr, Xte=Xte, yte=yte, centre=centre, scale=scale, m=a.m)
        cmd = [str(PYMC_PYTHON), str(Path(__file__).resolve()), "--pymc-worker", str(data), str(result),
               "--draws", str(a.draws), "--tune", str(a.tune), "--chains", str(a.chains)]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(f"pymc-bart failed: {p.stderr[-4000:]}")
        rec = json.loads(result.read_text())
    return dict(case=a.case, n_train=len(ytr), n_test=len(yte), m=a.m, chains=a.chains, draws=a.draws, tune=a.tune,
                path="pymc-bart", sampler="pm.sample defaults: PGBART (10 particles, 5 of 50 trees a step), NUTS",
                sampler_seed=1, **rec, **base, time=time.strftime("%Y-%m-%d %H:%M:%S"))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", default="student_t", choices=("student_t", "hetero", "normal"))
    ap.add_argument("--n", type=int, default=2000, help="training rows")
    ap.add_argument("--m", type=int, default=50)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--tune", type=int, default=1000)
    ap.add_argument("--paths", nargs="+", default=["augmented", "general"], choices=("augmented", "general"))
    ap.add_argument("--fits", type=int, default=2,
                    help="fits per path, sampler seeds 1, 2, ...: the first compiles, the others load its programs")
    ap.add_argument("--slide", type=lambda v: v if v == "auto" else int(v), default="auto",
                    help="sample_model's slide (the BART step's paths only; default 'auto')")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pymc", action="store_true",
                    help="also pymc-bart on the Student-t case, in .venv-pymc (pip install pymc pymc-bart)")
    ap.add_argument("--pymc-worker", nargs=2, metavar=("DATA", "RESULT"), help=argparse.SUPPRESS)
    ap.add_argument("--out", default=str(RESULTS))
    a = ap.parse_args(argv)
    if a.pymc_worker:
        return pymc_worker(*a.pymc_worker, a.draws, a.tune, a.chains, 1)
    rng = np.random.default_rng(a.seed)
    n_test = min(a.n // 4, 2000)
    X, y = simulate(a.case, a.n + n_test, rng)
    Xtr, ytr, Xte, yte = X[n_test:], y[n_test:].astype(np.float32), X[:n_test], y[:n_test]
    m = a.m
    centre = float(np.median(ytr)) if a.case == "student_t" else float(ytr.mean())
    scale = float(1.4826 * np.median(np.abs(ytr - centre))) if a.case == "student_t" else float(ytr.std())

    def student_t(X, y=None):
        f = bt.bart_function("f", X, m=m, leaf_sd=scale / np.sqrt(m))
        sigma = numpyro.sample("sigma", dist.HalfNormal(scale))
        nu = numpyro.sample("nu", dist.Gamma(2.0, 0.1))
        numpyro.sample("y", dist.StudentT(nu, centre + f, sigma), obs=y)

    def normal(X, y=None):
        f = bt.bart_function("f", X, m=m, leaf_sd=scale / np.sqrt(m))
        sigma = numpyro.sample("sigma", dist.HalfNormal(scale))
        numpyro.sample("y", dist.Normal(centre + f, sigma), obs=y)

    def hetero_general(X, y=None):
        f = bt.bart_function("f", X, m=m, leaf_sd=scale / np.sqrt(m))
        h = bt.bart_function("h", X, m=m, leaf_sd=1.0 / np.sqrt(m))
        numpyro.sample("y", dist.Normal(centre + f, scale * jnp.exp(h)), obs=y)

    def hetero_augmented(X, y=None):
        f = bt.bart_function("f", X, m=m, leaf_sd=scale / np.sqrt(m))
        h = bt.bart_function("h", X, m=m, leaf_sd=2.0 / np.sqrt(m), leaf_prior="loggamma")
        numpyro.sample("y", dist.Normal(centre + f, scale * jnp.exp(-0.5 * h)), obs=y)

    base = peers(a.case, Xtr, ytr, Xte, yte)
    first = {}
    for path in a.paths:
        if a.case in ("student_t", "normal"):
            model = student_t if a.case == "student_t" else normal
            conjugate = "auto" if path == "augmented" else False
        else:
            model, conjugate = (hetero_augmented if path == "augmented" else hetero_general), "auto"
        kinds = list(TreeMoves(model, conjugate=conjugate, slide=a.slide).prepare((Xtr, ytr), {}).conjugate_kinds)
        for seed in range(1, a.fits + 1):
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fit = bt.sample_model(model, Xtr, ytr, draws=a.draws, tune=a.tune, chains=a.chains, random_seed=seed,
                                      conjugate=conjugate, slide=a.slide, log_likelihood=False)
            seconds = time.perf_counter() - t0
            post = fit.idata.posterior
            f_new = fit.function("f", Xte)                      # (chain, draw, n_test)
            values = {"f": f_new[..., :10]}
            if a.case == "student_t":
                sigma, nu = (np.asarray(post[k])[..., None] for k in ("sigma", "nu"))
                logdens = stats.t.logpdf(yte, nu, centre + f_new, sigma)
                values.update(sigma=np.asarray(post["sigma"]), nu=np.asarray(post["nu"]))
            elif a.case == "normal":
                sigma = np.asarray(post["sigma"])[..., None]
                logdens = stats.norm.logpdf(yte, centre + f_new, sigma)
                values.update(sigma=np.asarray(post["sigma"]))
            else:
                h_new = fit.function("h", Xte)
                log_sd = np.log(scale) + (-0.5 * h_new if path == "augmented" else h_new)
                logdens = stats.norm.logpdf(yte, centre + f_new, np.exp(log_sd))
                values["log_sd"] = log_sd[..., :10]
            values.update({f"{k}_leaves": np.asarray(post[f"{k}_n_leaves"]).sum(-1)
                           for k in ("f", "h") if f"{k}_n_leaves" in post})
            first.setdefault(path, seconds)
            rec = dict(case=a.case, n_train=len(ytr), n_test=n_test, m=m, chains=a.chains, draws=a.draws, tune=a.tune,
                       path=path, slide=a.slide, kinds=kinds, sampler_seed=seed, seconds=seconds,
                       compile_seconds=(first[path] - seconds) if seed > 1 else None, **summary(values),
                       log_score=lppd(logdens), **base, time=time.strftime("%Y-%m-%d %H:%M:%S"))
            print(json.dumps(rec), flush=True)
            with open(a.out, "a") as fh:
                fh.write(json.dumps(rec) + "\n")
    if a.pymc:
        if a.case != "student_t":
            raise SystemExit("--pymc: the Student-t case only")
        rec = run_pymc(a, Xtr, ytr, Xte, yte, centre, scale, base)
        print(json.dumps(rec), flush=True)
        with open(a.out, "a") as fh:
            fh.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
