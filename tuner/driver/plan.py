"""The sweep's resource model and its plan: GPU or not, how many trials at once (CPUs, GPUs,
memory, the CPUs Ray Data keeps for streaming), and the lines the driver prints before
the first trial (docs/architecture.md, "Resources")."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from tuner.errors import TunerError
from tuner.folder import remote
from tuner.folder.store import SweepFolder
from tuner.invocation import tuner_command
from tuner.sweepfile.schema import SweepConfig

DRIVER_MEMORY = 64 * 1024 * 1024  # logical reservation for the trial driver process


def decide_gpu(sweep: SweepConfig, cluster: dict[str, float]) -> bool:
    if sweep.scaling.use_gpu == "auto":
        return cluster.get("GPU", 0) > 0
    if sweep.scaling.use_gpu and cluster.get("GPU", 0) <= 0:
        raise TunerError("scaling.use_gpu is true, but the Ray cluster has no GPU; use auto or false")
    return bool(sweep.scaling.use_gpu)


def stream_cpus(cluster: dict[str, float]) -> int:
    """CPUs left free of trials for a streaming sweep's Ray Data tasks (they run outside
    the trials' reservations, and a pipeline with no free CPU waits for ever): a quarter
    of the cluster's, at least one."""
    return max(1, int(cluster.get("CPU", 0) // 4))


def concurrent_trials(sweep: SweepConfig, cluster: dict[str, float], use_gpu: bool, data_cpus: int = 0) -> int:
    """How many trials fit at once: the cluster's CPUs (less ``data_cpus`` kept for a
    streaming pipeline or held by a kept Spark session) and GPUs over one trial's need."""
    scaling = sweep.scaling
    need_cpu = scaling.workers * scaling.cpus_per_worker
    slots = math.floor((cluster.get("CPU", 0) - data_cpus) / need_cpu + 1e-9)
    if use_gpu:
        need_gpu = scaling.workers * scaling.gpus_per_worker
        gpu_slots = math.floor(cluster.get("GPU", 0) / need_gpu + 1e-9)
        if gpu_slots < 1:
            raise TunerError(
                f"one trial needs {need_gpu:g} GPUs (scaling.workers x scaling.gpus_per_worker), "
                f"but the Ray cluster has {cluster.get('GPU', 0):g}; lower scaling.workers or gpus_per_worker"
            )
        slots = min(slots, gpu_slots)
    if slots < 1:
        raise TunerError(
            f"one trial needs {need_cpu:g} CPUs (scaling.workers x scaling.cpus_per_worker), "
            f"but the Ray cluster has {cluster.get('CPU', 0):g}"
            + (f" ({data_cpus} kept free for the data: streaming, or a kept Spark session)" if data_cpus else "")
            + "; lower scaling.workers or cpus_per_worker"
        )
    return min(slots, sweep.trials.max_concurrent or slots)


def describe(
    sweep: SweepConfig, slots: int, use_gpu: bool, data: Any, folder: SweepFolder, held: str = "in memory"
) -> str:
    searched = ", ".join(filter(None, (_searched(n, s) for n, s in sweep.param_specs().items()))) or "nothing"
    if sweep.objective is not None:
        searched = "what the objective's trial.suggest_* calls ask"
    searcher = sweep.searcher.described
    device = "GPU" if use_gpu else "CPU"
    return "\n".join(
        [
            f"sweep {sweep.name}: {sweep.total_trials} trial(s)"
            + (f" x up to {sweep.max_epochs} epoch(s)" if sweep.objective is None else "")  # it ends itself
            + f" of {what_runs(sweep)}{on_data(sweep, data)}",
            *([f"  {sweep.picked}"] if sweep.picked else []),
            *([f"  data {held}"] if data is not None else []),
            f"  search {searched}; searcher {searcher}, scheduler {sweep.scheduler.name}, "
            + (", ".join(f"{o.mode}imise {o.metric}" for o in sweep.objectives) or f"{sweep.mode}imise {sweep.metric}"),
            *([constraints_line(sweep)] if sweep.constraints else []),
            f"  {slots} trial(s) at once, each {sweep.scaling.workers} worker(s) x "
            f"{sweep.scaling.cpus_per_worker:g} CPU on {device}, "
            f"{'in the trial process' if sweep.scaling.direct else 'as a TorchTrainer'}",
            f"  output: {folder.where}",
        ]
    )


def constraints_line(sweep: SweepConfig) -> str:
    """What the searcher does with ``constraints``: models them, or only filters the trials."""
    how = (
        f"modelled by searcher {sweep.searcher.described}"
        if sweep.searcher.models_constraints()
        else f"searcher {sweep.searcher.described} cannot model them, so they only filter"
    )
    return f"  constraints {', '.join(sweep.constraints)}: {how}; the best is the best trial that meets them"


def _searched(name: str, spec: Any) -> str:
    """``lr (loguniform)``; a conditional choice with its branches: ``optimizer (sgd: momentum, lr | adam: lr)``."""
    if spec.kind == "constant":
        return ""
    if spec.kind != "branches":
        return f"{name} ({spec.kind})"
    branches = " | ".join(
        f"{value}: {', '.join(filter(None, (_searched(n, s) for n, s in params.items()))) or '-'}"
        for value, params in spec.branches.items()
    )
    return f"{name} ({branches})"


def what_runs(sweep: SweepConfig) -> str:
    if sweep.trainable is not None:
        return f"trainable {sweep.trainable}"
    if sweep.command is not None:
        return "command " + " ".join(sweep.command)
    if sweep.objective is not None:
        return f"objective {sweep.objective}"
    models = sweep.param_specs().get("model")
    if not sweep.own_loop and models is not None and models.kind == "branches":
        return "a choice of models (" + ", ".join(models.branches) + ")"
    if sweep.model.name == "factory":
        return f"model {sweep.model.factory}"
    return sweep.model.name


def on_data(sweep: SweepConfig, data: Any) -> str:
    """The data section's split, said as what it is to the trials: what tuner's loop trains
    on, what a function finds in ``context.data`` (it may read its own), and for a command,
    which never sees it, only what the export is scored on."""
    if data is None:
        return ""
    sizes = f"{sweep.data.dataset} ({len(data.train)} train / {len(data.val)} val images)"
    if sweep.command is not None:
        return f"; the command reads its own data ({sweep.data.dataset}: only the export's test score)"
    if sweep.trainable is not None:
        return f"; context.data holds {sizes}"
    return f" on {sizes}"


def earlier_run_note(sweep: SweepConfig, folder: SweepFolder) -> list[str]:
    """A second run of a sweep goes to a new folder; say where the first one is."""
    if folder.root.name == sweep.name:
        return []
    if folder.remote:
        earlier: str | Path = remote.join(remote.parent(folder.remote), sweep.name)
        finished = remote.exists(remote.join(str(earlier), "best", "metrics.json"))
    else:
        earlier = folder.root.with_name(sweep.name)
        finished = (earlier / "best" / "metrics.json").is_file()
    if finished:
        return [f"  ({earlier} holds an earlier, finished run of this sweep, kept as it is)"]
    return [f"  ({earlier} holds an earlier run, kept as it is; '{tuner_command()} resume {earlier}' continues it)"]
