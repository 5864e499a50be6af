"""Shared helpers for the Bayesian-forest paper reproductions (forest_*.py)."""
from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"


def data_dir() -> Path:
    """The folder of the public data files.

    Returns
    -------
    Path
        ``$BAYESTREES_DATA`` if set, else ``../shared/data`` relative to the repository root
        (found from this file's location, not from the working directory).
    """
    return Path(os.environ.get("BAYESTREES_DATA", REPO.parent / "shared" / "data"))


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--data-dir", default=str(data_dir()),
                   help="folder holding the public data files (default: $BAYESTREES_DATA, else ../shared/data "
                        "relative to the repository root)")
    p.add_argument("--quick", action="store_true", help="small smoke run (few trees / folds / rows)")
    p.add_argument("--out", default=None, help="JSON-lines results file (default: benchmarks/results/<name>.jsonl)")
    return p


def machine() -> dict:
    """Where and with which library the numbers were obtained.

    Returns
    -------
    dict
        Machine, CPU count and Python version; ``bayestrees_path``, the imported library's folder
        relative to the repository root (or ``"outside the repository"`` for an installed copy,
        with its version); ``repo_head``, the repository's commit; and ``repo_dirty``, whether
        ``bayestrees/`` had uncommitted changes.
    """
    import subprocess

    import bayestrees

    def git(*args):
        try:
            return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True,
                                  timeout=10).stdout.strip()
        except Exception:  # pragma: no cover - git missing
            return ""

    lib = Path(bayestrees.__file__).resolve().parent
    try:
        where = lib.relative_to(REPO).as_posix()
    except ValueError:
        where = "outside the repository"
    rec = {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version(),
           "bayestrees_path": where, "repo_head": git("rev-parse", "--short", "HEAD")}
    if where == "outside the repository":
        rec["bayestrees_version"] = getattr(bayestrees, "__version__", "")
    else:
        rec["repo_dirty"] = bool(git("status", "--porcelain", "--", where))
    return rec


def rmse(a, b) -> float:
    a, b = np.asarray(a, float), np.asarray(b, float)
    return float(np.sqrt(np.mean((a - b) ** 2)))


class Timer:
    def __enter__(self):
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.s = time.perf_counter() - self.t0


def append_jsonl(path, record: dict) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


def read_jsonl(path) -> list[dict]:
    path = Path(path)
    if not path.exists():
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def cv_table(records: list[dict], methods: list[str], scale: float = 1.0, fmt: str = "{:,.0f}") -> str:
    """Mean RMSE per method over the folds that *every* listed method finished,
    with % worse than the best and the median fit time."""
    by = {}
    for r in records:
        by.setdefault(r["method"], {})[r["fold"]] = r
    methods = [m for m in methods if m in by]
    if not methods:
        return "(no results yet)"
    common = sorted(set.intersection(*[set(by[m]) for m in methods]))
    if not common:
        return "(no fold finished by every method yet)"
    mean = {m: float(np.mean([by[m][f]["rmse"] for f in common])) * scale for m in methods}
    best = min(mean.values())
    lines = [f"folds: {common} ({len(common)} of them)",
             f"{'method':<22}{'mean RMSE':>14}{'% worse':>10}{'fit s (median)':>16}{'fit s (fold 0)':>16}"]
    for m in sorted(methods, key=lambda k: mean[k]):
        fits = [by[m][f]["fit_s"] for f in common]
        f0 = by[m].get(0, {}).get("fit_s", float("nan"))
        lines.append(f"{m:<22}{fmt.format(mean[m]):>14}{100 * (mean[m] / best - 1):>9.1f}%"
                     f"{np.median(fits):>16.1f}{f0:>16.1f}")
    return "\n".join(lines)


def run_folds(benchmark: str, X, y, folds, todo, methods, make_est, out, *, n_trees: int, min_samples_leaf: int,
              max_bins_of, fmt: str = "{:,.0f}", extra: dict | None = None) -> None:
    """Fit and score every (fold, method) not yet in ``out``; append one JSON line per pair.

    ``make_est(method, seed)`` builds the estimator; ``max_bins_of(method)`` is recorded.
    ``X`` may be an array or a DataFrame; ``extra`` fields go into every record.
    """
    take = (lambda idx: X.iloc[idx]) if hasattr(X, "iloc") else (lambda idx: X[idx])  # noqa: E731
    done = {(r["fold"], r["method"]) for r in read_jsonl(out)}
    for f in todo:
        tr, te = folds[f]
        for m in methods:
            if (f, m) in done:
                continue
            est = make_est(m, f)
            with Timer() as tf:
                est.fit(take(tr), y[tr])
            with Timer() as tp:
                pred = est.predict(take(te))
            rec = dict(benchmark=benchmark, fold=f, method=m, rmse=rmse(pred, y[te]), fit_s=tf.s, predict_s=tp.s,
                       n_train=len(tr), n_test=len(te), n_trees=1 if m == "DT" else n_trees,
                       min_samples_leaf=min_samples_leaf, max_bins=max_bins_of(m), **(extra or {}), **machine())
            append_jsonl(out, rec)
            print(f"fold {f} {m:<12} RMSE {fmt.format(rec['rmse']):>10}  fit {tf.s:7.1f}s  predict {tp.s:5.2f}s",
                  flush=True)
        print(cv_table(read_jsonl(out), methods, fmt=fmt), flush=True)
