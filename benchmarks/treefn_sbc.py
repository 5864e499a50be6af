"""Simulation-based calibration of a linear-plus-BART NumPyro model (issue 30, check (c)).

The model (Talts, Betancourt, Simpson, Vehtari & Gelman 2018 for the method)::

    beta_j ~ N(0, s_beta^2)                 j = 1..p_lin    (NUTS)
    f      = bt.bart_function("f", X_tree, m=20, leaf_sd=...)   (the tree moves)
    sigma  ~ HalfNormal(s_sigma)                              (NUTS)
    y_i    ~ N(X_lin_i . beta + f(x_i), sigma^2)              i = 1..n

Repeat ``--n-sims`` times (default 100): draw every quantity from this prior, the trees included
(``numpyro.infer.Predictive(model, num_samples=1)``: :meth:`TreeEnsemble.sample`, the truncated tree
prior by rejection), and with them ``y``; fit the same model to ``y`` by the public
:func:`bayestrees.sample_model` (``conjugate="auto"``: the likelihood is Normal and additive in ``f``,
so the tree sites take the BART family's conjugate step, the coefficients and ``sigma`` NUTS, in
NumPyro's ``Gibbs``); take the rank of each true ``beta_j``, of the true ``sigma`` and of the true
``f`` at row 0 among ``L`` kept posterior draws. When the sampler draws from the exact posterior
and the kept draws are about independent, every rank is uniform on ``0..L``. The ranks are binned
into ``--bins`` bins (``L + 1`` a multiple of it) and tested by Pearson's chi-squared (``bins - 1``
degrees of freedom) at the 1% level per quantity (the issue's criterion, for the coefficients and
``sigma``; ``f[0]`` is reported beside them); the table also gives the Bonferroni verdict over all
quantities (familywise 1%). As in ``benchmarks/bart_sbc.py``.

Nothing here looks at the simulated ``y`` to set the prior: ``leaf_sd``, ``s_beta`` and
``s_sigma`` are fixed numbers (the model function is the same for simulation and fit), so no
anchors or rejection of data sets are needed (``bart_sbc.py`` needs them because ``fit_bart``
scales the response by its range). The designs ``X_lin`` (``n x p_lin`` standard Normal) and
``X_tree`` (``n x p_tree`` integers ``0..codes-1``) are drawn once from ``--seed`` and held fixed:
the SBC is conditional on them.

Posterior draws: ``--chains`` chains (vectorised) of ``--tune`` warm-up steps and ``draws * thin``
kept steps, of which every ``thin``-th is used: ``L = chains * draws`` must be ``bins * j - 1``.
Thinning makes the used draws about independent (correlated draws make the rank histogram
non-uniform even for an exact sampler; Talts et al., section 5.1). Per fit the script records the
bulk ESS of the unthinned chains (so the steps per effective draw) and of the used draws, beside
what the same estimator gives for independent draws of that shape.

Compilation: ``sample_model`` builds a new ``numpyro.infer.MCMC`` per call with the model's
arguments closed over (NumPyro's ``jit_model_args=False``), so the simulated ``y`` is a constant of
the compiled sampling loop (``_fori_collect_loop``): each new data set compiles that loop again (the
persistent compilation cache misses, its key being the program with its constants; a second fit
with the same ``y`` and another seed hits it). The script counts the XLA compilations and cache
misses of every fit and reports them (``docs/lab-notes/models.md``).

The library: by default bayestrees as committed (``git archive HEAD``, exported to a temporary
folder, so that edits in the shared working tree during a run change nothing; the commit is
recorded), ``--library worktree`` for the working tree.

Run::

    .venv/bin/python benchmarks/treefn_sbc.py             # 100 data sets
    .venv/bin/python benchmarks/treefn_sbc.py --quick     # 12 data sets, short chains: that it works

or in ``N`` processes, each fitting the data sets ``i`` with ``i % N == K`` (the same data sets and
seeds as one process), then the table of all of them::

    for k in 0 1; do .venv/bin/python benchmarks/treefn_sbc.py --shard $k/2 --run-id R & done; wait
    .venv/bin/python benchmarks/treefn_sbc.py --combine R

A table is printed (quantity, chi-squared, dof, p-value, pass/fail), the rank histograms are written
to ``benchmarks/results/treefn_sbc.png`` (if matplotlib is installed) and JSON lines are appended to
``benchmarks/results/treefn_sbc.jsonl``: one per data set (truth, ranks, ESS, seconds, compilations),
one per process (``"part": "shard"``: settings, machine, load) and one per run (``"part":
"summary"``: the per-quantity tests).
"""
from __future__ import annotations

import argparse
import collections
import json
import math
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"


def quantities(s) -> tuple:
    """The ranked quantities: the coefficients, ``sigma`` (the issue's) and ``f`` at row 0."""
    return tuple(f"beta[{j}]" for j in range(s["p_lin"])) + ("sigma", "f[0]")


def issue_quantities(s) -> tuple:
    return tuple(f"beta[{j}]" for j in range(s["p_lin"])) + ("sigma",)


# ------------------------------------------------------------------------------------------------
# ranks and the uniformity test (as benchmarks/bart_sbc.py)
# ------------------------------------------------------------------------------------------------
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bart_sbc import chi2_uniform, ess, ess_of_independent_draws, rank_of  # noqa: E402  (NumPy and SciPy only)


# ------------------------------------------------------------------------------------------------
# the model, the design, the compile counter
# ------------------------------------------------------------------------------------------------
def settings(*, n=40, p_lin=2, p_tree=3, codes=10, m=20, f_sd=0.5, s_beta=1.0, s_sigma=0.5, max_depth=5,
             min_leaf_rows=5, chains=3, draws=33, tune=300, thin=10):
    """The settings of a run. ``f_sd`` is the prior sd of ``f`` at a row: ``leaf_sd = f_sd / sqrt(m)``."""
    return dict(n=n, p_lin=p_lin, p_tree=p_tree, codes=codes, m=m, f_sd=f_sd, leaf_sd=f_sd / math.sqrt(m),
                s_beta=s_beta, s_sigma=s_sigma, max_depth=max_depth, min_leaf_rows=min_leaf_rows, chains=chains,
                draws=draws, tune=tune, thin=thin)


def design(seed, s):
    """The fixed designs ``(X_lin, X_tree)``, float32."""
    rng = np.random.default_rng([seed, 1])
    X_lin = rng.standard_normal((s["n"], s["p_lin"])).astype(np.float32)
    X_tree = rng.integers(0, s["codes"], size=(s["n"], s["p_tree"])).astype(np.float32)
    return X_lin, X_tree


def make_model(s):
    """The NumPyro model ``model(X_lin, X_tree, y=None)`` (module docstring)."""
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    import bayestrees as bt

    def linear_plus_bart(X_lin, X_tree, y=None):
        beta = numpyro.sample("beta", dist.Normal(0.0, s["s_beta"]).expand([s["p_lin"]]).to_event(1))
        f = bt.bart_function("f", X_tree, m=s["m"], leaf_sd=s["leaf_sd"], max_depth=s["max_depth"],
                             min_leaf_rows=s["min_leaf_rows"])
        sigma = numpyro.sample("sigma", dist.HalfNormal(s["s_sigma"]))
        numpyro.sample("y", dist.Normal(jnp.asarray(X_lin) @ beta + f, sigma), obs=y)

    return linear_plus_bart


class CompileCounter:
    """Counts XLA compilations and persistent-cache misses (``jax.monitoring`` events) from its creation."""

    def __init__(self):
        import jax

        self.counts = collections.Counter()
        self.secs = collections.Counter()
        jax.monitoring.register_event_listener(self._event)
        jax.monitoring.register_event_duration_secs_listener(self._duration)

    def _event(self, event, **kw):
        self.counts[event] += 1

    def _duration(self, event, duration, **kw):
        self.counts[event] += 1
        self.secs[event] += duration

    def snapshot(self):
        return (self.counts["/jax/core/compile/backend_compile_duration"],
                self.secs["/jax/core/compile/backend_compile_duration"],
                self.counts["/jax/compilation_cache/cache_misses"])


# ------------------------------------------------------------------------------------------------
# one SBC run
# ------------------------------------------------------------------------------------------------
def run_sbc(n_sims, seed, s, *, bins=10, progress=None, counter=None, shard=(0, 1)):
    """``n_sims`` SBC replications. Returns ``(records, summary)``: one dict per data set (truth,
    ranks, ESS, seconds, compilations) and per quantity the chi-squared test of its ranks."""
    import jax
    from numpyro.infer import Predictive

    import bayestrees as bt
    from bayestrees.inference.treefn.fit import tree_summaries_of
    from bayestrees.inference.treefn.site import trees_site_name

    L = s["chains"] * s["draws"]
    if (L + 1) % bins:
        raise ValueError(f"chains * draws + 1 = {L + 1} must be a multiple of bins = {bins}")
    counter = counter or CompileCounter()
    X_lin, X_tree = design(seed, s)
    model = make_model(s)
    prior = Predictive(model, num_samples=1)
    qs = quantities(s)
    thin = s["thin"]
    records = []
    for i in range(shard[0], n_sims, shard[1]):
        sim = {k: np.asarray(v)[0] for k, v in prior(jax.random.key(seed * 100_003 + 2 * i), X_lin, X_tree).items()}
        y = sim["y"]
        truth = {**{f"beta[{j}]": float(sim["beta"][j]) for j in range(s["p_lin"])},
                 "sigma": float(sim["sigma"]), "f[0]": float(sim["f"][0])}
        prior_leaves = float(np.mean(tree_summaries_of(sim[trees_site_name("f")])["n_leaves"]))
        c0 = counter.snapshot()
        t0 = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fit = bt.sample_model(model, X_lin, X_tree, y=y, draws=s["draws"] * thin, tune=s["tune"],
                                  chains=s["chains"], random_seed=seed * 100_003 + 2 * i + 1, log_likelihood=False)
        secs = time.perf_counter() - t0
        c1 = counter.snapshot()
        post_full = {f"beta[{j}]": np.asarray(fit.samples["beta"])[..., j] for j in range(s["p_lin"])}
        post_full["sigma"] = np.asarray(fit.samples["sigma"])
        post_full["f[0]"] = np.asarray(fit.idata.posterior["f"].values)[..., 0]
        post = {q: v[:, thin - 1::thin] for q, v in post_full.items()}
        assert all(v.shape == (s["chains"], s["draws"]) for v in post.values())
        rec = {"part": "sim", "sim": i, "seed": seed, "L": L, "truth": truth,
               "rank": {q: rank_of(truth[q], post[q].ravel()) for q in qs},
               "post_mean": {q: float(np.mean(post[q])) for q in qs},
               "ess_kept": {q: ess(post[q]) for q in qs},
               "steps_per_ess": {q: post_full[q].size / ess(post_full[q]) for q in qs},
               "prior_mean_leaves": prior_leaves,
               "post_mean_leaves": float(np.mean(fit.idata.posterior["f_n_leaves"].values)),
               "fit_s": secs, "mcmc_s": fit.seconds,
               "compiles": c1[0] - c0[0], "compile_s": c1[1] - c0[1], "cache_misses": c1[2] - c0[2],
               "warnings": sorted({type(w.message).__name__ for w in caught})}
        records.append(rec)
        if progress is not None:
            progress(i, rec)
    return records, tests(records, qs, L, bins)


def tests(records, qs, L, bins):
    """Per quantity the chi-squared test of the records' ranks."""
    summary = {}
    for q in qs:
        chi2, dof, pval, counts = chi2_uniform([r["rank"][q] for r in records], L, bins)
        summary[q] = {"chi2": chi2, "dof": dof, "p": pval, "counts": counts.tolist()}
    return summary


def plot(records, summary, qs, L, bins, path):
    """Rank histograms of ``qs``: :func:`bart_sbc.plot` with this model's title."""
    import bart_sbc

    return bart_sbc.plot(records, summary, L, bins, path, quantities=qs,
                         title="Linear-plus-BART (NumPyro, sample_model) SBC; grey: 99% band of one bin under "
                               "uniform ranks")


def use_library(which):
    """Import bayestrees from the committed HEAD (exported to a temporary folder, so that edits in the
    working tree while the run goes on change nothing) or from the working tree."""
    import subprocess
    import tempfile

    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                          text=True).stdout.strip()
    if which == "worktree":
        return {"library": "worktree", "commit": head}
    import atexit
    import shutil

    lib = tempfile.mkdtemp(prefix="treefn-sbc-lib-")
    atexit.register(shutil.rmtree, lib, ignore_errors=True)
    archive = subprocess.run(["git", "archive", "HEAD", "bayestrees"], cwd=REPO, capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", lib], input=archive, check=True)
    sys.path.insert(0, lib)
    return {"library": "HEAD", "commit": head}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-sims", type=int, default=None, help="simulated data sets (default 100; --quick 12)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="12 data sets, 4 bins, 3 chains x 13 draws, tune 100, "
                    "thin 4: a check that the script works, not a verdict")
    ap.add_argument("--bins", type=int, default=None, help="rank bins (default 10; --quick 4)")
    ap.add_argument("--m", type=int, default=20, help="trees (default 20)")
    ap.add_argument("--n", type=int, default=40, help="data rows (default 40)")
    ap.add_argument("--chains", type=int, default=None, help="default 3")
    ap.add_argument("--draws", type=int, default=None, help="used draws per chain (default 33; --quick 13)")
    ap.add_argument("--tune", type=int, default=None, help="default 300 (--quick 100)")
    ap.add_argument("--thin", type=int, default=None, help="default 10 (--quick 4)")
    ap.add_argument("--library", choices=("head", "worktree"), default="head",
                    help="bayestrees as committed (HEAD, exported to a temporary folder; default) or the working tree")
    ap.add_argument("--shard", default="0/1", help="K/N: fit only the data sets i with i %% N == K (run N processes "
                    "with the same --run-id, then --combine it); default 0/1, every data set")
    ap.add_argument("--run-id", default=None, help="names the run (default: the start time)")
    ap.add_argument("--combine", metavar="RUN_ID", default=None,
                    help="the table, figure and summary line of a sharded run whose shards are done")
    ap.add_argument("--out", default=str(RESULTS / "treefn_sbc.jsonl"))
    ap.add_argument("--figure", default=str(RESULTS / "treefn_sbc.png"))
    args = ap.parse_args(argv)
    if args.combine:
        return combine(args.combine, args)
    shard = tuple(int(v) for v in args.shard.split("/"))
    if len(shard) != 2 or not 0 <= shard[0] < shard[1]:
        raise SystemExit(f"--shard K/N with 0 <= K < N, got {args.shard}")
    run_id = args.run_id or time.strftime("%Y%m%d-%H%M%S")
    quick = args.quick
    n_sims = args.n_sims or (12 if quick else 100)
    bins = args.bins or (4 if quick else 10)
    s = settings(n=args.n, m=args.m, chains=args.chains or 3, draws=args.draws or (13 if quick else 33),
                 tune=args.tune if args.tune is not None else (100 if quick else 300),
                 thin=args.thin or (4 if quick else 10))
    L = s["chains"] * s["draws"]
    qs = quantities(s)
    library = use_library(args.library)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from forest_common import machine

    import jax

    import bayestrees as bt

    print(f"bayestrees from {library['library']} {library['commit']} ({Path(bt.__file__).parent})", flush=True)

    counter = CompileCounter()
    common = {"library": library, "jax_version": jax.__version__, "backend": jax.default_backend(), **machine(),
              "compilation_cache": bt.compilation_cache_dir() is not None, "xla_flags": os.environ.get("XLA_FLAGS", ""),
              "time": time.strftime("%Y-%m-%d %H:%M:%S"), "load_before": [round(v, 2) for v in os.getloadavg()]}
    print(f"linear-plus-BART SBC: {n_sims} data sets, n = {s['n']}, {s['p_lin']} coefficients, m = {s['m']} trees "
          f"over {s['p_tree']} features of {s['codes']} codes (f prior sd {s['f_sd']}), max_depth = {s['max_depth']}, "
          f"min_leaf_rows = {s['min_leaf_rows']}; {s['chains']} chains x {s['draws']} used draws (every "
          f"{s['thin']}th step after {s['tune']}): L = {L}, {bins} bins", flush=True)
    t_start = time.perf_counter()

    def progress(i, rec):
        if (i + 1) % max(1, n_sims // 10) == 0 or i < 3:
            print(f"  {i + 1:4d}/{n_sims}  fit {rec['fit_s']:.1f} s ({rec['compiles']} compilations, "
                  f"{rec['compile_s']:.1f} s; {rec['cache_misses']} cache misses)  steps/ESS "
                  f"{max(rec['steps_per_ess'].values()):.1f}  ranks {rec['rank']}  "
                  f"({time.perf_counter() - t_start:.0f} s)", flush=True)

    records, _ = run_sbc(n_sims, args.seed, s, bins=bins, progress=progress, counter=counter, shard=shard)
    shard_line = {"part": "shard", "run_id": run_id, "shard": list(shard), "quick": quick, "n_sims": n_sims,
                  "seed": args.seed, "bins": bins, "L": L, "settings": s, "seconds": time.perf_counter() - t_start,
                  **common, "load_after": [round(v, 2) for v in os.getloadavg()]}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "a") as fh:
        for rec in records:
            fh.write(json.dumps({**rec, "quick": quick, "run_id": run_id}) + "\n")
        fh.write(json.dumps(shard_line) + "\n")
    print(f"appended {len(records) + 1} lines to {args.out} (run {run_id}, shard {shard[0]}/{shard[1]})")
    if shard[1] > 1:
        print(f"when every shard is done: --combine {run_id}")
        return shard_line
    return report(records, [shard_line], args)


def report(records, shards, args):
    """Print the table, draw the figure and append the run's summary line, from the records of every
    shard of one run."""
    first = shards[0]
    s, bins, L, n_sims, quick = first["settings"], first["bins"], first["L"], first["n_sims"], first["quick"]
    qs = quantities(s)
    records = sorted(records, key=lambda r: r["sim"])
    if [r["sim"] for r in records] != list(range(n_sims)):
        raise SystemExit(f"run {first['run_id']}: data sets {sorted(set(range(n_sims)) - {r['sim'] for r in records})} "
                         f"missing (a shard not done?)")
    summary = tests(records, qs, L, bins)
    alpha_bonf = 0.01 / len(qs)
    print(f"\n{n_sims} data sets (run {first['run_id']}, {len(shards)} shard(s))")
    print(f"{'quantity':<8} {'chi2':>8} {'dof':>4} {'p-value':>8} {'1%':>5} {'Bonf.':>6}  counts")
    for q in qs:
        r = summary[q]
        print(f"{q:<8} {r['chi2']:>8.2f} {r['dof']:>4d} {r['p']:>8.4f} {'pass' if r['p'] > 0.01 else 'FAIL':>5} "
              f"{'pass' if r['p'] > alpha_bonf else 'FAIL':>6}  {r['counts']}")
    ess_med = {q: float(np.median([r["ess_kept"][q] for r in records])) for q in qs}
    spe_med = {q: float(np.median([r["steps_per_ess"][q] for r in records])) for q in qs}
    spe_max = {q: float(np.max([r["steps_per_ess"][q] for r in records])) for q in qs}
    ess_iid = ess_of_independent_draws(s["chains"], s["draws"])
    later = [r for r in records if r["sim"] >= len(shards)]     # each shard's first fit compiles everything
    fit_s = np.array([r["fit_s"] for r in later])
    comp = np.array([r["compiles"] for r in later])
    miss = np.array([r["cache_misses"] for r in later])
    comp_s = np.array([r["compile_s"] for r in later])
    print(f"\nprior leaves per tree {np.mean([r['prior_mean_leaves'] for r in records]):.2f}, posterior "
          f"{np.mean([r['post_mean_leaves'] for r in records]):.2f}")
    print("steps per effective draw (bulk ESS of the unthinned chains), median / max over the fits: "
          + ", ".join(f"{q} {spe_med[q]:.1f} / {spe_max[q]:.1f}" for q in qs))
    print(f"median bulk ESS of the {L} used draws (independent draws give {ess_iid:.0f} by the same estimator): "
          + ", ".join(f"{q} {v:.0f}" for q, v in ess_med.items()))
    print(f"after each shard's first fit: fit seconds median {np.median(fit_s):.1f}; XLA compilations per fit median "
          f"{np.median(comp):.0f}, persistent-cache misses per fit median {np.median(miss):.0f} (min {miss.min(initial=99)}), "
          f"compile seconds per fit median {np.median(comp_s):.1f}")
    print("shards: " + "; ".join(f"{sh['shard'][0]}/{sh['shard'][1]} {sh['seconds']:.0f} s, load "
                                  f"{sh['load_before']} -> {sh['load_after']}" for sh in shards))
    warn = collections.Counter(w for r in records for w in r["warnings"])
    if warn:
        print(f"warnings in fits: {dict(warn)}")
    fig = plot(records, summary, qs, L, bins, args.figure)
    if fig:
        print(f"figure: {fig}")
    run = {"part": "summary", "run_id": first["run_id"], "quick": quick, "n_sims": n_sims, "seed": first["seed"],
           "bins": bins, "L": L, "settings": s, "ess_median": ess_med, "ess_independent_draws": ess_iid,
           "steps_per_ess_median": spe_med, "steps_per_ess_max": spe_max,
           "tests": {q: summary[q] for q in qs},
           "pass_1pct_each": all(summary[q]["p"] > 0.01 for q in qs),
           "pass_1pct_issue_quantities": all(summary[q]["p"] > 0.01 for q in issue_quantities(s)),
           "pass_bonferroni_1pct": all(summary[q]["p"] > alpha_bonf for q in qs),
           "fit_s_median": float(np.median(fit_s)), "compiles_per_fit_median": float(np.median(comp)),
           "cache_misses_per_fit_median": float(np.median(miss)), "compile_s_per_fit_median": float(np.median(comp_s)),
           "warnings": dict(warn), "shards": [{k: sh[k] for k in ("shard", "seconds", "load_before", "load_after",
                                                                   "time")} for sh in shards],
           **{k: first[k] for k in first if k not in ("part", "run_id", "shard", "quick", "n_sims", "seed", "bins", "L",
                                                      "settings", "seconds", "load_before", "load_after", "time")}}
    with open(args.out, "a") as fh:
        fh.write(json.dumps(run) + "\n")
    print(f"appended the summary to {args.out}")
    return run


def combine(run_id, args):
    lines = [json.loads(x) for x in open(args.out) if x.strip()]
    records = [x for x in lines if x.get("run_id") == run_id and x["part"] == "sim"]
    shards = sorted((x for x in lines if x.get("run_id") == run_id and x["part"] == "shard"), key=lambda x: x["shard"])
    if not shards or len(shards) != shards[0]["shard"][1]:
        raise SystemExit(f"run {run_id}: {len(shards)} shard(s) done")
    return report(records, shards, args)


if __name__ == "__main__":
    main()
