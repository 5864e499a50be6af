"""Coverage of a multilevel Bayesian causal forest's group effects over replications.

The library's multilevel BCF (``bt.BCFRegressor(...).fit(X, y, z, pihat=, groups=)``,
:mod:`bayestrees.causal`, "Groups"): rows in ``J`` groups, each with its own baseline ``alpha_j`` and
its own shift of the effect ``gamma_j``, ``y = mu(x) + alpha_j + (tau(x) + gamma_j) z + e``; the
trees of ``mu`` see the propensity, the group terms are NUTS sites (non-centred, half-Normal
scales).  The trees and the group terms share one constant each, so the target is the contrast
``gamma_j - mean(gamma)``.  (Records without a ``model`` field are of the hand-written model of
``tutorials/causal.py``, section 3, which this script fitted before; ``--combine`` summarises the
present model's records.)

The design per replication (seeded): ``x ~ N(0, I_2)``, the group uniform over ``J``,
``alpha ~ N(0, 0.6^2)``, ``gamma ~ N(0, 0.4^2)``, ``P(z = 1) = Phi(0.6 x_1)`` (given to the model),
``tau(x) = 0.5 + 0.5 [x_2 > 0]``, ``mu(x) = sin(2 x_1)``, noise sd 0.5.  Per replication: whether the
90% and 95% equal-tailed intervals of each of the ``J`` contrasts cover the truth, their RMSE, the
95% interval of the sample average effect and whether it covers, the largest R-hat of the
estimator's convergence table, seconds.  Records (JSON lines) go to ``--out``; the summary
(coverage over every contrast of every replication, with its binomial standard error) is printed.

The estimator passes its data as arguments of the compiled programs: after the first replication
the fits compile nothing.  JAX's in-memory caches are cleared after each fit; the programs come back
from the persistent compilation cache.  The replications can be fitted in batches of processes
(``--first``), each appending its records, and the summary made from them (``--combine``).

    .venv/bin/python benchmarks/bcf_multilevel.py --reps 20
    .venv/bin/python benchmarks/bcf_multilevel.py --first 14 --reps 6   # the next batch
    .venv/bin/python benchmarks/bcf_multilevel.py --combine             # the summary of every record
    .venv/bin/python benchmarks/bcf_multilevel.py --reps 2 --m-mu 20 --m-tau 10 --draws 200 --tune 200   # that it works
"""
from __future__ import annotations

import argparse
import json
import math
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
#: the model fitted: the library's multilevel BCF (records before it, without this field, are of the
#: tutorial's hand-written model: ``summary`` keeps them apart)
MODEL = "BCFRegressor(groups=)"


def design(seed: int, n: int, J: int):
    """``(X_mu, X_tau, z, site, y, truth)`` of one replication; ``truth`` holds the contrasts
    ``gamma_j - mean(gamma)`` and the sample average effect."""
    from scipy.stats import norm

    rng = np.random.default_rng([seed, 45])
    site = rng.integers(0, J, n)
    x = rng.normal(size=(n, 2))
    alpha = rng.normal(0, 0.6, J)
    gamma = rng.normal(0, 0.4, J)
    pi = norm.cdf(0.6 * x[:, 0])
    z = rng.binomial(1, pi)
    tau = 0.5 + 0.5 * (x[:, 1] > 0)
    y = np.sin(2 * x[:, 0]) + alpha[site] + (tau + gamma[site]) * z + 0.5 * rng.normal(size=n)
    truth = {"contrast": gamma - gamma.mean(), "sate": float(np.mean(tau + gamma[site]))}
    X_mu = np.column_stack([x, pi]).astype(np.float32)
    return X_mu, x.astype(np.float32), z.astype(np.int32), site.astype(np.int32), y, truth


def fit_one(seed: int, n: int, J: int, m_mu: int, m_tau: int, draws: int, tune: int, chains: int) -> dict:
    import gc

    import jax

    import bayestrees as bt

    X_mu, X_tau, z, site, y, truth = design(seed, n, J)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = bt.BCFRegressor(m_mu, m_tau, draws=draws, tune=tune, chains=chains, random_state=seed)
        est.fit(X_tau, y, z, pihat=X_mu[:, -1], groups=site)
    seconds = time.perf_counter() - t0
    post = est.idata_.posterior
    gamma = np.asarray(post["gamma"]).reshape(-1, J)   # the outcome's units
    contrast = gamma - gamma.mean(1, keepdims=True)
    effect = np.asarray(post["ate"]).reshape(-1)
    rec = {"model": MODEL, "seed": seed, "n": n, "J": J, "seconds": round(seconds, 2),
           "rmse": float(np.sqrt(np.mean((contrast.mean(0) - truth["contrast"]) ** 2)))}
    for level in (0.9, 0.95):
        lo, hi = np.quantile(contrast, [(1 - level) / 2, (1 + level) / 2], axis=0)
        rec[f"covers{int(level * 100)}"] = int(np.sum((lo <= truth["contrast"]) & (truth["contrast"] <= hi)))
    lo, hi = np.quantile(effect, [0.025, 0.975])
    rec.update(sate=truth["sate"], sate_mean=float(effect.mean()), sate_covers=bool(lo <= truth["sate"] <= hi))
    if est.convergence_ is not None:   # the largest R-hat of the identified quantities (the estimator's table)
        rhat = [v["rhat"] for v in est.convergence_.table.values() if np.isfinite(v["rhat"])]
        rec["max_r_hat"] = float(max(rhat)) if rhat else float("nan")
    del est, post
    gc.collect()
    jax.clear_caches()
    _trim()
    rec["rss_mb"] = round(_rss_mb())
    return rec


def _trim() -> None:
    """Hand the memory that the finished fit freed back to the system (glibc keeps part of it
    otherwise; what a finished fit still holds is in ``docs/lab-notes/causal.md``)."""
    import ctypes
    import ctypes.util

    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):   # not glibc
        pass


def _rss_mb() -> float:
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * 4096 / 1e6
    except OSError:
        return float("nan")


def summary(records: list) -> str:
    records = [r for r in records if r.get("model", "tutorial") == MODEL]
    if not records:
        return f"no records of {MODEL}"
    J = records[0]["J"]
    total = J * len(records)
    lines = [f"{MODEL}: {len(records)} replications of {J} groups (n = {records[0]['n']}):"]
    for level in (90, 95):
        k = sum(r[f"covers{level}"] for r in records)
        p = k / total
        lines.append(f"  {level}% intervals of gamma_j - mean(gamma): {k} of {total} cover, {p:.3f} "
                     f"(binomial se {math.sqrt(p * (1 - p) / total):.3f})")
    lines.append(f"  95% interval of the sample average effect: {sum(r['sate_covers'] for r in records)} of "
                 f"{len(records)} cover")
    lines.append(f"  RMSE of the contrasts: mean {np.mean([r['rmse'] for r in records]):.3f}; seconds per fit: "
                 f"first {records[0]['seconds']:.1f}, median of the rest "
                 f"{np.median([r['seconds'] for r in records[1:]]) if len(records) > 1 else float('nan'):.1f}")
    if all("max_r_hat" in r for r in records):
        lines.append(f"  largest R-hat per fit: median {np.median([r['max_r_hat'] for r in records]):.3f}, "
                     f"max {max(r['max_r_hat'] for r in records):.3f}")
    return "\n".join(lines)


def main(argv=None) -> None:
    import bayestrees as bt

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--first", type=int, default=0, help="the first replication's seed")
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--groups", type=int, default=20)
    ap.add_argument("--m-mu", type=int, default=bt.causal.M_MU)
    ap.add_argument("--m-tau", type=int, default=bt.causal.M_TAU)
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--tune", type=int, default=1000)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--out", default=str(RESULTS / "bcf_multilevel.jsonl"))
    ap.add_argument("--combine", action="store_true", help="print the summary of the records in --out and stop")
    args = ap.parse_args(argv)
    if args.combine:
        with open(args.out) as fh:
            print(summary([json.loads(line) for line in fh if line.strip()]))
        return
    settings = {k: getattr(args, k) for k in ("m_mu", "m_tau", "draws", "tune", "chains")}
    records = []
    for seed in range(args.first, args.first + args.reps):
        rec = {**fit_one(seed, args.n, args.groups, args.m_mu, args.m_tau, args.draws, args.tune, args.chains),
               **settings}
        records.append(rec)
        print(json.dumps(rec), flush=True)
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            with open(args.out, "a") as fh:
                fh.write(json.dumps(rec) + "\n")
    print(summary(records))


if __name__ == "__main__":
    main()
