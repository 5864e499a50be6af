"""BART's mixing at its default lengths: Friedman's function, n = 1,000, 4 chains.

For each move setting (``--moves``: ``cgm`` = grow 0.25, prune 0.25, change 0.4, swap 0.1, the
BayesTree/dbarts moves; ``gp`` = grow and prune 0.5 each, the moves of the R package BART and of
bartz) and each data set (``--datasets``, seeds ``--seed + r``): one fit of ``bt.BARTRegressor`` with
its default lengths (``--tune``/``--draws`` to change them) and 4 chains, then

* R-hat (rank-normalised, split) and bulk ESS of ``sigma`` and of ``f`` at 5 fixed test rows,
* ESS of ``sigma`` per second of sampling (compilation excluded: a warm-up fit of the same shapes,
  as many kept draws, runs first, and the fit's own ``seconds`` count sampling only; before
  2026-11-26 the warm-up kept 2 draws, so the timed fit compiled again and its seconds included
  the compilation),
* RMSE of the posterior mean against the true ``f`` at 1,000 new rows.

Data: ``X ~ U(0, 1)^10``, ``y = 10 sin(pi x1 x2) + 20 (x3 - 0.5)^2 + 10 x4 + 5 x5 + N(0, 1)``.
The issue's goal: R-hat of sigma below 1.01 at the defaults.

    .venv/bin/python benchmarks/bart_mixing.py                      # both settings, 3 data sets
    .venv/bin/python benchmarks/bart_mixing.py --moves gp --datasets 1

``--m`` and ``--thin`` change the number of trees and the thinning of that fit.  ``--moves slide``: grow 0.35,
prune 0.35 and the change move as a local slide of the threshold (``slide=3``; ``BARTRegressor``'s ``slide``).

``--trace STEPS`` (issue 29's mixing study) runs instead one fit per data set and move setting of
4 chains of ``STEPS`` steps with no tuning (``tune=0``, ``draws=STEPS / thin``, ``keep_trees=False``,
the 1,000 test rows named as ``X_predict``), so that every step from the initial state is in the
trace; a fit with ``tune=B, draws=K`` is the same chains' window of steps ``B .. B + K`` (the step
keys depend on the step index only, so the draws are bit-identical, and so are ``thin``'s). It reports

* R-hat (rank-normalised, split) of ``sigma`` over the windows ``B .. B + K`` for
  ``B`` in ``--burns`` and ``K`` in ``--keeps`` (steps; thinned draws inside the window),
* the integrated autocorrelation time of ``sigma`` per chain over the second half of the run
  (steps per effective draw: ``thin`` times Geyer's initial monotone sequence estimate on the
  thinned draws, each chain about its own mean), and the pooled one, ``4 (STEPS / 2) / ESS``
  with the 4-chain bulk ESS of the same half (larger than the per-chain ones when the chains sit
  at different levels),
* the per-chain means of ``sigma`` over windows of ``--window`` steps (the trace),
* the fit's own sampling seconds (compilation excluded by the warm-up fit) and the RMSE of the
  posterior mean over the second half.

    nice -n 10 .venv/bin/python benchmarks/bart_mixing.py --trace 20000 --thin 10 --moves gp --datasets 3

Prints tables and appends JSON lines to ``benchmarks/results/bart_mixing.jsonl`` (with the load
average before and after each fit).
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import warnings
from pathlib import Path

import arviz as az
import numpy as np

import bayestrees as bt
from bayestrees.convergence import ConvergenceWarning

sys.path.insert(0, str(Path(__file__).resolve().parent))
from forest_common import append_jsonl  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
MOVES = {"cgm": (0.25, 0.25, 0.4, 0.1), "gp": (0.5, 0.5, 0.0, 0.0), "slide": (0.35, 0.35, 0.3, 0.0),
         "pg": (0.5, 0.5, 0.0, 0.0)}
#: estimator settings of a move setting beyond its probabilities ("slide": the change move as a local slide of
#: the threshold by up to 3 codes, ``BARTRegressor(slide=3)``; "pg": grow/prune and a particle Gibbs regrowth
#: of every tree a step with 10 particles, ``BARTRegressor(particles=10)``)
EXTRA = {"slide": {"slide": 3}, "pg": {"particles": 10}}


def moves_kw(moves: str) -> dict:
    """``BARTRegressor``'s move settings for the setting named ``moves``."""
    return dict(move_probs=MOVES[moves], **EXTRA.get(moves, {}))


def friedman(rng, n, p=10):
    X = rng.random((n, p))
    f = 10 * np.sin(np.pi * X[:, 0] * X[:, 1]) + 20 * (X[:, 2] - 0.5) ** 2 + 10 * X[:, 3] + 5 * X[:, 4]
    return X, f


def run(args, moves: str, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    X, f = friedman(rng, args.n)
    y = f + rng.normal(size=args.n)
    Xt, ft = friedman(rng, 1000)
    kw = dict(**moves_kw(moves), chains=4, random_state=seed, m=args.m, thin=args.thin)
    if args.tune is not None:
        kw["tune"] = args.tune
    if args.draws is not None:
        kw["draws"] = args.draws
    load0 = os.getloadavg()
    est = bt.BARTRegressor(**kw).fit(X, y)
    load1 = os.getloadavg()
    post = est.idata_.posterior
    sigma = post["sigma"]
    fx = est.predict_draws(Xt[:5])                     # (chains, draws, 5)
    fx = np.asarray(fx).reshape(sigma.shape + (5,))
    ds = az.convert_to_dataset({"sigma": np.asarray(sigma), "f": fx})
    rhat, ess = az.rhat(ds), az.ess(ds, method="bulk")
    seconds = float(est.result_.seconds)
    rmse = float(np.sqrt(np.mean((est.predict(Xt) - ft) ** 2)))
    return dict(moves=moves, move_probs=MOVES[moves], seed=seed, n=args.n, m=args.m, thin=args.thin,
                tune=kw.get("tune"), draws=kw.get("draws"),
                rhat_sigma=float(rhat["sigma"]), rhat_f_max=float(rhat["f"].max()),
                ess_sigma=float(ess["sigma"]), ess_f_min=float(ess["f"].min()),
                ess_f_median=float(np.median(ess["f"])),
                sigma_mean=float(np.mean(sigma)), seconds=seconds, ess_sigma_per_s=float(ess["sigma"]) / seconds,
                rmse=rmse, load_before=[round(x, 2) for x in load0], load_after=[round(x, 2) for x in load1])


def iat(x) -> float:
    """Integrated autocorrelation time of one chain ``x`` (draws per effective draw): Geyer's initial
    monotone sequence estimator on the autocorrelations about the chain's own mean."""
    x = np.asarray(x, np.float64) - np.mean(x)
    n = len(x)
    fx = np.fft.rfft(x, 2 * n)
    acov = np.fft.irfft(fx * np.conj(fx))[:n] / n
    rho = acov / acov[0]
    pairs = rho[: n - n % 2].reshape(-1, 2).sum(1)        # Gamma_k = rho_2k + rho_2k+1
    pos = np.flatnonzero(pairs <= 0)
    pairs = pairs[: pos[0] if pos.size else len(pairs)]
    pairs = np.minimum.accumulate(pairs)
    return float(max(-1.0 + 2.0 * pairs.sum(), 1.0))


def rhat_sigma(s) -> float:
    return float(az.rhat(az.convert_to_dataset({"sigma": np.asarray(s)}))["sigma"])


def trace(args, moves: str, seed: int) -> dict:
    """One fit of 4 chains of ``args.trace`` steps from the initial state (``tune=0``); the summaries
    of the module docstring."""
    rng = np.random.default_rng(seed)
    X, f = friedman(rng, args.n)
    y = f + rng.normal(size=args.n)
    Xt, ft = friedman(rng, 1000)
    T, k = args.trace, args.thin
    if T % k:
        raise SystemExit(f"--trace ({T}) must be a multiple of --thin ({k})")
    est = bt.BARTRegressor(m=args.m, **moves_kw(moves), chains=4, random_state=seed,
                           tune=0, draws=T // k,
                           thin=k, keep_trees=False)
    load0 = os.getloadavg()
    est.fit(X, y, X_predict=Xt)
    load1 = os.getloadavg()
    seconds = float(est.result_.seconds)
    sigma = np.asarray(est.result_.sigma)             # (4, T / k): the state after steps k, 2k, ..., T
    steps = k * (np.arange(sigma.shape[1]) + 1)
    rhat = {}
    for B in args.burns:
        for K in args.keeps:
            if B + K <= T:
                sel = (steps > B) & (steps <= B + K)
                rhat[f"{B}+{K}"] = rhat_sigma(sigma[:, sel])
    half = steps > T // 2
    tau_chain = [k * iat(c) for c in sigma[:, half]]
    ess_half = float(az.ess(az.convert_to_dataset({"sigma": sigma[:, half]}), method="bulk")["sigma"])
    tau_pooled = 4 * (T - T // 2) / ess_half
    W = args.window
    win = [[float(np.mean(c[(steps > a) & (steps <= a + W)])) for a in range(0, T - W + 1, W)] for c in sigma]
    fx = np.asarray(est.predict_draws(Xt)).reshape(sigma.shape + (len(Xt),))
    rmse = float(np.sqrt(np.mean((fx[:, half].mean((0, 1)) - ft) ** 2)))
    return dict(mode="trace", moves=moves, move_probs=MOVES[moves], seed=seed, n=args.n, m=args.m, chains=4,
                steps=T, thin=k, rhat_sigma=rhat, tau_chain=[round(t, 1) for t in tau_chain],
                tau_pooled=round(tau_pooled, 1), ess_sigma_half=round(ess_half, 1),
                sigma_mean_half=[round(float(np.mean(c[half])), 4) for c in sigma],
                sigma_sd_half=round(float(np.std(sigma[:, half])), 4), window=W,
                window_means=[[round(v, 4) for v in c] for c in win], seconds=round(seconds, 2),
                ms_per_step=round(1000 * seconds / T, 2), rmse_half=round(rmse, 4),
                acceptance={a: round(b, 4) for a, b in est.acceptance_.items()},
                load_before=[round(x, 2) for x in load0], load_after=[round(x, 2) for x in load1])


def print_trace(row) -> None:
    print(f"\n{row['moves']} m={row['m']} seed={row['seed']}: {row['steps']} steps x 4 chains, thin {row['thin']}, "
          f"{row['seconds']:.1f} s sampling ({row['ms_per_step']:.2f} ms a step of the 4 chains), "
          f"load {row['load_before'][0]:.2f} -> {row['load_after'][0]:.2f}")
    print("  R-hat of sigma, window (burn-in + kept steps): "
          + ", ".join(f"{w} {r:.3f}" for w, r in row["rhat_sigma"].items()))
    print(f"  IAT of sigma over the second half, steps: per chain {row['tau_chain']}, pooled {row['tau_pooled']} "
          f"(bulk ESS {row['ess_sigma_half']:.0f})")
    print(f"  chain means of sigma over the second half {row['sigma_mean_half']} (sd {row['sigma_sd_half']}); "
          f"RMSE {row['rmse_half']:.3f}; acceptance {row['acceptance']}")
    print(f"  means over windows of {row['window']} steps:")
    for c, w in enumerate(row["window_means"]):
        print(f"    chain {c}: " + " ".join(f"{v:.3f}" for v in w))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--moves", nargs="+", default=["cgm", "gp"], choices=sorted(MOVES))
    ap.add_argument("--datasets", type=int, default=3)
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--tune", type=int, default=None)
    ap.add_argument("--draws", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--m", type=int, default=200, help="trees")
    ap.add_argument("--thin", type=int, default=1)
    ap.add_argument("--trace", type=int, default=None, metavar="STEPS",
                    help="steps per chain of one fit from the initial state (tune=0); see the module docstring")
    ap.add_argument("--burns", type=int, nargs="+", default=[1000, 5000], help="--trace: burn-ins (steps)")
    ap.add_argument("--keeps", type=int, nargs="+", default=[1000, 2000, 5000, 10000, 20000, 40000],
                    help="--trace: kept steps after each burn-in")
    ap.add_argument("--window", type=int, default=1000, help="--trace: steps per window of the chain means")
    ap.add_argument("--out", default=str(RESULTS / "bart_mixing.jsonl"))
    args = ap.parse_args()
    if args.trace:
        warnings.simplefilter("ignore", ConvergenceWarning)     # the warm-up's and the fits' (R-hat is reported)
    # warm-up: compile the shapes once, so that the timed fits sample only
    rng = np.random.default_rng(12345)
    X, f = friedman(rng, args.n)
    # The compiled block's draw buffer is as long as ``draws`` (a static shape; tuning and thinning
    # lengths are traced), so the warm-up keeps as many draws, with thin 1 and no tuning.
    y0 = f + rng.normal(size=args.n)
    for moves in args.moves:
        if args.trace:
            bt.BARTRegressor(m=args.m, **moves_kw(moves), chains=4, tune=0,
                             draws=args.trace // args.thin,
                             keep_trees=False).fit(X, y0, X_predict=X[:1000])
        else:
            bt.BARTRegressor(m=args.m, **moves_kw(moves), chains=4, tune=0,
                             draws=1000 if args.draws is None else args.draws).fit(X, y0)
    rows = []
    if args.trace:
        for r in range(args.datasets):
            for moves in args.moves:
                row = trace(args, moves, args.seed + r)
                row.update(machine=platform.machine(), cpus=os.cpu_count(), bayestrees=bt.__version__)
                append_jsonl(args.out, row)
                print_trace(row)
                sys.stdout.flush()
        print(f"\nappended {args.datasets * len(args.moves)} lines to {os.path.relpath(args.out)}")
        return
    print(f"{'moves':>5} {'seed':>4} {'R-hat sigma':>11} {'max R-hat f':>11} {'ESS sigma':>9} {'min ESS f':>9} "
          f"{'med ESS f':>9} {'sigma':>6} {'s':>6} {'ESS/s':>6} {'RMSE':>6}")
    for r in range(args.datasets):
        for moves in args.moves:
            row = run(args, moves, args.seed + r)
            row.update(machine=platform.machine(), cpus=os.cpu_count(), bayestrees=bt.__version__)
            rows.append(row)
            print(f"{moves:>5} {row['seed']:>4} {row['rhat_sigma']:11.3f} {row['rhat_f_max']:11.3f} "
                  f"{row['ess_sigma']:9.0f} {row['ess_f_min']:9.0f} {row['ess_f_median']:9.0f} {row['sigma_mean']:6.3f} "
                  f"{row['seconds']:6.1f} "
                  f"{row['ess_sigma_per_s']:6.1f} {row['rmse']:6.3f}", flush=True)
    for row in rows:
        append_jsonl(args.out, row)
    print(f"\nappended {len(rows)} lines to {os.path.relpath(args.out)}")


if __name__ == "__main__":
    main()
