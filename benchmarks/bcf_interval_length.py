"""Does the causal forest's ATE interval widen with longer chains?  (Issue 45: the 95% intervals of
the ATE covered in 80-85% of replications on three of the paper's designs, about a quarter too narrow.)

Per replication of one of the paper's designs (``bcf_paper.design``; the true propensity given, the
same for every fit): ``bt.BCFRegressor`` at its default lengths (4 chains of 1,000 + 1,000) and with
``--long-draws`` kept draws per chain, the same seed.  Printed per fit: the ATE's posterior mean and
sd, its 95% interval's length, whether it covers the sample ATE, the R-hat of the ATE, seconds.

    .venv/bin/python benchmarks/bcf_interval_length.py --design linear-homogeneous --n 500 --reps 0 1 2 3

With ``--long-draws 0`` only the default lengths run; ``--paper-seeds`` draws the data of ``bcf_paper.py``'s replications; ``--propensity estimated`` lets the estimator
estimate the propensity (its default: a 50-tree ``bt.BARTClassifier``'s posterior mean) instead of
giving it the true one.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bcf_paper import DESIGNS, design  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--design", default="linear-homogeneous", choices=DESIGNS)
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--reps", type=int, nargs="+", default=[0, 1, 2, 3])
    ap.add_argument("--long-draws", type=int, default=4000)
    ap.add_argument("--propensity", choices=("true", "estimated"), default="true")
    ap.add_argument("--paper-seeds", action="store_true",
                    help="the data seeds of bcf_paper.py (10,000 n + 100 design + rep) instead of rep")
    a = ap.parse_args(argv)
    import arviz as az

    import bayestrees as bt

    for rep in a.reps:
        seed = 10_000 * a.n + 100 * DESIGNS.index(a.design) + rep if a.paper_seeds else rep
        X, y, z, tau, pi = design(a.design, a.n, seed)
        for draws in (1000, a.long_draws) if a.long_draws else (1000,):
            t = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                m = bt.BCFRegressor(draws=draws, random_state=rep).fit(X, y, z, pihat=pi if a.propensity == "true" else None)
            sec = time.perf_counter() - t
            ate = np.asarray(m.idata_.posterior["ate"])            # (chains, draws)
            lo, hi = np.quantile(ate.ravel(), [0.025, 0.975])
            print(json.dumps(dict(design=a.design, n=a.n, rep=rep, draws=draws, propensity=a.propensity, ate=round(float(ate.mean()), 4),
                                  ate_sd=round(float(ate.std()), 4), length=round(float(hi - lo), 4),
                                  truth=round(float(tau.mean()), 4), covers=bool(lo <= tau.mean() <= hi),
                                  rhat=round(float(az.rhat(az.convert_to_dataset(ate[None] if ate.ndim == 1 else ate)
                                                           ).to_array().values.ravel()[0]), 3),
                                  chain_means=[round(float(v), 3) for v in ate.mean(1)], seconds=round(sec, 1))),
                  flush=True)


if __name__ == "__main__":
    main()
