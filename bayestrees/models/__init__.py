"""Model context and tree random variables (one module per family)."""
from .base import Data, DataContainer, Model, TreeRV, sample, sample_posterior_predictive, set_data

__all__ = ["Model", "Data", "DataContainer", "TreeRV", "set_data", "sample", "sample_posterior_predictive"]
