"""Simulation-based calibration of BART (Talts, Betancourt, Simpson, Vehtari & Gelman 2018).

Repeat ``--n-sims`` times (default 200): draw the parameters of BART's model from its prior (``m``
trees, their leaf values, ``sigma``), then a data set ``y`` from them, fit BART to ``y`` with the
same prior through the public :func:`bayestrees.inference.bart.fit.fit_bart`, and take the rank of
the true value among ``L`` kept posterior draws for ``sigma`` and for ``f`` at three fixed rows.
When the sampler draws from the exact posterior (and its kept draws are about independent), each
rank is uniform on ``0..L``, whatever the prior. The ranks are binned into ``--bins`` bins (``L + 1``
a multiple of it) and tested for uniformity by Pearson's chi-squared (``bins - 1`` degrees of
freedom), at the 1% level per quantity (the issue's criterion); the table also gives the
Bonferroni verdict over the four quantities (familywise 1%).

The prior must not depend on the simulated ``y``
-----------------------------------------------
``fit_bart`` calibrates BART's prior from the data, as BART does: it scales the response to
``[-0.5, 0.5]`` by the training ``y``'s minimum and maximum (the leaf prior ``N(0, sigma_mu^2)``,
``sigma_mu = 0.5 / (k sqrt(m))``, holds on that scale, so in the response's units the prior of ``f``
depends on ``y``'s range), and it sets ``lambda`` from ``sigma_hat``, by default the residual sd of a
linear fit of ``y``. A prior that looks at ``y`` breaks SBC. Here both are fixed:

* ``sigma_hat`` is given (``BARTConfig(sigma_hat=...)``, in the response's units; ``fit_bart`` divides
  it by the scale, which is fixed below): ``lambda`` does not look at ``y``;
* the scale: ``BARTConfig`` has no option to fix it, so two **anchor rows** are appended to the
  data, with responses ``Y_MID - Y_HALF`` and ``Y_MID + Y_HALF`` and row weight 0
  (``fit_bart(..., weights=...)``: a row of weight 0 carries no likelihood, and the noise variance's
  update counts only rows of positive weight). ``fit_bart`` takes the scaling from all rows'
  ``y``, so when every simulated response lies in ``[Y_MID - Y_HALF, Y_MID + Y_HALF]`` the shift is
  ``Y_MID`` and the scale ``2 Y_HALF`` exactly (asserted on every fit: ``result.y_shift``,
  ``result.y_scale``, ``result.lam``, ``result.sigma_mu``). The anchors' features copy two data rows
  (so no feature's range of codes changes) and they are rows like the others for the tree prior
  (the sampler's nodes must hold ``min_leaf_rows`` rows counting every data row, weight 0 or not:
  ``BARTData.rows``), so the simulator below draws the trees on all ``n + 2`` rows too.
* A simulated data set whose response leaves that interval is discarded and drawn again. This is
  exact: conditioning the joint ``p(theta) p(y | theta)`` on an event ``A`` of ``y`` alone leaves
  ``theta | y`` the posterior ``p(theta | y)`` for every ``y`` in ``A``, which is all SBC needs
  (the true ``theta`` of a kept data set is a draw of its posterior). The fraction discarded is
  reported (``accept_rate``).

With a library option that fixes the scaling (e.g. ``BARTConfig(y_range=(lo, hi))``: shift
``(lo + hi) / 2``, scale ``hi - lo``, instead of ``y``'s range), the anchors would not be needed;
the discarding stays (the option changes nothing about which ``y`` the scaled prior can reach).

The prior simulated
-------------------
In the scaled units (``y_scaled = (y - Y_MID) / (2 Y_HALF)``), as ``fit_bart`` documents it:

* each of ``m`` trees from the tree prior ``ChipmanPrior(alpha, beta)``: a node at depth ``d``
  splits with probability ``alpha (1 + d)^-beta`` unless it is at ``max_depth`` or has no variable
  with a cut point left (then it is a leaf with probability 1: the prior truncated at the depth
  limit by forcing leaves); the rule: the variable uniform among the variables with a cut point in
  the node's interval, the cut point ``t`` uniform in ``lo_j .. hi_j - 1`` (left child: codes
  ``<= t``, interval ``[lo_j, t]``; right: ``[t + 1, hi_j]``), where a node's intervals are
  inherited from its ancestors and the root's is the smallest to the largest code of the feature
  over the training rows (the BART R packages' rule). Trees in which some node holds fewer than
  ``min_leaf_rows`` rows are rejected and drawn again (the prior truncated to trees whose nodes
  hold that many rows);
* leaf values ``N(0, sigma_mu^2)``, ``sigma_mu = 0.5 / (k sqrt(m))``;
* ``sigma^2 = nu lambda / chi2_nu``, ``lambda = (sigma_hat / scale)^2 chi2_nu^-1(1 - q) / nu``;
* ``y = f + sigma e`` at the ``n`` data rows, ``e`` standard Normal.

The design ``X`` (``n`` rows, ``p`` features of ``codes`` integer values each) is drawn once from
``--seed`` and held fixed: the SBC is conditional on ``X``, as BART's model is.

Posterior draws: ``--chains`` chains of ``--tune`` discarded and ``--draws`` kept steps, every
``--thin``-th step kept; ``L = chains * draws`` must be ``bins * j - 1``. Thinning is there to make
the kept draws about independent: correlated draws make the rank histogram non-uniform even for an
exact sampler (Talts et al., section 5.1), so a failure with little thinning is not yet evidence of
a wrong posterior. The defaults keep every 30th step: on four prior data sets of the default
settings (2 chains x 3,000 steps each, before the interval-rule kernel) the steps per effective
draw of ``sigma`` and ``f`` were 2-27 (bulk ESS). The median bulk ESS of each quantity over the fits
is reported, beside what the same estimator gives for independent draws of the same shape.

Run::

    .venv/bin/python benchmarks/bart_sbc.py            # 200 data sets
    .venv/bin/python benchmarks/bart_sbc.py --quick    # 40 data sets, shorter chains: a check that it works

A table is printed (quantity, chi-squared, dof, p-value, pass/fail), the rank histograms are written
to ``benchmarks/results/bart_sbc.png`` (if matplotlib is installed) and JSON lines are appended to
``benchmarks/results/bart_sbc.jsonl``: one line per simulated data set (true values, ranks) and one
line per run (settings, per-quantity chi-squared, machine).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"

#: the anchors: the scaled response is (y - Y_MID) / (2 Y_HALF) (not 0 and 1/2, so that the
#: conversion to the response's units is exercised too)
Y_MID, Y_HALF = 1.0, 2.5

QUANTITIES = ("sigma", "f[0]", "f[1]", "f[2]")


# ------------------------------------------------------------------------------------------------
# the prior, in NumPy
# ------------------------------------------------------------------------------------------------
def draw_tree(rng, codes, alpha, beta, max_depth, min_rows):
    """One tree from the truncated tree prior: a list of leaves, each the array of its rows.

    Returns ``(leaves, attempts)``: the accepted tree and how many trees were drawn to get it.
    """
    n, _ = codes.shape
    root_lo, root_hi = codes.min(0), codes.max(0)
    attempts = 0
    while True:
        attempts += 1
        leaves, ok = [], True
        stack = [(np.arange(n), root_lo, root_hi, 0)]
        while stack and ok:
            rows, lo, hi, depth = stack.pop()
            if len(rows) < min_rows:
                ok = False          # the whole tree is rejected: stop drawing it
                break
            valid = np.flatnonzero(hi > lo)
            if depth >= max_depth or len(valid) == 0 or rng.random() >= alpha * (1.0 + depth) ** -beta:
                leaves.append(rows)
                continue
            j = valid[rng.integers(len(valid))]
            t = lo[j] + rng.integers(hi[j] - lo[j])           # uniform in lo_j .. hi_j - 1
            go_left = codes[rows, j] <= t
            hi_left, lo_right = hi.copy(), lo.copy()
            hi_left[j], lo_right[j] = t, t + 1
            stack.append((rows[go_left], lo, hi_left, depth + 1))
            stack.append((rows[~go_left], lo_right, hi, depth + 1))
        if ok:
            return leaves, attempts


def draw_function(rng, codes, m, alpha, beta, max_depth, min_rows, sigma_mu):
    """``f`` at every row (scaled units): the sum of ``m`` prior trees with ``N(0, sigma_mu^2)`` leaves;
    also the mean number of leaves per tree and the tree draws per accepted tree."""
    f = np.zeros(codes.shape[0])
    n_leaves, attempts = 0, 0
    for _ in range(m):
        leaves, a = draw_tree(rng, codes, alpha, beta, max_depth, min_rows)
        attempts += a
        n_leaves += len(leaves)
        for rows in leaves:
            f[rows] += sigma_mu * rng.standard_normal()
    return f, n_leaves / m, attempts / m


def scaled_lambda(sigma_hat_scaled, nu, q):
    """``lambda`` with ``P(sigma < sigma_hat) = q`` under ``sigma^2 ~ nu lambda / chi2_nu``."""
    return sigma_hat_scaled ** 2 * stats.chi2.ppf(1.0 - q, nu) / nu


def simulate(rng, codes, n_data, s):
    """One data set from the prior, conditioned on every response lying between the anchors.

    ``codes`` holds the ``n_data`` data rows and then the two anchors. Returns a dict with ``y``
    (response units, anchors included), the truth (``f`` at every row and ``sigma``, response units)
    and bookkeeping.
    """
    tries = 0
    while True:
        tries += 1
        f, leaves, tree_attempts = draw_function(rng, codes, s["m"], s["alpha"], s["beta"], s["max_depth"],
                                                 s["min_leaf_rows"], s["sigma_mu"])
        sigma = math.sqrt(s["nu"] * s["lam"] / rng.chisquare(s["nu"]))
        ys = f[:n_data] + sigma * rng.standard_normal(n_data)
        if np.all(np.abs(ys) <= 0.5):
            break
    scale = 2.0 * Y_HALF
    y = np.concatenate([Y_MID + scale * ys, [Y_MID - Y_HALF, Y_MID + Y_HALF]])
    return {"y": y, "f": Y_MID + scale * f, "sigma": scale * sigma, "tries": tries, "mean_leaves": leaves,
            "tree_attempts": tree_attempts}


# ------------------------------------------------------------------------------------------------
# ranks and the uniformity test
# ------------------------------------------------------------------------------------------------
def rank_of(truth, draws):
    """The number of posterior draws below the true value (0..L)."""
    return int(np.sum(np.asarray(draws, np.float64) < truth))


def chi2_uniform(ranks, L, bins):
    """Pearson's chi-squared of ranks in ``0..L`` against the uniform, in ``bins`` equal bins."""
    if (L + 1) % bins:
        raise ValueError(f"L + 1 = {L + 1} must be a multiple of bins = {bins}")
    counts = np.bincount(np.asarray(ranks) // ((L + 1) // bins), minlength=bins)
    expected = len(ranks) / bins
    chi2 = float(np.sum((counts - expected) ** 2) / expected)
    return chi2, bins - 1, float(stats.chi2.sf(chi2, bins - 1)), counts


def ess(x):
    """Bulk effective sample size of ``x`` (chains, draws) (ArviZ)."""
    import arviz as az

    return float(az.ess(np.asarray(x, np.float64)[None] if np.ndim(x) == 1 else np.asarray(x, np.float64)))


def ess_of_independent_draws(chains, draws, reps=400, seed=0):
    """The median of ArviZ's bulk ESS of ``chains x draws`` independent Normal draws: the value to
    compare the fits' ESS with (for a few dozen draws the estimate is noisy and not exactly ``L``)."""
    rng = np.random.default_rng(seed)
    return float(np.median([ess(rng.standard_normal((chains, draws))) for _ in range(reps)]))


# ------------------------------------------------------------------------------------------------
# one SBC run
# ------------------------------------------------------------------------------------------------
def settings(*, n=50, p=3, codes=10, m=20, alpha=0.95, beta=2.0, k=2.0, nu=3.0, q=0.9, sigma_hat=0.1,
             max_depth=5, min_leaf_rows=5, chains=3, draws=33, tune=500, thin=30, rows=(0, 1, 2)):
    """The settings of a run; ``sigma_hat`` in scaled units (the response's units divided by 2 Y_HALF)."""
    sigma_mu = 0.5 / (k * math.sqrt(m))
    return dict(n=n, p=p, codes=codes, m=m, alpha=alpha, beta=beta, k=k, nu=nu, q=q, sigma_hat=sigma_hat,
                max_depth=max_depth, min_leaf_rows=min_leaf_rows, chains=chains, draws=draws, tune=tune, thin=thin,
                rows=tuple(rows), sigma_mu=sigma_mu, lam=scaled_lambda(sigma_hat, nu, q))


def design(seed, s):
    """The fixed design: ``n`` data rows of ``p`` integer features in ``0..codes-1``, then the two anchor
    rows (copies of data rows 0 and 1). Returns ``(X, codes)``, ``codes`` as the library bins them."""
    from bayestrees.data import prepare_data

    rng = np.random.default_rng([seed, 1])
    X = rng.integers(0, s["codes"], size=(s["n"], s["p"])).astype(float)
    X = np.concatenate([X, X[:2]])
    data = prepare_data(X, np.arange(len(X), dtype=float), task="regression", allow_nan=False)
    return X, np.asarray(data.codes, np.int64)


def run_sbc(n_sims, seed, s, *, bins=10, progress=None, on_record=None):
    """``n_sims`` SBC replications. Returns ``(records, summary)``: one dict per data set (truth, ranks)
    and per quantity the chi-squared test of its ranks."""
    import jax

    from bayestrees.data import prepare_data
    from bayestrees.inference.bart.fit import BARTConfig, fit_bart
    from bayestrees.priors import ChipmanPrior

    L = s["chains"] * s["draws"]
    if (L + 1) % bins:
        raise ValueError(f"chains * draws + 1 = {L + 1} must be a multiple of bins = {bins}")
    X, codes = design(seed, s)
    n = s["n"]
    scale = 2.0 * Y_HALF
    weights = np.concatenate([np.ones(n), np.zeros(2)])
    cfg = BARTConfig(m=s["m"], prior=ChipmanPrior(s["alpha"], s["beta"]), k=s["k"], nu=s["nu"], q=s["q"],
                     sigma_hat=s["sigma_hat"] * scale, draws=s["draws"], tune=s["tune"], chains=s["chains"],
                     thin=s["thin"], max_depth=s["max_depth"], min_leaf_rows=s["min_leaf_rows"])
    rng = np.random.default_rng([seed, 2])
    records = []
    for i in range(n_sims):
        sim = simulate(rng, codes, n, s)
        data = prepare_data(X, sim["y"], task="regression", allow_nan=False)
        assert np.array_equal(np.asarray(data.codes, np.int64), codes)
        t0 = time.perf_counter()
        res = fit_bart(jax.random.key(seed * 100_003 + i), data, cfg, weights=weights)
        secs = time.perf_counter() - t0
        # the prior the fit used is the one simulated: fixed scaling, lambda and sigma_mu
        assert res.y_shift == Y_MID and res.y_scale == scale, (res.y_shift, res.y_scale)
        assert math.isclose(res.lam, s["lam"], rel_tol=1e-9) and math.isclose(res.sigma_mu, s["sigma_mu"])
        post = {"sigma": res.sigma}
        for r, row in zip(QUANTITIES[1:], s["rows"]):
            post[r] = res.mu[..., row]
        truth = {"sigma": sim["sigma"], **{qn: float(sim["f"][row]) for qn, row in zip(QUANTITIES[1:], s["rows"])}}
        rec = {"part": "sim", "sim": i, "seed": seed, "L": L,
               "truth": truth, "rank": {qn: rank_of(truth[qn], post[qn].ravel()) for qn in QUANTITIES},
               "post_mean": {qn: float(np.mean(post[qn])) for qn in QUANTITIES},
               "ess": {qn: ess(post[qn]) for qn in QUANTITIES},
               "tries": sim["tries"], "prior_mean_leaves": sim["mean_leaves"],
               "tree_attempts": sim["tree_attempts"], "fit_s": secs}
        records.append(rec)
        if on_record is not None:
            on_record(rec)
        if progress is not None:
            progress(i, rec)
    summary = {}
    for qn in QUANTITIES:
        chi2, dof, pval, counts = chi2_uniform([r["rank"][qn] for r in records], L, bins)
        summary[qn] = {"chi2": chi2, "dof": dof, "p": pval, "counts": counts.tolist()}
    summary["_accept_rate"] = len(records) / sum(r["tries"] for r in records)
    return records, summary


def plot(records, summary, L, bins, path, quantities=None,
         title="BART simulation-based calibration (grey: 99% band of one bin under uniform ranks)"):
    """Rank histograms of ``quantities`` (default :data:`QUANTITIES`) with the 99% band of one bin
    under uniform ranks; written to ``path`` (None without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no figure")
        return None
    qs = list(QUANTITIES if quantities is None else quantities)
    N = len(records)
    fig, axes = plt.subplots(1, len(qs), figsize=(3.2 * len(qs), 2.8), sharey=True)
    lo, hi = stats.binom.ppf([0.005, 0.995], N, 1.0 / bins)
    for ax, qn in zip(axes, qs):
        counts = summary[qn]["counts"]
        ax.bar(np.arange(bins), counts, width=1.0, color="C0", edgecolor="white", alpha=0.85, zorder=1)
        ax.axhspan(lo, hi, color="grey", alpha=0.3, lw=0, zorder=0)
        ax.axhline(N / bins, color="k", lw=0.8)
        ax.set_title(f"{qn}: p = {summary[qn]['p']:.3f}", fontsize=9)
        ax.set_xlabel(f"rank bin (L = {L})")
    axes[0].set_ylabel(f"data sets (of {N})")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-sims", type=int, default=None, help="simulated data sets (default 200; --quick 40)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="40 data sets, 4 bins, 3 chains x 13 draws, tune 200, "
                    "thin 10: a check that the script works, not a verdict")
    ap.add_argument("--bins", type=int, default=None, help="rank bins (default 10; --quick 4)")
    ap.add_argument("--m", type=int, default=20, help="trees (default 20)")
    ap.add_argument("--n", type=int, default=50, help="data rows (default 50)")
    ap.add_argument("--k", type=float, default=2.0, help="leaf prior k (default 2, BART's)")
    ap.add_argument("--max-depth", type=int, default=5)
    ap.add_argument("--chains", type=int, default=None, help="default 3")
    ap.add_argument("--draws", type=int, default=None, help="kept draws per chain (default 33; --quick 13)")
    ap.add_argument("--tune", type=int, default=None, help="default 500 (--quick 200)")
    ap.add_argument("--thin", type=int, default=None, help="default 30 (--quick 10)")
    ap.add_argument("--out", default=str(RESULTS / "bart_sbc.jsonl"))
    ap.add_argument("--figure", default=str(RESULTS / "bart_sbc.png"))
    args = ap.parse_args(argv)
    q = args.quick
    n_sims = args.n_sims or (40 if q else 200)
    bins = args.bins or (4 if q else 10)
    s = settings(n=args.n, m=args.m, k=args.k, max_depth=args.max_depth,
                 chains=args.chains or 3, draws=args.draws or (13 if q else 33),
                 tune=args.tune if args.tune is not None else (200 if q else 500),
                 thin=args.thin or (10 if q else 30))
    L = s["chains"] * s["draws"]
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from forest_common import machine

    import jax

    common = {"jax_version": jax.__version__, "backend": jax.default_backend(), **machine(),
              "time": time.strftime("%Y-%m-%d %H:%M:%S"), "load_before": [round(v, 2) for v in os.getloadavg()]}
    print(f"BART SBC: {n_sims} data sets, n = {s['n']}, p = {s['p']}, m = {s['m']}, k = {s['k']}, max_depth = "
          f"{s['max_depth']}, min_leaf_rows = {s['min_leaf_rows']}; {s['chains']} chains x {s['draws']} kept draws "
          f"(thin {s['thin']}, tune {s['tune']}): L = {L}, {bins} bins", flush=True)
    t_start = time.perf_counter()

    def progress(i, rec):
        if (i + 1) % max(1, n_sims // 10) == 0 or i == 0:
            print(f"  {i + 1:4d}/{n_sims}  fit {rec['fit_s']:.2f} s  ess_min {min(rec['ess'].values()):.0f}  ranks "
                  f"{rec['rank']}  ({time.perf_counter() - t_start:.0f} s)", flush=True)

    records, summary = run_sbc(n_sims, args.seed, s, bins=bins, progress=progress)
    alpha_bonf = 0.01 / len(QUANTITIES)
    print(f"\n{'quantity':<8} {'chi2':>8} {'dof':>4} {'p-value':>8} {'1%':>5} {'Bonf.':>6}  counts")
    for qn in QUANTITIES:
        r = summary[qn]
        print(f"{qn:<8} {r['chi2']:>8.2f} {r['dof']:>4d} {r['p']:>8.4f} {'pass' if r['p'] > 0.01 else 'FAIL':>5} "
              f"{'pass' if r['p'] > alpha_bonf else 'FAIL':>6}  {r['counts']}")
    ess_med = {qn: float(np.median([r["ess"][qn] for r in records])) for qn in QUANTITIES}
    ess_iid = ess_of_independent_draws(s["chains"], s["draws"])
    print(f"\naccepted data sets: {summary['_accept_rate']:.3f} of those drawn (the rest left the anchors' range); "
          f"prior leaves per tree {np.mean([r['prior_mean_leaves'] for r in records]):.2f}; trees drawn per "
          f"accepted tree {np.mean([r['tree_attempts'] for r in records]):.2f}")
    print(f"median bulk ESS over the fits (of L = {L} kept draws; independent draws give {ess_iid:.0f} by the same "
          f"estimator): " + ", ".join(f"{qn} {v:.0f}" for qn, v in ess_med.items()))
    print(f"fit seconds median {np.median([r['fit_s'] for r in records]):.2f} (the first compiles: "
          f"{records[0]['fit_s']:.1f}); total {time.perf_counter() - t_start:.0f} s")
    fig = plot(records, summary, L, bins, args.figure)
    if fig:
        print(f"figure: {fig}")
    run = {"part": "summary", "quick": q, "n_sims": n_sims, "seed": args.seed, "bins": bins, "L": L,
           "settings": s, "anchors": [Y_MID - Y_HALF, Y_MID + Y_HALF], "accept_rate": summary["_accept_rate"],
           "ess_median": ess_med, "ess_independent_draws": ess_iid,
           "tests": {qn: summary[qn] for qn in QUANTITIES},
           "pass_1pct_each": all(summary[qn]["p"] > 0.01 for qn in QUANTITIES),
           "pass_bonferroni_1pct": all(summary[qn]["p"] > alpha_bonf for qn in QUANTITIES),
           "seconds": time.perf_counter() - t_start, **common,
           "load_after": [round(v, 2) for v in os.getloadavg()]}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "a") as fh:
        for rec in records:
            fh.write(json.dumps({**rec, "quick": q}) + "\n")
        fh.write(json.dumps(run) + "\n")
    print(f"appended {len(records) + 1} lines to {args.out}")
    return run


if __name__ == "__main__":
    main()
