"""Paper reproduction for BCART-PCFG (Sullivan et al.): accuracy and tree sizes.

Iris, Caesarian, Haberman (10 bins), Vertebral (5 bins): 10-fold stratified CV
x 5 repeats; MAP tree and exact posterior predictive against scikit-learn's CART
and random forest; tree sizes in total nodes.  Features are bucketed as in the
paper, into equal-width buckets over the training fold's range
(``--binning quantile`` uses the library's quantile Binner instead).  Hidden XOR (20 binary features,
label = XOR of the first four): trained on n rows with the row programme and
tested on 2,000 fresh rows (exact posterior predictive on the first 128), 5 repeats (the data are synthetic, so fresh test
rows replace CV).

Usage::

    python benchmarks/pcfg_paper.py [--repeats 5] [--xor-n 128] [--only iris,xor] [--data-dir DIR]
                                    [--dtype float64]

The public data files (Caesarian, Haberman, Vertebral) are read from
``--data-dir``, default ``$BAYESTREES_DATA`` if set, else ``../shared/data``
relative to the repository root (found from this file's location).
Prints a table and writes benchmarks/results/pcfg_paper.json (or ``--out``).
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

import bayestrees as bt

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "benchmarks" / "results"


def data_dir() -> Path:
    """The folder of the public data files.

    Returns
    -------
    Path
        ``$BAYESTREES_DATA`` if set, else ``../shared/data`` relative to the
        repository root (from this file's location, not the working directory).
    """
    return Path(os.environ.get("BAYESTREES_DATA", REPO.parent / "shared" / "data"))


DATA = data_dir()   # set from --data-dir in main(); pcfg_hyper.py sets it too

PAPER = {"iris": (0.967, 7.0), "caesarian": (0.562, 3.2), "haberman": (0.719, 5.6),
         "vertebral": (0.716, 15.6), "xor": (1.0, 31.0)}


def load(name):
    if name == "iris":
        from sklearn.datasets import load_iris

        X, y = load_iris(return_X_y=True)
        return X, y, 10
    if name == "haberman":
        a = np.loadtxt(DATA / "haberman.csv", delimiter=",")
        return a[:, :3], a[:, 3].astype(int), 10
    if name == "vertebral":
        a = np.loadtxt(DATA / "vertebral_column_2c.dat")
        return a[:, :6], a[:, 6].astype(int), 5
    if name == "caesarian":
        lines = (DATA / "caesarian.arff").read_text().splitlines()
        start = next(i for i, ln in enumerate(lines) if ln.strip().lower() == "@data") + 1
        rows = [[float(v) for v in ln.split(",")] for ln in lines[start:] if ln.strip() and not ln.startswith("%")]
        a = np.array(rows)
        return a[:, :5], a[:, 5].astype(int), 10
    raise KeyError(name)


def equal_width(Xtr, Xte, bins):
    """The paper's bucketing: ``bins`` equal-width buckets per feature from the training fold's range.

    Features with at most ``bins`` distinct values are left as they are.
    Returns integer-valued float arrays (the Binner then bins them exactly).
    """
    out_tr, out_te = Xtr.copy(), Xte.copy()
    for j in range(Xtr.shape[1]):
        if np.unique(Xtr[:, j]).shape[0] <= bins:
            continue
        lo, hi = Xtr[:, j].min(), Xtr[:, j].max()
        out_tr[:, j] = np.clip(np.floor((Xtr[:, j] - lo) / (hi - lo) * bins), 0, bins - 1)
        out_te[:, j] = np.clip(np.floor((Xte[:, j] - lo) / (hi - lo) * bins), 0, bins - 1)
    return out_tr, out_te


def cv_real(name, repeats, binning="equal-width", dtype="float32"):
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.model_selection import StratifiedKFold
    from sklearn.tree import DecisionTreeClassifier

    X, y, bins = load(name)
    res = {k: [] for k in ("map", "posterior", "cart", "rf", "map_nodes", "cart_nodes", "fit_s")}
    for r in range(repeats):
        skf = StratifiedKFold(10, shuffle=True, random_state=r)
        for tr, te in skf.split(X, y):
            if binning == "equal-width":
                Btr, Bte = equal_width(X[tr], X[te], bins)
            else:                       # the library's quantile Binner
                Btr, Bte = X[tr], X[te]
            t0 = time.perf_counter()
            clf = bt.PCFGTreeClassifier(max_bins=bins, draws=10, random_state=r, dtype=dtype).fit(Btr, y[tr])
            res["fit_s"].append(time.perf_counter() - t0)
            res["map"].append(clf.score(Bte, y[te]))
            clf.set_params(predict_with="posterior")
            res["posterior"].append(clf.score(Bte, y[te]))
            res["map_nodes"].append(int(clf.map_tree_.n_nodes))
            cart = DecisionTreeClassifier(random_state=r).fit(X[tr], y[tr])
            res["cart"].append(cart.score(X[te], y[te]))
            res["cart_nodes"].append(int(cart.tree_.node_count))
            rf = RandomForestClassifier(100, random_state=r, n_jobs=1).fit(X[tr], y[tr])
            res["rf"].append(rf.score(X[te], y[te]))
    return {k: float(np.mean(v)) for k, v in res.items()} | {"n": int(len(y)), "bins": bins, "folds": 10,
                                                            "repeats": repeats, "binning": binning, "dtype": dtype}


def xor_data(n, rng):
    X = rng.integers(0, 2, size=(n, 20)).astype(float)
    return X, (X[:, :4].sum(1) % 2).astype(int)


def run_xor(n, repeats, dtype="float32"):
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.tree import DecisionTreeClassifier

    res = {k: [] for k in ("map", "posterior", "cart", "rf", "map_nodes", "cart_nodes", "fit_s", "symbols")}
    for r in range(repeats):
        rng = np.random.default_rng(100 + r)
        X, y = xor_data(n, rng)
        Xt, yt = xor_data(2000, rng)
        t0 = time.perf_counter()
        clf = bt.PCFGTreeClassifier(method="row", draws=10, random_state=r, dtype=dtype).fit(X, y)
        res["fit_s"].append(time.perf_counter() - t0)
        res["symbols"].append(clf.posterior_.structure.n_symbols)
        res["map"].append(clf.score(Xt, yt))
        clf.set_params(predict_with="posterior")
        res["posterior"].append(clf.score(Xt[:128], yt[:128]))   # exact predictive: first 128 test rows
        res["map_nodes"].append(int(clf.map_tree_.n_nodes))
        cart = DecisionTreeClassifier(random_state=r).fit(X, y)
        res["cart"].append(cart.score(Xt, yt))
        res["cart_nodes"].append(int(cart.tree_.node_count))
        rf = RandomForestClassifier(100, random_state=r, n_jobs=1).fit(X, y)
        res["rf"].append(rf.score(Xt, yt))
    return {k: float(np.mean(v)) for k, v in res.items()} | {"n": n, "bins": 2, "repeats": repeats,
                                                            "test_rows": 2000, "dtype": dtype}


def main():
    global DATA
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--xor-n", type=int, default=128)
    ap.add_argument("--only", default="iris,caesarian,haberman,vertebral,xor")
    ap.add_argument("--out", default="pcfg_paper.json", help="file name under benchmarks/results/")
    ap.add_argument("--binning", default="equal-width", choices=["equal-width", "quantile"],
                    help="equal-width buckets as in the paper (default) or the library's quantile Binner")
    ap.add_argument("--data-dir", default=str(DATA),
                    help="folder of the public data files (default: $BAYESTREES_DATA, else ../shared/data "
                         "relative to the repository root)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"],
                    help="precision of the PCFG programme (float64 turns on jax_enable_x64 in this process)")
    args = ap.parse_args()
    DATA = Path(args.data_dir)
    if args.dtype == "float64":
        import jax

        jax.config.update("jax_enable_x64", True)
    rows = {}
    for name in args.only.split(","):
        t0 = time.perf_counter()
        rows[name] = (run_xor(args.xor_n, args.repeats, args.dtype) if name == "xor"
                      else cv_real(name, args.repeats, args.binning, args.dtype))
        rows[name]["wall_s"] = time.perf_counter() - t0
        rows[name]["paper_acc"], rows[name]["paper_nodes"] = PAPER[name]
        print(name, json.dumps(rows[name]), flush=True)
    hdr = f"{'data':<10} {'n':>4} {'bins':>4} {'MAP':>6} {'post':>6} {'paper':>6} {'CART':>6} {'RF':>6} " \
          f"{'MAPnodes':>8} {'paper':>6} {'CARTnodes':>9} {'ratio':>6}"
    print(hdr)
    for name, r in rows.items():
        print(f"{name:<10} {r['n']:>4} {r['bins']:>4} {r['map']:>6.3f} {r['posterior']:>6.3f} {r['paper_acc']:>6.3f} "
              f"{r['cart']:>6.3f} {r['rf']:>6.3f} {r['map_nodes']:>8.1f} {r['paper_nodes']:>6.1f} "
              f"{r['cart_nodes']:>9.1f} {r['cart_nodes'] / r['map_nodes']:>6.1f}")
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / args.out
    old = json.loads(path.read_text()) if path.exists() else {}
    old.update(rows)
    path.write_text(json.dumps(old, indent=1))


if __name__ == "__main__":
    main()
