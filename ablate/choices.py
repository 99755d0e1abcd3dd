"""The names a study may choose from, kept free of torch so validation stays fast.

Each tuple is the single list of valid names for one factor; the registries in
``ablate.models`` and ``ablate.tasks`` are checked against them by the tests.
"""

FAMILIES = ("linear_rnn", "mingru", "minlstm", "gru", "lstm")
PARAMETERISATIONS = ("rotation", "complex_diagonal", "real_diagonal", "dense")
NORMALISATIONS = ("xi", "gamma", "gamma_recomputed", "none")
NONLINEARITIES = ("none", "tanh", "relu")
ACTIVATIONS = ("gelu", "glu", "half_glu")
NORMS = ("layer", "batch", "rms", "none")
POOLINGS = ("mean", "last")
INIT_SCHEMES = ("ring", "rotrnn")
REPORTS = ("accuracy", "norm_stability")
