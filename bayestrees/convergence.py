"""Convergence of MCMC fits: one table and one warning for every MCMC family.

After an MCMC fit (Bayesian CART, BET, and every family whose draws are Markov chains), the
summary variables (every posterior variable with one value per draw: ``n_leaves``, ``depth``,
``sigma``, BET's ``n_trees``, ...; and ``lp`` of ``sample_stats``) are checked as PyMC checks
its fits (Vehtari et al. 2021, rank-normalised split R-hat and bulk ESS):

* R-hat above ``rhat_max`` (1.01), with at least two chains: the chains disagree;
* bulk ESS below ``ess_per_chain`` (100) times the number of chains: too few effective draws to
  trust the R-hat or a posterior mean;
* a variable that never moved within some chain, while it differs between chains or moves in
  others: that chain is stuck (reported as such, not as the huge R-hat it would give).  A
  variable constant in every chain at one value is reported ``constant`` and is not a problem.

:func:`check_convergence` returns a :class:`ConvergenceReport` (the table, the problems, one
message); :func:`warn_convergence` issues one :class:`ConvergenceWarning` naming the variables,
the figures and what to do.  The estimators keep the report as ``convergence_``; the model
context and ``bayestrees summary`` say the same.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

__all__ = ["ConvergenceWarning", "ConvergenceReport", "check_convergence", "convergence_table", "warn_convergence", "RHAT_MAX",
           "ESS_PER_CHAIN"]

#: R-hat above this is reported (PyMC's and Vehtari et al.'s threshold)
RHAT_MAX = 1.01
#: bulk ESS below this many per chain is reported
ESS_PER_CHAIN = 100


class ConvergenceWarning(UserWarning):
    """MCMC chains that disagree, are stuck, or hold too few effective draws."""


@dataclass
class ConvergenceReport:
    """The convergence table of one fit.

    Attributes
    ----------
    table : dict
        ``{variable: {"rhat": float, "ess_bulk": float, "status": str}}``; ``status`` is ``"ok"``,
        ``"rhat"``, ``"ess"``, ``"rhat, ess"``, ``"stuck"`` or ``"constant"``; ``rhat`` is NaN for
        one chain and for stuck or constant variables.
    chains, draws : int
    problems : list of str
        One line per problem (empty when the chains look converged).
    """

    table: dict
    chains: int
    draws: int
    problems: list = field(default_factory=list)
    family: str = ""

    @property
    def ok(self) -> bool:
        """Whether no problem was found."""
        return not self.problems

    def message(self) -> str:
        """What was found and what to do, in one paragraph (empty when :attr:`ok`)."""
        if self.ok:
            return ""
        who = f"{self.family} " if self.family else ""
        better = {"bart": "BART: more kept steps (draws, or thin with the same draws) rather than more tune; the "
                          "trees' slow mode does not end with burn-in, its autocorrelation time is hundreds to "
                          "thousands of steps at n = 1,000 and grows with n (docs/lab-notes/bart.md, Mixing)",
                  "bet": "BET: more sweeps, and chains=4 or more to see whether they settle on the same trees",
                  "model": "a model with tree functions: more kept steps (the tree moves' slow mode does not end "
                           "with burn-in and grows with n), a non-centred form of the sites NUTS "
                           "updates, and fewer trees or a smaller leaf_sd where a tree function and another "
                           "site explain the same thing (an intercept)",
                  "bcf": "a Bayesian causal forest: more draws (the effect's scale moves slowly with its trees), "
                         "and a check that both arms overlap in the propensity (pihat far from 0 and 1)"}.get(
            self.family, "Bayesian CART: the default scheme='mixed' with more local_moves, more particles, or "
                         "a longer ladder of temperatures=...")
        advice = ("The draws are not yet the posterior: run longer chains (draws, tune) or a kernel that "
                  f"mixes better ({better}), and keep several chains to check.")
        return (f"{who}MCMC ({self.chains} chains x {self.draws} draws) has not converged: "
                + "; ".join(self.problems) + ". " + advice)

    def to_dataframe(self):
        """The table as a pandas DataFrame (one row per variable)."""
        import pandas as pd

        return pd.DataFrame.from_dict(self.table, orient="index")

    def __str__(self) -> str:
        lines = [f"{'variable':<14} {'R-hat':>7} {'ESS bulk':>9}  status"]
        for v, row in self.table.items():
            r = "-" if not np.isfinite(row["rhat"]) else f"{row['rhat']:.3f}"
            lines.append(f"{v:<14} {r:>7} {row['ess_bulk']:9.0f}  {row['status']}")
        if self.problems:
            lines.append(self.message())
        return "\n".join(lines)


def _summary_arrays(idata) -> dict:
    """``{name: (chains, draws) float array}`` of the scalar posterior variables and ``lp``."""
    out = {}
    post = idata.posterior
    for v in post.data_vars:
        a = np.asarray(post[v])
        if a.ndim == 2 and np.issubdtype(a.dtype, np.number):
            out[v] = a.astype(float)
    if hasattr(idata, "sample_stats") and "lp" in idata.sample_stats:
        a = np.asarray(idata.sample_stats["lp"])
        if a.ndim == 2:
            out["lp"] = a.astype(float)
    return out


def check_convergence(idata, *, rhat_max: float = RHAT_MAX, ess_per_chain: float = ESS_PER_CHAIN,
                      var_names=None) -> ConvergenceReport:
    """The convergence table of an MCMC fit's InferenceData.

    Parameters
    ----------
    idata : arviz.InferenceData
        With a ``posterior`` group (dims ``chain, draw``) and optionally ``sample_stats.lp``.
    rhat_max : float
        R-hat above this is a problem (with at least two chains).
    ess_per_chain : float
        Bulk ESS below ``ess_per_chain * chains`` is a problem.
    var_names : sequence of str, optional
        The variables to check (default every scalar posterior variable and ``lp``).

    Returns
    -------
    ConvergenceReport
    """
    family = str(getattr(idata.posterior, "attrs", {}).get("family", ""))
    return convergence_table(_summary_arrays(idata), family, rhat_max=rhat_max, ess_per_chain=ess_per_chain,
                             var_names=var_names)


def convergence_table(arrays: dict, family: str = "", *, rhat_max: float = RHAT_MAX,
                      ess_per_chain: float = ESS_PER_CHAIN, var_names=None) -> ConvergenceReport:
    """The convergence table of scalar draws ``{name: (chains, draws) array}`` (what
    :func:`check_convergence` reads from an InferenceData), for the family named ``family``."""
    import arviz as az

    arrays = {v: np.asarray(a).astype(float) for v, a in arrays.items()}
    if var_names is not None:
        missing = sorted(set(var_names) - set(arrays))
        if missing:
            raise ValueError(f"no scalar variable(s) {missing} in the InferenceData; have {sorted(arrays)}")
        arrays = {v: arrays[v] for v in var_names}
    chains, draws = next(iter(arrays.values())).shape if arrays else (0, 0)
    table, problems = {}, []
    for v, a in arrays.items():
        moved = np.ptp(a, axis=1) > 0                                   # (chains,)
        if not moved.any() and np.all(a == a[0, 0]):
            table[v] = dict(rhat=float("nan"), ess_bulk=float(a.size), status="constant")
            continue
        if not moved.all():
            idx = np.flatnonzero(~moved).tolist()
            table[v] = dict(rhat=float("nan"), ess_bulk=0.0, status="stuck")
            problems.append(f"{v} never moved in chain{'s' if len(idx) > 1 else ''} {idx}")
            continue
        ds = az.convert_to_dataset({v: a})
        rhat = float(az.rhat(ds)[v]) if chains > 1 else float("nan")
        ess = float(az.ess(ds, method="bulk")[v])
        bad = []
        if chains > 1 and not rhat <= rhat_max:
            bad.append("rhat")
            problems.append(f"R-hat of {v} {rhat:.3f} (> {rhat_max})")
        if not ess >= ess_per_chain * chains:
            bad.append("ess")
            problems.append(f"bulk ESS of {v} {ess:.0f} (< {ess_per_chain:g} per chain)")
        table[v] = dict(rhat=rhat, ess_bulk=ess, status=", ".join(bad) or "ok")
    return ConvergenceReport(table, int(chains), int(draws), problems, family)


def warn_convergence(report: ConvergenceReport, stacklevel: int = 2) -> None:
    """Issue one :class:`ConvergenceWarning` with the report's message, when it found a problem."""
    if not report.ok:
        warnings.warn(report.message(), ConvergenceWarning, stacklevel=stacklevel + 1)
