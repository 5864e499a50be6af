"""BayesianCARTClassifier at its defaults (only the prior set to the PCFG's) against the exact PCFG posterior.

Designs of data a referee might bring, beyond the suite's (each with its own data seeds):

    xor     the suite's greedy-root case: y = (x2 >= 2) xor (x0 == 0), 10% of labels flipped, 64 rows, 3 features
    three   three classes from two features, 15% of labels redrawn, 60 rows
    inter   an interaction of x1 and x3 among 4 features, 15% flipped, 48 rows (a diffuse posterior over large trees)

For each: the total variation of the posterior of the number of leaves against the exact one (the
leaf-count prior, ``log_phi`` 2.5, Dirichlet leaves), pooled and per chain, the tail beyond 12
leaves compared as one cell.  ``MAXD`` and ``DRAWS`` in the environment set the estimator's
``max_depth`` and ``draws`` (the exact posterior has no depth limit: at the default depth 6 a diffuse
posterior is truncated).  One JSON line per fit on standard output.

    python benchmarks/bcart_defaults_audit.py xor:1,3,4,5 three:0,1,2,3 inter:0,1,2,3
"""
import json
import os
import sys
import time
import warnings

import numpy as np


def _settings() -> dict:
    out = {}
    if "MAXD" in os.environ:
        out["max_depth"] = int(os.environ["MAXD"])
    if "DRAWS" in os.environ:
        out["draws"] = int(os.environ["DRAWS"])
    return out


def design(name, seed):
    rng = np.random.default_rng(seed)
    if name == "xor":
        n, d, K = 64, 3, 2
        codes = rng.integers(0, 4, size=(n, d))
        y = (((codes[:, 2] >= 2) ^ (codes[:, 0] == 0)) ^ (rng.random(n) < 0.1)).astype(np.int32)
    elif name == "three":
        n, d, K = 60, 2, 3
        codes = rng.integers(0, 4, size=(n, d))
        y = np.where(codes[:, 0] <= 0, 0, np.where(codes[:, 1] >= 2, 1, 2))
        flip = rng.random(n) < 0.15
        y = np.where(flip, rng.integers(0, 3, n), y).astype(np.int32)
    elif name == "inter":
        n, d, K = 48, 4, 2
        codes = rng.integers(0, 4, size=(n, d))
        y = (((codes[:, 1] >= 1) & (codes[:, 3] <= 1)) ^ (rng.random(n) < 0.15)).astype(np.int32)
    return codes, y, d, K


def _tv(got, ex):
    """TV over 1..12 leaves and the tail beyond as one cell."""
    return 0.5 * np.abs(got - ex[:12]).sum() + 0.5 * abs((1 - got.sum()) - (1 - ex[:12].sum()))


LOG_PHI = 2.5


def main(argv):
    import bayestrees as bt
    from bayestrees.inference.pcfg.fit import fit_posterior

    log_phi = LOG_PHI
    for name, seeds in [(a.split(":")[0], [int(s) for s in a.split(":")[1].split(",")]) for a in argv]:
        for seed in seeds:
            codes, y, d, K = design(name, seed)
            if len(np.unique(y)) < K or any(len(np.unique(codes[:, j])) < 4 for j in range(d)):
                print(json.dumps(dict(design=name, seed=seed, skipped=True))); continue
            post = fit_posterior(codes, np.full(d, 4), y, kind="classification", log_phi=log_phi, alpha=1.0, n_classes=K)
            ex = np.asarray(post.n_leaves_distribution(12))
            t0 = time.perf_counter()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                clf = bt.BayesianCARTClassifier(prior=bt.priors.LeafCountPrior(log_phi), random_state=seed, **_settings()).fit(codes.astype(float), y)
            nl = np.asarray(clf.idata_.posterior["n_leaves"])
            got = np.bincount(np.minimum(nl.ravel(), 13), minlength=14)[1:13] / nl.size
            tv = _tv(got, ex)
            per_chain = [_tv(np.bincount(np.minimum(c, 13), minlength=14)[1:13] / c.size, ex) for c in nl]
            print(json.dumps(dict(design=name, seed=seed, tv_leaves=round(float(tv), 4), per_chain=[round(float(x), 3) for x in per_chain],
                                  exact_mode=int(np.argmax(ex)) + 1, got=[round(float(x), 3) for x in got], exact=[round(float(x), 3) for x in ex[:12]], s=round(time.perf_counter() - t0, 1),
                                  warned=sorted({type(w.message).__name__ for w in caught}))), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
