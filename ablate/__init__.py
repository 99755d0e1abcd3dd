"""ablate: systematic ablation studies of linear recurrent sequence models."""

__version__ = "0.1.0"
