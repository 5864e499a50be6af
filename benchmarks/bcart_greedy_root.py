"""Bayesian CART's kernels against the exact PCFG posterior where the greedy root split is not the only root.

Data: ``y = (x2 >= 2) xor (x0 == 0)`` with 10% of the labels flipped, 64 rows, 3 features of 4 codes
(``--seeds`` draws them); prior: the leaf-count (PCFG) prior, ``log_phi`` 2.5; Dirichlet leaves.  A split
on ``x0`` alone gains little and one on ``x2`` much, yet the two orders give the same partition, so
the exact posterior (:func:`bayestrees.inference.pcfg.fit.fit_posterior`) puts about half its mass on
each root.  Each scheme fits the classifier at its defaults otherwise (4 chains, 300 + 700 steps);
reported: total variation of the root's variable and of the number of leaves against the exact
posterior, each chain's share of ``x0`` roots, and the fit's time (compilation included).

Run from the repository root::

    .venv/bin/python benchmarks/bcart_greedy_root.py --seeds 0 1 2 --schemes default pgibbs

Appends one JSON line per fit to ``benchmarks/results/bcart_greedy_root.jsonl``.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"


def case(seed: int, n: int = 64, d: int = 3):
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 4, size=(n, d))
    y = (((codes[:, 2] >= 2) ^ (codes[:, 0] == 0)) ^ (rng.random(n) < 0.1)).astype(np.int32)
    return codes, y


def canonical_root(codes, feature, threshold, left) -> int:
    """The smallest feature that gives the root's partition (the PCFG's canonical split), or -1 for a leaf."""
    if left < 0:
        return -1
    below = codes[:, feature] <= threshold
    for g in range(codes.shape[1]):
        a, b = codes[below, g], codes[~below, g]
        if a.max() < b.min() or b.max() < a.min():
            return g
    raise ValueError("the root rule does not separate its own partition")


def run(seed: int, scheme: str, log_phi: float = 2.5) -> dict:
    import bayestrees as bt
    from bayestrees.inference.pcfg.fit import fit_posterior

    codes, y = case(seed)
    d = codes.shape[1]
    post = fit_posterior(codes, np.full(d, 4), y, kind="classification", log_phi=log_phi, alpha=1.0, n_classes=2)
    p0, ps = post.root_splits()
    slot_feature = np.asarray(post.structure.slot_feature)
    exact_root = {-1: float(p0), **{f: float(ps[slot_feature == f].sum()) for f in range(d)}}
    exact_leaves = post.n_leaves_distribution(12)
    kw = {} if scheme == "default" else {"scheme": scheme}
    t0 = time.perf_counter()
    clf = bt.BayesianCARTClassifier(prior=bt.priors.LeafCountPrior(log_phi), random_state=0, **kw).fit(
        codes.astype(float), y)
    seconds = time.perf_counter() - t0
    tr = clf.result_.trees
    f, t, left = (np.asarray(a)[..., 0] for a in (tr.feature, tr.threshold, tr.left))   # (chains, draws)
    root = np.vectorize(lambda a, b, c: canonical_root(codes, a, b, c))(f, t, left)
    tv_root = 0.5 * sum(abs(np.mean(root == k) - p) for k, p in exact_root.items())
    n_leaves = np.asarray(clf.idata_.posterior["n_leaves"]).ravel()
    got = np.bincount(n_leaves, minlength=13)[1:13] / n_leaves.size
    tv_leaves = 0.5 * np.abs(got - exact_leaves[:12]).sum() + 0.5 * (1 - exact_leaves[:12].sum())
    cfg = clf.result_.config
    return dict(seed=seed, scheme=scheme, kernel=dict(scheme=cfg.scheme, rungs=len(cfg.temperatures),
                                                      local_moves=cfg.local_moves, particles=cfg.particles),
                exact_root={str(k): round(v, 4) for k, v in exact_root.items()},
                got_root={str(k): round(float(np.mean(root == k)), 4) for k in exact_root},
                tv_root=round(float(tv_root), 4), tv_leaves=round(float(tv_leaves), 4),
                x0_share_by_chain=np.round((root == 0).mean(1), 3).tolist(), seconds=round(seconds, 1),
                date=time.strftime("%Y-%m-%d"))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--schemes", nargs="+", default=["default", "pgibbs"])
    p.add_argument("--out", default=str(RESULTS / "bcart_greedy_root.jsonl"))
    args = p.parse_args()
    for seed in args.seeds:
        for scheme in args.schemes:
            row = run(seed, scheme)
            print(json.dumps(row), flush=True)
            with open(args.out, "a") as fh:
                fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
