"""Ray for a command: a local Ray of its own, or a cluster joined by address, and what a
driver on a cluster needs before its trials start (the token, tuner shipped to the nodes,
every node seeing the sweep folder). Light to import: Ray itself is imported inside.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tuner.errors import TunerError
from tuner.folder import remote
from tuner.folder.records import read_timeline
from tuner.folder.store import SweepFolder, in_use, write_atomic
from tuner.invocation import tuner_command
from tuner.results.summaries import UNDONE, TrialSummary
from tuner.sweepfile.schema import SweepConfig
from tuner.usercode.shipped import PACKAGE_DIR

# How long a command waits for a cluster to do what it asked (a job agent to take a job,
# every node to run the storage check): --cluster-timeout. A loaded head took over a minute.
CLUSTER_TIMEOUT_S = 300.0


def start_ray(address: str | None, *, verbose: bool = False) -> bool:
    """Join the cluster at ``address`` (or $RAY_ADDRESS), else start a local one.

    Returns whether this process started Ray (and so must stop it). The dashboard
    stays on, bound to 127.0.0.1: without it, stopped trials leak their CPUs.
    """
    import ray

    os.environ.setdefault("RAY_DEDUP_LOGS", "1")
    # One snapshot per checkpoint is what resume needs; Tune warns about it every epoch.
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    if ray.is_initialized():  # a caller (tests, notebooks) owns the connection
        return False
    if not verbose:  # Ray's notice that its token auth is on: not news on every run
        logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
        # MLflow's INFO lines (creating the store's tables, validating the model's input
        # example) would break into the progress view; its warnings still show. MLflow
        # sets its loggers' level from this variable when it is imported.
        os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # its bars when it logs the model
        # "View run ... at: http://..." and the like, printed by MLflow for a server's runs
        os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
        os.environ.setdefault("MLFLOW_PRINT_MODEL_URLS_ON_CREATION", "false")
        logging.getLogger("mlflow").setLevel(os.environ["MLFLOW_LOGGING_LEVEL"].upper())
    address = address or os.environ.get("RAY_ADDRESS")
    common = {"log_to_driver": verbose, "configure_logging": True, "logging_level": "INFO" if verbose else "WARNING"}
    if address:
        send_auth_token_if_any()
        ray.init(address=address, runtime_env=_trial_modules(), **common)
        return False
    # "local": a Ray of our own, never one that `ray start` (or a crashed cluster, through
    # its stale /tmp/ray/ray_current_cluster) left on this machine.
    with ray_in_its_own_session():
        ray.init(address="local", include_dashboard=True, dashboard_host="127.0.0.1", **common)
    return True


def stop_ray() -> None:
    """``ray.shutdown`` of the local Ray this process started, less 1 s of waiting.

    Ray stops its processes one by one, the GCS before the autoscaler's monitor; on SIGTERM
    the monitor reports its end to the GCS, which is gone by then, and Ray waits its full
    second before it kills it (1.35 s of the 1.4 s a shutdown took, measured). The monitor
    keeps nothing (a local Ray has no nodes to scale), so it is killed first, and the rest
    stop as before (0.4 s)."""
    import ray

    with contextlib.suppress(Exception):  # Ray's internals: a later Ray just takes its second
        from ray._private import ray_constants, worker

        if worker._global_node is not None:
            worker._global_node._kill_process_type(
                ray_constants.PROCESS_TYPE_MONITOR, check_alive=False, allow_graceful=False, wait=True
            )
    ray.shutdown()


# The keeper of a local Ray's process group: it waits for the command to end (its stdin
# closes when the command's process does, however it ends) and then kills whatever of Ray
# is left in the group, such as the dashboard and runtime-env agents a killed raylet leaves.
_KEEPER = "import os, signal, sys; sys.stdin.buffer.read(); os.killpg(0, signal.SIGKILL)"


@contextlib.contextmanager
def ray_in_its_own_session() -> Iterator[None]:
    """Ray's processes (GCS, raylet, dashboard and what they start) in a process group of
    their own (a group can only be joined within its session), out of the command's: a
    SIGTERM or SIGINT sent to the whole group
    (Slurm's ``scancel``, a pod's stop, ``timeout``, a terminal) reaches tuner, which stops
    the trials and saves the sweep with Ray still up, then stops Ray itself. Before, the GCS
    died with the signal and the driver waited 60 s for it.

    They still end with the command: a keeper process leads their group and kills it when
    the command's process is gone (a SIGKILL included, which left Ray's agents running
    before); Ray's own parent-death signal ends the rest."""
    from ray._private import services

    keeper = subprocess.Popen([sys.executable, "-c", _KEEPER], stdin=subprocess.PIPE, process_group=0, close_fds=True)
    _KEEPERS.append(keeper)  # its stdin stays open for as long as this process lives
    plain = services.ConsolePopen

    class InRaysGroup(plain):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **{**kwargs, "process_group": keeper.pid})

    services.ConsolePopen = InRaysGroup
    try:
        yield
    finally:
        services.ConsolePopen = plain


_KEEPERS: list[subprocess.Popen] = []


def _trial_modules() -> dict[str, Any]:
    """What a driver joining a cluster ships to its trials: tuner itself, for nodes that do
    not have it installed. A job from ``tuner submit`` already ships it as its own
    ``py_modules``, and Ray refuses a driver that names them again inside such a job."""
    job = json.loads(os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR") or "{}")  # Ray sets it in a job's driver
    if (job.get("runtime_env") or {}).get("py_modules"):
        return {}
    return {"py_modules": [str(PACKAGE_DIR)]}


def send_auth_token_if_any() -> None:
    """Clusters started with ``ray start`` use token auth by default, but a client joining
    one sends its token only in token mode: turn that on when a token is at hand.

    Ray's own helper for this also refreshes its cached config, which setting
    RAY_AUTH_MODE after ``import ray`` would not.
    """
    if "RAY_AUTH_MODE" in os.environ:
        return
    from ray._private.authentication.authentication_token_setup import (
        maybe_enable_token_auth_if_token_available,
    )

    maybe_enable_token_auth_if_token_available(warn_if_disabled=False)


def check_shared_storage(folder: SweepFolder, timeout_s: float = CLUSTER_TIMEOUT_S) -> None:
    """On a cluster of several nodes, every node must see the sweep folder (Tune's trials
    write their checkpoints there): a marker written here must be visible from each node.
    A local disk of the driver's machine fails this at once, not at the first checkpoint."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = [node for node in ray.nodes() if node["Alive"]]
    if len(nodes) < 2:
        return
    note = b"written by the sweep's driver to check that every node sees this folder\n"
    marker_name = f".tuner-visible-{os.getpid()}-{os.urandom(3).hex()}"
    if folder.remote:  # every node needs the storage's package and credentials
        marker = remote.join(folder.remote, marker_name)
        remote.write_bytes(marker, note)
    else:
        marker = str(folder.root / marker_name)
        write_atomic(Path(marker), note)

    at_uri = remote.is_remote(marker)

    @ray.remote(num_cpus=0)
    def sees(path: str) -> bool:  # runs on each node: os and pyarrow only, not tuner
        if not at_uri:
            return os.path.exists(path)
        try:
            import pyarrow.fs

            fs, inner = pyarrow.fs.FileSystem.from_uri(path)
            return fs.get_file_info(inner).type != pyarrow.fs.FileType.NotFound
        except Exception:  # no package, no credentials, no route: this node cannot see it
            return False

    try:
        seen = ray.get(
            [
                sees.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)).remote(
                    str(marker)
                )
                for node in nodes
            ],
            timeout=timeout_s,
        )
    except ray.exceptions.GetTimeoutError:
        raise TunerError(
            f"the cluster's {len(nodes)} nodes did not all run the check that they see output_dir within "
            f"{timeout_s:g} s (--cluster-timeout); a node may be overloaded or gone: try again, or give it longer"
        ) from None
    finally:
        if folder.remote:
            remote.delete(marker)
        else:
            Path(marker).unlink(missing_ok=True)
    blind = [node for node, ok in zip(nodes, seen, strict=True) if not ok]
    if blind:
        names = ", ".join(f"{node['NodeManagerAddress']} ({node['NodeID'][:8]})" for node in blind)
        where = remote.parent(folder.remote) if folder.remote else folder.root.parent
        raise TunerError(
            f"output_dir: {where} is not visible from {len(blind)} of the cluster's {len(nodes)} "
            f"nodes ({names}); on a cluster of several machines put output_dir on storage every node reaches "
            "(a shared mount such as NFS) - see docs/cluster.md"
        )


def joined(address: str | None) -> dict[str, str]:
    """Where a command that joined a cluster runs, for the sweep's timeline (``status`` asks
    the cluster later whether it is still there): the cluster's GCS address, and the job's
    id when the driver runs as a Ray Job. Nothing for a local Ray of the command's own."""
    import ray

    if not (address or os.environ.get("RAY_ADDRESS")):
        return {}
    where = {"cluster": ray.get_runtime_context().gcs_address}
    job = json.loads(os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR") or "{}")
    if (job.get("metadata") or {}).get("job_submission_id"):
        where["job"] = job["metadata"]["job_submission_id"]
    return where


def answers(address: str, timeout_s: float = 2.0) -> bool:
    """Whether anything listens at a cluster's ``host:port`` (its GCS) now."""
    import socket

    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except (OSError, ValueError):
        return False
    return True


def how_to_continue(sweep: SweepConfig, folder: SweepFolder, summaries: list[TrialSummary], where: str) -> str | None:
    """One line for a sweep that no process is running and that has trials left: how to go
    on, and, when its last run joined a cluster that no longer answers, that it is gone."""
    if not any(t.status in UNDONE for t in summaries) and len(summaries) >= sweep.total_trials:
        return None
    if in_use(folder):
        return None
    last_run = next((e for e in reversed(read_timeline(folder)) if e.get("event") == "run"), {})
    cluster = last_run.get("cluster")
    tuner = tuner_command()
    if cluster is None:
        return f"not running: continue it with: {tuner} resume {where}"
    as_job = f"{tuner} submit {where} --address http://HEAD:8265"
    if answers(cluster):
        resume = f"{tuner} resume {where} --address {cluster}"
        return f"not running: continue it on its cluster: {resume} (or {as_job})"
    return (
        f"not running, and its cluster {cluster} does not answer (its head node is gone?): start a cluster, then "
        f"resume it with: {tuner} resume {where} --address HEAD:6379 (or {as_job})"
    )
