"""California housing trunk stability (Taddy et al. 2015, Section 4).

The *sample trunk* is the CART tree grown on the full data (20,640 rows, unit
weights) with ``min_samples_leaf=3500``.  We draw 100 Bayesian-bootstrap trunks
(the same CART on Exp(1)-weighted rows) and report how often a draw has the
sample trunk's structure and split features (over the sample trunk's depth), how
often it also has the identical split locations (bin codes), and the root split
feature of every draw (``bayestrees.posterior.trunk_stability``).
``medianIncome`` is multiplied by 1e4 as in the CV protocol (this does not change
any split).

Writes one JSON line to ``benchmarks/results/forest_trunk.jsonl``.

    python benchmarks/forest_trunk.py [--quick] [--seed 5807]
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from forest_california import load  # noqa: E402
from forest_common import RESULTS, Timer, append_jsonl, machine, parser  # noqa: E402


def main(argv=None):
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--trunk-min-samples-leaf", type=int, default=3500)
    p.add_argument("--n-draws", type=int, default=100)
    p.add_argument("--seed", type=int, default=5807)
    p.add_argument("--n-jobs", type=int, default=2)
    a = p.parse_args(argv)
    import pandas as pd

    from bayestrees.posterior import trunk_stability

    X, y, names = load(a.data_dir)
    n_draws = 10 if a.quick else a.n_draws
    with Timer() as t:
        ts = trunk_stability(pd.DataFrame(X, columns=names), y, trunk_min_samples_leaf=a.trunk_min_samples_leaf,
                             n_draws=n_draws, random_state=a.seed, n_jobs=a.n_jobs)
    print(f"California housing: n={len(y)}, trunk min_samples_leaf={a.trunk_min_samples_leaf}, "
          f"{n_draws} draws, seed={a.seed}, {t.s:.1f}s")
    print(ts.table(top=5))
    rec = dict(benchmark="trunk", n=len(y), trunk_min_samples_leaf=a.trunk_min_samples_leaf, n_draws=n_draws,
               seed=a.seed, levels=ts.levels, sample_trunk_frequency=ts.sample_trunk_frequency,
               sample_trunk_exact_frequency=ts.sample_trunk_exact_frequency,
               root_feature_frequency={names[int(f)]: p for f, p in ts.root_feature_frequency.items()},
               top_trunks=[[c, str(s)] for s, c in ts.frequencies[:5]], seconds=t.s, **machine())
    out = Path(a.out or RESULTS / ("forest_trunk_quick.jsonl" if a.quick else "forest_trunk.jsonl"))
    if out.exists():
        out.unlink()
    append_jsonl(out, rec)
    ok = ts.sample_trunk_frequency >= 0.5 and rec["root_feature_frequency"].get("medianIncome", 0) == 1.0
    print(f"target (sample trunk in >= 50% of draws, 100% root on medianIncome): {'met' if ok else 'NOT met'}")


if __name__ == "__main__":
    main()
