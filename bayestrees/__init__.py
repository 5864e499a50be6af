"""bayestrees: Bayesian inference over decision trees in JAX."""
# a persistent JAX compilation cache, on by default unless JAX has one (bayestrees/compile_cache.py)
from . import compile_cache
from .compile_cache import compilation_cache_dir, set_compilation_cache
compile_cache.setup_default()
from . import data
from . import tree
from . import leaves
from . import convert
from . import priors  # noqa: E402
from . import families  # noqa: E402  (the registry of families: bt.families.REGISTRY)
from .diagnostics import compare, loo  # noqa: E402
from .models import Data, Model, set_data, sample, sample_posterior_predictive  # noqa: E402
from .estimators.base import load  # noqa: E402

# --- family: forests ---
from .estimators.forest import (  # noqa: E402
    BayesianForestClassifier, BayesianForestRegressor, EmpiricalBayesianForestClassifier,
    EmpiricalBayesianForestRegressor, SubSampleForestClassifier, SubSampleForestRegressor)
from .models.forest import BayesianForest  # noqa: E402
from . import posterior  # noqa: E402
from . import plots  # noqa: E402  (matplotlib is imported only when a plot is drawn)
# --- family: pcfg ---
from .models.pcfg import PCFGTree  # noqa: E402
from .estimators.pcfg import PCFGTreeClassifier, PCFGTreeRegressor  # noqa: E402
# --- family: safe-bayes ---
from .models.safebayes import SafeBayesForest  # noqa: E402
from .estimators.safebayes import SafeBayesForestClassifier, SafeBayesForestRegressor  # noqa: E402

# --- family: Bayesian CART by MCMC ---
from .models.bcart import BayesianCART  # noqa: E402
from .estimators.bcart import BayesianCARTClassifier, BayesianCARTRegressor  # noqa: E402
# --- family: BET, Dirichlet-process mixture of trees ---
from .models.bet import BETMixture  # noqa: E402
from .estimators.bet import BETClassifier, BETRegressor  # noqa: E402
# --- family: BART, Bayesian additive regression trees ---
from .models.bart import BART  # noqa: E402
from .estimators.bart import BARTClassifier, BARTRegressor  # noqa: E402
# --- trees inside the user's own model: tree functions in NumPyro models ---
from .inference.treefn import bart_function, load_model_fit, sample_model, tree_function  # noqa: E402
from .models.numpyro_model import NumPyroModel  # noqa: E402
# --- causal effects: Bayesian causal forests, built on the tree functions ---
from . import causal  # noqa: E402
from . import distributions  # noqa: E402
from .estimators.bcf import BCFClassifier, BCFRegressor  # noqa: E402
from .models.bcf import BCF  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "data", "tree", "leaves", "convert", "priors", "families", "posterior", "plots", "load", "loo", "compare",
    "Model", "Data", "set_data", "sample", "sample_posterior_predictive",
    "BayesianForest", "BayesianForestRegressor", "BayesianForestClassifier",
    "EmpiricalBayesianForestRegressor", "EmpiricalBayesianForestClassifier",
    "SubSampleForestRegressor", "SubSampleForestClassifier",
    "PCFGTree", "PCFGTreeClassifier", "PCFGTreeRegressor",
    "SafeBayesForest", "SafeBayesForestClassifier", "SafeBayesForestRegressor",
    "BayesianCART", "BayesianCARTRegressor", "BayesianCARTClassifier",
    "BETMixture", "BETRegressor", "BETClassifier",
    "BART", "BARTRegressor", "BARTClassifier",
    "bart_function", "tree_function", "sample_model", "load_model_fit", "NumPyroModel",
    "causal", "distributions", "BCF", "BCFRegressor", "BCFClassifier",
    "set_compilation_cache", "compilation_cache_dir",
    "__version__",
]
