"""Independent plain-NumPy reference of the safe-Bayesian random forest.

This script re-implements, from a written specification only, the safe-Bayesian
random forest of Quadrianto & Ghahramani (TPAMI 2015). It deliberately does NOT
import (and was not written by reading) the ``bayestrees`` library: its sole
purpose is to cross-check the library's accuracy figures against the
specification itself.

Specification implemented
-------------------------
* Features -> [0, 1] by the probability integral transform with the training
  data's empirical CDF, F(v) = #(train values <= v) / N_train; the test rows go
  through the same training ECDF.
* K trees drawn from a data-independent prior: a depth-first (pre-order) code
  string in which each node is internal with probability lam = 0.475,
  independently, stopping when #leaves == #internal + 1; with ``--root-splits``
  (the default) the string starts with 1 at the root (the paper's Figure 1:
  "Codes are generated in depth-first order starting from 1 at the root
  node"), i.e. the root is internal without a draw and the rest of the string
  follows the rule; ``--no-root-splits`` draws the root like any node. Each internal node
  gets a variable uniform over the D features and a cut c ~ U(0, 1); a row goes
  left iff F(x) <= c. Trees with more than ``max_internal`` (2000) internal
  nodes are resampled whole. Generator: numpy.random.default_rng(seed), seed
  12345; the same K trees (for a given D) serve every split of a data set.
  Order of random draws (a detail the specification leaves open): for each
  tree, first the whole code string (one uniform per node), then for each
  internal node in pre-order its variable (rng.integers) and its cut
  (rng.random).
* Tree weight = Dirichlet-multinomial marginal likelihood (alpha = 1) of the
  training labels, summed over leaves (empty leaves contribute 0).
* Forest: p(y=c|x) = sum_k w_k^beta p_k(c|x) / sum_k w_k^beta with leaf
  predictive (n_c + alpha) / (n + C alpha); beta = m / N_train (S-Bayes),
  beta = 1 (BMA), or the single tree of largest log w (best tree; first index
  on ties). Normalisation in log space.
* Protocol: 80/20 stratified split, random_state r = 0..repeats-1.

Data: ``--data-dir``, else the environment variable ``BAYESTREES_DATA``, else
``../shared/data`` relative to the repository root (this file's ``../..``).

Usage::

    nice -n 10 .venv/bin/python benchmarks/safebayes_reference.py --repeats 5 --trees 1000 \
        [--no-root-splits] [--out benchmarks/results/safebayes_reference.txt]
"""
import argparse
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.special import gammaln
from sklearn.datasets import load_iris, load_wine
from sklearn.model_selection import train_test_split

DATA = os.environ.get("BAYESTREES_DATA",
                      str(Path(__file__).resolve().parents[1].parent / "shared" / "data"))
ALL_SETS = ["australian", "breast-cancer", "diabetes", "heart", "ionosphere",
            "iris", "wine"]
M_GRID = [1, 2, 5, 10, 20, 50, 100, 200]


# ----------------------------------------------------------------- data
def load(name):
    if name == "australian":
        df = pd.read_csv(f"{DATA}/australian.dat", sep=r",\s*", engine="python")
        X, y = df.iloc[:, :-1].values, df.iloc[:, -1].values
    elif name == "diabetes":
        df = pd.read_csv(f"{DATA}/pima_diabetes.csv", header=None)
        X, y = df.iloc[:, :-1].values, df.iloc[:, -1].values
    elif name == "ionosphere":
        df = pd.read_csv(f"{DATA}/ionosphere.csv", header=None)
        X, y = df.iloc[:, :-1].values, df.iloc[:, -1].values
    elif name == "heart":
        df = pd.read_csv(f"{DATA}/statlog_heart.dat", sep=r"\s+")
        X, y = df.iloc[:, :-1].values, df.iloc[:, -1].values
    elif name == "breast-cancer":
        df = pd.read_csv(f"{DATA}/breast_cancer_wisconsin.data", header=None,
                         na_values="?").dropna()
        X, y = df.iloc[:, 1:10].values, df.iloc[:, 10].values
    elif name == "iris":
        X, y = load_iris(return_X_y=True)
    elif name == "wine":
        X, y = load_wine(return_X_y=True)
    else:
        raise ValueError(name)
    X = np.asarray(X, dtype=np.float64)
    _, y = np.unique(np.asarray(y), return_inverse=True)
    return X, y.astype(np.int64)


def ecdf_transform(Xtr, Xte):
    """F(v) = #(train <= v)/N_train, per feature, fitted on the training rows."""
    n = Xtr.shape[0]
    Ftr = np.empty_like(Xtr)
    Fte = np.empty_like(Xte)
    for j in range(Xtr.shape[1]):
        s = np.sort(Xtr[:, j])
        Ftr[:, j] = np.searchsorted(s, Xtr[:, j], side="right") / n
        Fte[:, j] = np.searchsorted(s, Xte[:, j], side="right") / n
    return Ftr, Fte


# ----------------------------------------------------------------- trees
def sample_code(rng, lam, max_internal, root_splits=True):
    """Pre-order code string (True = internal), resampled if too large.

    With ``root_splits`` the first symbol is 1 (internal) without a draw.
    """
    while True:
        code = []
        n_int = n_leaf = 0
        if root_splits:
            code.append(True)
            n_int = 1
        while n_leaf != n_int + 1:
            internal = rng.random() < lam
            code.append(internal)
            if internal:
                n_int += 1
                if n_int > max_internal:
                    break
            else:
                n_leaf += 1
        if n_leaf == n_int + 1:
            return code


def sample_forest(K, D, seed=12345, lam=0.475, max_internal=2000, root_splits=True):
    """Return concatenated node arrays (var, cut, left, right, is_leaf, roots).

    Node ids are global across the forest; leaves have left = right = -1.
    """
    rng = np.random.default_rng(seed)
    var, cut, left, right, leaf, roots = [], [], [], [], [], []
    off = 0
    for _ in range(K):
        code = sample_code(rng, lam, max_internal, root_splits)
        n = len(code)
        v = np.full(n, -1, np.int64)
        c = np.zeros(n)
        for i in range(n):
            if code[i]:
                v[i] = rng.integers(D)
                c[i] = rng.random()
        l = np.full(n, -1, np.int64)
        r = np.full(n, -1, np.int64)
        # decode pre-order string: stack of internal nodes awaiting children
        stack = []
        for i in range(n):
            if stack:
                p = stack[-1]
                if l[p] < 0:
                    l[p] = i
                else:
                    r[p] = i
                    stack.pop()
            if code[i]:
                stack.append(i)
        assert not stack
        var.append(v); cut.append(c)
        left.append(np.where(l >= 0, l + off, -1))
        right.append(np.where(r >= 0, r + off, -1))
        leaf.append(~np.asarray(code, bool))
        roots.append(off)
        off += n
    return dict(var=np.concatenate(var), cut=np.concatenate(cut),
                left=np.concatenate(left), right=np.concatenate(right),
                leaf=np.concatenate(leaf), roots=np.asarray(roots),
                n_nodes=off)


def route(forest, F):
    """Leaf id (global) reached by each row in each tree: shape (K, n)."""
    K = len(forest["roots"])
    n = F.shape[0]
    node = np.repeat(forest["roots"][:, None], n, axis=1)
    row = np.broadcast_to(np.arange(n), (K, n))
    active = ~forest["leaf"][node]
    idx = np.nonzero(active.ravel())[0]
    flat = node.ravel()
    rowf = row.ravel()
    while idx.size:
        nd = flat[idx]
        go_left = F[rowf[idx], forest["var"][nd]] <= forest["cut"][nd]
        nd = np.where(go_left, forest["left"][nd], forest["right"][nd])
        flat[idx] = nd
        idx = idx[~forest["leaf"][nd]]
    return flat.reshape(K, n)


# ----------------------------------------------------------------- model
def fit_predict(forest, Ftr, ytr, Fte, C, alpha=1.0):
    K = len(forest["roots"])
    Ltr = route(forest, Ftr)                     # (K, ntr)
    Lte = route(forest, Fte)                     # (K, nte)
    counts = np.zeros((forest["n_nodes"], C))
    np.add.at(counts, (Ltr.ravel(), np.tile(ytr, K)), 1.0)
    ntot = counts.sum(1)
    leaf_ll = (gammaln(counts + alpha).sum(1) - gammaln(ntot + C * alpha)
               - C * gammaln(alpha) + gammaln(C * alpha))
    leaf_ll[ntot == 0] = 0.0
    leaf_ll[~forest["leaf"]] = 0.0
    tree_id = np.repeat(np.arange(K), np.diff(np.append(forest["roots"],
                                                        forest["n_nodes"])))
    logw = np.bincount(tree_id, weights=leaf_ll, minlength=K)
    pred = (counts + alpha) / (ntot + C * alpha)[:, None]
    P = pred[Lte]                                # (K, nte, C)
    return logw, P


def forest_proba(logw, P, beta, mask=None):
    a = beta * logw
    if mask is not None:
        a = np.where(mask, a, -np.inf)
    a = a - a.max()
    w = np.exp(a)
    w /= w.sum()
    return np.einsum("k,knc->nc", w, P)


# ----------------------------------------------------------------- main
def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--trees", type=int, default=1000)
    ap.add_argument("--datasets", nargs="+", default=ALL_SETS)
    ap.add_argument("--seed", type=int, default=12345)
    ap.add_argument("--lam", type=float, default=0.475)
    ap.add_argument("--m", type=float, default=5.0)
    ap.add_argument("--root-splits", action=argparse.BooleanOptionalAction, default=True,
                    help="the code string starts with 1 at the root (default)")
    ap.add_argument("--data-dir", default=None,
                    help="folder of the data files (default: $BAYESTREES_DATA or ../shared/data "
                         "relative to the repository)")
    ap.add_argument("--out", default=None, help="also write the table here")
    args = ap.parse_args()
    global DATA
    if args.data_dir is not None:
        DATA = args.data_dir

    t0 = time.time()
    lines = []

    def emit(s=""):
        print(s, flush=True)
        lines.append(s)

    emit(f"Independent NumPy reference of the safe-Bayesian RF "
         f"(K={args.trees}, lam={args.lam}, root_splits={args.root_splits}, seed={args.seed}, "
         f"repeats={args.repeats}, alpha=1)")
    main_rows, curve_rows, stump_rows, info_rows = [], [], [], []
    for name in args.datasets:
        ts = time.time()
        X, y = load(name)
        N, D = X.shape
        C = int(y.max()) + 1
        forest = sample_forest(args.trees, D, seed=args.seed, lam=args.lam, root_splits=args.root_splits)
        root_leaf = forest["leaf"][forest["roots"]]
        keep = ~root_leaf
        acc = {k: [] for k in ["sb", "bma", "best", "sb_nostump", "prior"]}
        curve = {m: [] for m in M_GRID}
        ess = []
        for r in range(args.repeats):
            Xtr, Xte, ytr, yte = train_test_split(
                X, y, test_size=0.2, stratify=y, random_state=r)
            Ftr, Fte = ecdf_transform(Xtr, Xte)
            logw, P = fit_predict(forest, Ftr, ytr, Fte, C)
            ntr = len(ytr)
            a = lambda p: 100.0 * np.mean(p.argmax(1) == yte)
            acc["sb"].append(a(forest_proba(logw, P, args.m / ntr)))
            acc["bma"].append(a(forest_proba(logw, P, 1.0)))
            acc["best"].append(a(P[int(np.argmax(logw))]))
            acc["sb_nostump"].append(
                a(forest_proba(logw, P, args.m / ntr, mask=keep)))
            acc["prior"].append(100.0 * np.mean(
                yte == np.bincount(ytr, minlength=C).argmax()))
            for m in M_GRID:
                curve[m].append(a(forest_proba(logw, P, m / ntr)))
            # share of S-Bayes weight on root-leaf trees, effective #trees
            b = args.m / ntr * logw
            w = np.exp(b - b.max()); w /= w.sum()
            ess.append((w[root_leaf].sum(), 1.0 / np.sum(w ** 2)))
        ms = lambda v: f"{np.mean(v):6.2f} ± {np.std(v, ddof=1) if len(v) > 1 else 0.0:5.2f}"
        main_rows.append(f"{name:14s} {N:4d}x{D:<3d} {C:2d} | {ms(acc['sb'])} | "
                         f"{ms(acc['bma'])} | {ms(acc['best'])} | "
                         f"{ms(acc['prior'])}")
        curve_rows.append(f"{name:14s} " + " ".join(
            f"{np.mean(curve[m]):6.2f}" for m in M_GRID))
        stump_rows.append(f"{name:14s} {root_leaf.sum():5d} | "
                          f"{ms(acc['sb'])} | {ms(acc['sb_nostump'])} | "
                          f"{np.mean([e[0] for e in ess]):6.3f} | "
                          f"{np.mean([e[1] for e in ess]):8.1f}")
        info_rows.append(f"{name}: {time.time() - ts:.1f}s, "
                         f"{forest['n_nodes']} nodes, "
                         f"max internal/tree "
                         f"{int(np.max(np.diff(np.append(forest['roots'], forest['n_nodes']))) // 2)}")
        print(f"  done {name} in {time.time() - ts:.1f}s", flush=True)

    sd = "sd = sample std (ddof=1) over splits"
    emit()
    emit(f"Accuracy % (mean ± sd over {args.repeats} stratified 80/20 splits; {sd})")
    emit(f"{'dataset':14s} {'NxD':8s} {'C':>2s} | {'S-Bayes m=' + format(args.m, 'g'):15s} | "
         f"{'BMA':15s} | {'best tree':15s} | {'majority class':15s}")
    emit("-" * 96)
    for s in main_rows:
        emit(s)
    emit()
    emit("S-Bayes operating curve: mean test accuracy % vs m (beta = m/N_train)")
    emit(f"{'dataset':14s} " + " ".join(f"{'m=' + str(m):>6s}" for m in M_GRID))
    emit("-" * (15 + 7 * len(M_GRID)))
    for s in curve_rows:
        emit(s)
    emit()
    emit("Second experiment: S-Bayes m=%g with root-leaf trees excluded" % args.m)
    emit(f"{'dataset':14s} {'#stump':>5s} | {'all trees':15s} | {'no root-leaf':15s} | "
         f"{'w(stumps)':>9s}| {'ESS(trees)':>8s}")
    emit("-" * 80)
    for s in stump_rows:
        emit(s)
    emit("(w(stumps) = mean share of S-Bayes weight on root-leaf trees; "
         "ESS = 1/sum w^2 of normalised S-Bayes weights, all trees)")
    emit()
    for s in info_rows:
        emit(s)
    emit(f"total run time: {time.time() - t0:.1f}s")
    if args.out:
        with open(args.out, "w") as fh:
            fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
