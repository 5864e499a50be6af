"""BET's one-component trees on interaction data: each chain's root against the exact posterior.

Data: 14 rows, two features of three codes, ``y = 1.5 (x0 >= 1 xor x1 >= 1) + N(0, 0.3^2)``, one
component (``max_trees=1``), ``max_depth=2``, ``q=3``, ``delta=2``, the default lengths (1,000 + 1,000),
4 chains, sampler seeds 0 and 1.  The exact posterior is the enumeration of
``tests/inference/bet/test_bet_exact.py``.  Per fit: each chain's total variation from the exact
posterior of the root split, the total variation over the trees of all chains, and the summaries
outside the test's tolerances.

Run from the repository root::

    .venv/bin/python benchmarks/bet_root_mixing.py PARTICLES REGROW_RATE DATA_SEED [DATA_SEED ...]
    .venv/bin/python benchmarks/bet_root_mixing.py 0 1 0 1 8 10 11     # the sweep alone
    .venv/bin/python benchmarks/bet_root_mixing.py 10 1 0 1 8 10 11    # with the regrowth every step
"""
from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

import numpy as np

import bayestrees as bt

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "inference" / "bet"))


def main(argv=None) -> None:
    import test_bet_exact as T   # the exact posterior of one component (the suite's enumeration)

    argv = sys.argv[1:] if argv is None else argv
    P, rate, seeds = int(argv[0]), float(argv[1]), [int(a) for a in argv[2:]]
    warnings.simplefilter("ignore")
    for s in seeds:
        X, y = T._interaction_data(s)
        want = T._tree_summaries(X.astype(int), y)
        for seed in (0, 1):
            t0 = time.perf_counter()
            est = bt.BETRegressor(alpha_dp=1.0, delta=T.B_DELTA, min_leaf_rows=T.B_Q, max_trees=1, active_trees=1,
                                  init_trees=1, max_depth=T.B_DEPTH, max_bins=3, chains=4, random_state=seed,
                                  particles=P, regrow_rate=rate).fit(X, y)
            dt = time.perf_counter() - t0
            keys = T._sampled_keys(est)
            nd = len(keys) // 4
            tvs = []
            for c in range(4):
                r = {}
                for k in keys[c * nd:(c + 1) * nd]:
                    r[k[0][1]] = r.get(k[0][1], 0) + 1 / nd
                tvs.append(T._tv(r, want["root"]))
            got = T._tree_got(est, X, want)
            print(f"particles {P} rate {rate} data seed {s} sampler seed {seed}: chains' root TV {np.round(tvs, 3)}, "
                  f"TV over trees {T._tv(got['trees'], want['trees']):.3f}, outside {T._tree_outside(got, want)}, "
                  f"{dt:.1f} s", flush=True)


if __name__ == "__main__":
    main()
