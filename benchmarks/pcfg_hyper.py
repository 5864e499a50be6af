"""Hyperparameters by evidence: learnt (log phi, alpha) against the paper's fixed ln phi = 2.

On each training fold, ``fit_hyperparameters`` maximises the exact log evidence
over log phi and a per-class log alpha with ``jax.grad`` through the inside
programme and Adam; the estimator is then refitted with the learnt values.
Held-out accuracy (MAP tree and exact posterior predictive) is compared with
``log_phi=2, alpha=1``.

Usage::

    python benchmarks/pcfg_hyper.py [--repeats 1] [--steps 150] [--data-dir DIR]

Data as in ``pcfg_paper.py`` (``--data-dir``, else ``$BAYESTREES_DATA``, else
``../shared/data`` relative to the repository root).

Prints a table and writes benchmarks/results/pcfg_hyper.json.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

import bayestrees as bt
from bayestrees.inference.pcfg import dp as P

import pcfg_paper  # noqa: E402  (same directory)
from pcfg_paper import load  # noqa: E402

OUT = Path(__file__).resolve().parent / "results"


def run(name, repeats, steps):
    from sklearn.model_selection import StratifiedKFold

    X, y, bins = load(name)
    acc = {k: [] for k in ("map_fixed", "post_fixed", "map_learnt", "post_learnt", "log_phi", "alpha_mean",
                           "ev_fixed", "ev_learnt")}
    for r in range(repeats):
        for tr, te in StratifiedKFold(10, shuffle=True, random_state=r).split(X, y):
            fixed = bt.PCFGTreeClassifier(max_bins=bins, draws=5, random_state=r).fit(X[tr], y[tr])
            post = fixed.posterior_
            fit = P.fit_hyperparameters(post.ds, post.root, log_phi0=2.0, alpha0=1.0, steps=steps,
                                        learning_rate=0.05)
            learnt = bt.PCFGTreeClassifier(max_bins=bins, draws=5, random_state=r, log_phi=fit["log_phi"],
                                           leaf_concentration=fit["alpha"]).fit(X[tr], y[tr])
            for tag, clf in (("fixed", fixed), ("learnt", learnt)):
                acc[f"map_{tag}"].append(clf.score(X[te], y[te]))
                clf.set_params(predict_with="posterior")
                acc[f"post_{tag}"].append(clf.score(X[te], y[te]))
                acc[f"ev_{tag}"].append(clf.log_evidence_)
            acc["log_phi"].append(fit["log_phi"])
            acc["alpha_mean"].append(float(np.mean(fit["alpha"])))
    return {k: float(np.mean(v)) for k, v in acc.items()} | {"bins": bins, "repeats": repeats, "steps": steps}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--only", default="iris,caesarian,haberman,vertebral")
    ap.add_argument("--data-dir", default=str(pcfg_paper.DATA),
                    help="folder of the public data files (default: $BAYESTREES_DATA, else ../shared/data "
                         "relative to the repository root)")
    args = ap.parse_args()
    pcfg_paper.DATA = Path(args.data_dir)
    rows = {}
    for name in args.only.split(","):
        t0 = time.perf_counter()
        rows[name] = run(name, args.repeats, args.steps)
        rows[name]["wall_s"] = time.perf_counter() - t0
        print(name, json.dumps(rows[name]), flush=True)
        OUT.mkdir(parents=True, exist_ok=True)
        (OUT / "pcfg_hyper.json").write_text(json.dumps(rows, indent=1))
    print(f"{'data':<10} {'MAP lnphi=2':>11} {'MAP learnt':>10} {'post lnphi=2':>12} {'post learnt':>11} "
          f"{'ln phi':>7} {'alpha':>6} {'ev gain':>8}")
    for n, r in rows.items():
        print(f"{n:<10} {r['map_fixed']:>11.3f} {r['map_learnt']:>10.3f} {r['post_fixed']:>12.3f} "
              f"{r['post_learnt']:>11.3f} {r['log_phi']:>7.2f} {r['alpha_mean']:>6.2f} "
              f"{r['ev_learnt'] - r['ev_fixed']:>8.2f}")
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "pcfg_hyper.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
