"""The leaf-value priors of tree functions: ``"normal"`` and ``"loggamma"``.

``"normal"``: every leaf value ``theta ~ N(0, leaf_sd^2)``.

``"loggamma"``: ``theta = log(lambda)``, ``lambda ~ Gamma(shape c, rate d)``, with ``c`` and ``d`` set
from ``leaf_sd`` so that ``theta`` has mean 0 and sd ``leaf_sd`` (``trigamma(c) = leaf_sd^2``, ``d =
exp(digamma(c))``): the density ``log p(theta) = c theta - d exp(theta) + c log d - lgamma(c)``.  It
is the leaf prior of log-linear BART (Murray 2021, "Log-linear Bayesian additive regression trees
for multinomial logistic and count regression models", JASA 116), conjugate to every likelihood of
the form ``sum_i y_i f_i - B_i exp(f_i)`` in the function ``f`` (Poisson counts with a log link and
exposures ``B_i``, an exponential or gamma waiting time with a log rate): given the other trees, a
leaf's ``lambda`` has the posterior ``Gamma(c + sum y_i, d + sum u_i)``, ``u_i = B_i exp(f_-j,i)``, and
its marginal likelihood is closed (:func:`bayestrees.leaves.gamma_poisson_log_marginal`), so the tree moves integrate the
leaf values out exactly as the BART family's do for a Normal likelihood.  Its left tail is longer
than the Normal's of the same sd (skewness ``psi''(c) / psi'(c)^1.5``, -0.2 for ``leaf_sd = 0.2``).
"""
from __future__ import annotations

import math

from ...leaves import loggamma_log_density, loggamma_params  # noqa: F401 (loggamma_params: the module's name for it)

LEAF_PRIORS = ("normal", "loggamma")


def log_density(kind: str, theta, leaf_sd: float):
    """The leaf prior's log density at ``theta`` (elementwise)."""
    if kind == "normal":
        sd = float(leaf_sd)
        return -0.5 * (theta / sd) ** 2 - math.log(sd) - 0.5 * math.log(2 * math.pi)
    return loggamma_log_density(theta, leaf_sd)


def check_leaf_prior(kind) -> str:
    if kind not in LEAF_PRIORS:
        raise ValueError(f"leaf_prior must be one of {LEAF_PRIORS}, got {kind!r}")
    return str(kind)

