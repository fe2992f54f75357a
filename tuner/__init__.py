"""tuner: one YAML file in, a tuned model out (Ray Tune + Ray Train + PyTorch).

From Python: ``tuner.run(file_or_dict, overrides)`` runs a sweep and returns its
``Results`` (tuner/api.py), ``tuner.resume(folder)`` goes on with an interrupted one;
``tuner.open_results(folder)`` reads one that ran before;
``tuner.Context`` is what a training function of the user's is given (tuner/trial/context.py).
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["Context", "Results", "open_results", "resume", "run"]


def __getattr__(name: str) -> Any:  # imported when first used: `python -m tuner --help` stays light
    if name in ("run", "resume", "open_results", "Results"):
        from tuner import api

        return getattr(api, name)
    if name == "Context":
        from tuner.trial.context import Context

        return Context
    raise AttributeError(f"module 'tuner' has no attribute {name!r}")
