"""Simulation-based calibration of the Bayesian causal forest (``bt.causal.bcf_model``).

Talts, Betancourt, Simpson, Vehtari & Gelman (2018): repeat ``--n-sims`` times (default 100): draw
every quantity of the model from its prior, the trees of both functions included
(``numpyro.infer.Predictive``: the truncated tree prior by rejection), and with them ``y``; fit the
same model to that ``y`` with :func:`bayestrees.sample_model`; take the rank of each true quantity
among ``L`` kept posterior draws.  For a sampler of the exact posterior whose kept draws are about
independent, every rank is uniform on ``0..L``.  The ranks are binned (``--bins``) and tested by
Pearson's chi-squared at the 1% level per quantity, with the Bonferroni verdict over all of them.

Quantities: the sample average effect ``ate``, the effect ``tau`` at rows 0 and 1, the control
mean ``mu`` at row 0, ``sigma``.  The model is :func:`bayestrees.causal.bcf_model` at its priors
(the half-Cauchy scale of ``mu``, the ``b0, b1`` coding), with fewer trees (``--m-mu``, ``--m-tau``,
default 10 and 5) and on the standardised scale (``y_loc = 0``, ``y_scale = 1``, ``lambda`` fixed at
``--lam``) so that nothing is computed from the simulated ``y``; the design (``n`` rows, 3 uniform
covariates, the propensity ``Phi(x0 - 0.5)`` as the prognostic function's last feature, ``z`` drawn
from it) is drawn once from ``--seed`` and held fixed: the calibration is conditional on it.

Posterior draws: ``--chains`` chains of ``--tune`` warm-up steps and ``draws * thin`` kept steps,
every ``thin``-th used (``L = chains * draws``, ``L + 1`` a multiple of ``bins``).  The data are
arguments of the compiled programs (``jit_data=True``), so after the first fit each fit compiles
nothing.

    .venv/bin/python benchmarks/bcf_sbc.py                 # 100 data sets
    .venv/bin/python benchmarks/bcf_sbc.py --n-sims 10     # that it works

A process that fits many data sets keeps their compiled programs in JAX's caches until LLVM cannot
map more memory (one run stopped so after 36 fits); the script now clears those caches after each
fit (``jax.clear_caches()``), and the data sets can also be fitted in batches of processes
(``--first``, ``--n-sims``, the same ``--run-id``) and the table made from their records::

    for k in 0 20 40 60 80; do .venv/bin/python benchmarks/bcf_sbc.py --first $k --n-sims 20 --run-id R; done
    .venv/bin/python benchmarks/bcf_sbc.py --combine R

Records (one JSON line per data set, then the summary) are appended to ``--out``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
QUANTITIES = ("ate", "tau[0]", "tau[1]", "mu[0]", "sigma")


def design(seed: int, n: int):
    from scipy.stats import norm

    rng = np.random.default_rng([seed, 7])
    X = rng.uniform(size=(n, 3)).astype(np.float32)
    pi = norm.cdf(2 * X[:, 0] - 1).astype(np.float32)
    z = rng.binomial(1, pi).astype(np.int32)
    return np.column_stack([X, pi]).astype(np.float32), X, z


def values(draws: dict, q: str) -> np.ndarray:
    site, _, j = q.partition("[")
    v = np.asarray(draws[site])
    return v[..., int(j[:-1])] if j else v


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-sims", type=int, default=100)
    ap.add_argument("--first", type=int, default=0, help="the first data set's index")
    ap.add_argument("--run-id", default="", help="tags the records of one run's batches")
    ap.add_argument("--combine", default=None, metavar="RUN_ID", help="the table of a run's records in --out")
    ap.add_argument("--n", type=int, default=60)
    ap.add_argument("--m-mu", type=int, default=10)
    ap.add_argument("--m-tau", type=int, default=5)
    ap.add_argument("--lam", type=float, default=0.5)
    ap.add_argument("--chains", type=int, default=3)
    ap.add_argument("--draws", type=int, default=33)
    ap.add_argument("--thin", type=int, default=10)
    ap.add_argument("--tune", type=int, default=300)
    ap.add_argument("--bins", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "bcf_sbc.jsonl"))
    args = ap.parse_args(argv)

    if args.combine is not None:
        recs = [json.loads(line) for line in open(args.out)]
        recs = [r for r in recs if r.get("part") == "sim" and r.get("run_id") == args.combine]
        return report(recs, args, time_s=sum(r["seconds"] for r in recs))

    import jax
    from numpyro.infer import Predictive

    import bayestrees as bt
    from bayestrees.causal import bcf_model

    L = args.chains * args.draws
    if (L + 1) % args.bins:
        raise SystemExit(f"chains * draws + 1 = {L + 1} must be a multiple of bins = {args.bins}")
    X_mu, X_tau, z = design(args.seed, args.n)
    kw = dict(y_loc=0.0, y_scale=1.0, nu=3.0, lam=args.lam, m_mu=args.m_mu, m_tau=args.m_tau)
    prior = Predictive(bcf_model, num_samples=1)
    records = []
    t_start = time.perf_counter()
    for i in range(args.first, args.first + args.n_sims):
        sim = {k: np.asarray(v)[0] for k, v in prior(jax.random.key(1_000 * args.seed + 2 * i), X_mu, X_tau, z,
                                                     **kw).items()}
        truth = {q: float(values(sim, q)) for q in QUANTITIES}
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = bt.sample_model(bcf_model, X_mu, X_tau, z, y=sim["y"], draws=args.draws * args.thin, tune=args.tune,
                                  chains=args.chains, random_seed=1_000 * args.seed + 2 * i + 1, log_likelihood=False,
                                  jit_data=True, **kw)
        secs = time.perf_counter() - t0
        jax.clear_caches()   # (the data are arguments, but NumPyro's run functions are new each fit)
        post = fit.idata.posterior
        rec = dict(part="sim", sim=i, seed=args.seed, run_id=args.run_id, L=L, truth=truth, seconds=round(secs, 2))
        rec["rank"] = {}
        for q in QUANTITIES:
            d = values({v: post[v].values for v in ("ate", "tau", "mu", "sigma")}, q)[:, args.thin - 1::args.thin]
            rec["rank"][q] = int(np.sum(d.ravel() < truth[q]))
        records.append(rec)
        print(json.dumps(rec), flush=True)
        with open(args.out, "a") as fh:
            fh.write(json.dumps(rec) + "\n")
    return report(records, args, time_s=round(time.perf_counter() - t_start, 1))


def report(records, args, time_s):
    """The chi-squared table of the records' ranks, printed and appended to ``--out``."""
    from scipy import stats

    L = args.chains * args.draws
    ranks = {q: [r["rank"][q] for r in records] for q in QUANTITIES}
    summary = {}
    for q in QUANTITIES:
        counts = np.bincount(np.asarray(ranks[q]) * args.bins // (L + 1), minlength=args.bins)
        chi2, p = stats.chisquare(counts)
        summary[q] = dict(chi2=float(chi2), dof=args.bins - 1, p=float(p), counts=counts.tolist(),
                          passes_1pct=bool(p > 0.01), passes_bonferroni=bool(p > 0.01 / len(QUANTITIES)))
    settings = dict(vars(args), out=os.path.relpath(args.out, ROOT))   # (paths relative to the repository)
    out = dict(part="summary", n_sims=len(records), settings=settings, summary=summary, seconds=time_s)
    with open(args.out, "a") as fh:
        fh.write(json.dumps(out) + "\n")
    print("\n| quantity | chi-squared | dof | p | 1% | Bonferroni |")
    print("|---|---:|---:|---:|---|---|")
    for q, r in summary.items():
        print(f"| {q} | {r['chi2']:.1f} | {r['dof']} | {r['p']:.3f} | {'pass' if r['passes_1pct'] else 'FAIL'} | "
              f"{'pass' if r['passes_bonferroni'] else 'FAIL'} |")
    print(f"{len(records)} data sets, {out['seconds']} s of fitting")


if __name__ == "__main__":
    sys.exit(main())
