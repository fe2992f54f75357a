"""tuner: one YAML file in, a tuned model out (Ray Tune + Ray Train + PyTorch)."""

__version__ = "0.1.0"
