"""Observation distributions for models with tree functions that NumPyro does not name.

:class:`BernoulliProbit` is a Bernoulli variable whose success probability is ``Phi(eta)``: the
probit link, written with its linear predictor as the parameter, so that the tree moves see the
function in it and take the probit path (latent normals, Albert & Chib 1993:
:mod:`bayestrees.inference.treefn.kernel`).  ``dist.Bernoulli(probs=ndtr(eta))`` is the same
likelihood, sampled on the general path.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.scipy.special import log_ndtr, ndtr
from numpyro.distributions import constraints
from numpyro.distributions.distribution import Distribution
from numpyro.distributions.util import promote_shapes, validate_sample

__all__ = ["BernoulliProbit"]


class BernoulliProbit(Distribution):
    """``y ~ Bernoulli(Phi(eta))``: a binary outcome with a probit link.

    Parameters
    ----------
    eta : array
        The linear predictor (``Phi(eta)`` is the probability of a 1).

    Examples
    --------
    >>> import numpyro
    >>> def model(X, y=None):
    ...     f = bt.bart_function("f", X, m=20)
    ...     numpyro.sample("y", bt.distributions.BernoulliProbit(f), obs=y)
    """

    arg_constraints = {"eta": constraints.real}
    support = constraints.boolean
    has_enumerate_support = True

    def __init__(self, eta, *, validate_args=None):
        (self.eta,) = promote_shapes(eta)
        super().__init__(batch_shape=jnp.shape(self.eta), validate_args=validate_args)

    def sample(self, key, sample_shape=()):
        shape = sample_shape + self.batch_shape
        return (jax.random.normal(key, shape) < self.eta).astype(jnp.int32)

    @validate_sample
    def log_prob(self, value):
        return jnp.where(value > 0.5, log_ndtr(self.eta), log_ndtr(-self.eta))

    @property
    def probs(self):
        return ndtr(self.eta)

    @property
    def mean(self):
        return self.probs

    @property
    def variance(self):
        p = self.probs
        return p * (1.0 - p)

    def enumerate_support(self, expand=True):
        values = jnp.arange(2).reshape((-1,) + (1,) * len(self.batch_shape))
        return jnp.broadcast_to(values, values.shape[:1] + self.batch_shape) if expand else values
