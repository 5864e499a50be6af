"""bayestrees: Bayesian inference over decision trees in JAX."""
import os as _os
import warnings as _warnings

_warnings.filterwarnings("ignore", category=FutureWarning, module="arviz")

from . import data, tree, leaves, convert  # noqa: E402
from .models import Data, Model, set_data, sample, sample_posterior_predictive  # noqa: E402

__version__ = "0.1.0"

__all__ = ["data", "tree", "leaves", "convert", "Model", "Data", "set_data", "sample",
           "sample_posterior_predictive", "__version__"]
