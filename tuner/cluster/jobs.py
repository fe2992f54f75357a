"""Sweeps as Ray Jobs: submit one to a cluster's dashboard, list tuner's jobs, stop one.

``submit`` validates the sweep file here (the same one-line errors as ``sweep``; nothing
is submitted for a bad file), then ships a copy of the ``tuner`` package as the job's
``py_modules`` entry, with the sweep file and the ``search_spaces/`` registry inside it
(tuner/usercode/shipped.py says why not as a working directory). On the cluster the job runs
``python -P -m tuner sweep FILE`` (or ``resume FOLDER``) with the cluster's own Python, which
must have tuner's dependencies installed.

A stopped job's driver gets SIGTERM, which stops the trials and saves the sweep like a
Ctrl-C does, so ``resume`` (locally or as a job) continues it.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuner.cluster.connect import CLUSTER_TIMEOUT_S
from tuner.errors import TunerError
from tuner.folder.remote import is_remote, same_on_every_node
from tuner.invocation import tuner_command
from tuner.sweepfile.load import load_sweep, resolve_sweep_path
from tuner.sweepfile.own_code import uses_own_code
from tuner.sweepfile.schema import SweepConfig
from tuner.usercode import snapshot
from tuner.usercode.shipped import JOB_CODE, JOB_FILES, PACKAGE_DIR, registry_dir

METADATA_KEY = "tuner_sweep"  # marks tuner's jobs among a cluster's others
# Time a stopped job's driver gets to stop its trials and save the sweep before SIGKILL.
STOP_WAIT_S = 60
OUTPUT_LINE = "  output: "  # the plan line naming the sweep's folder (tuner.driver.plan.describe)


@dataclass
class Submission:
    job_id: str
    address: str
    entrypoint: str
    output_dir: str


def client(address: str | None) -> Any:
    """Ray's JobSubmissionClient for ``address`` (else $RAY_ADDRESS), with the cluster's
    token when one is at hand; an unreachable dashboard is one line."""
    from ray.job_submission import JobSubmissionClient

    from tuner.cluster.connect import send_auth_token_if_any

    _quiet_client_logs()
    send_auth_token_if_any()
    where = address or os.environ.get("RAY_API_SERVER_ADDRESS") or os.environ.get("RAY_ADDRESS") or "(auto)"
    try:
        return JobSubmissionClient(address)
    except Exception as error:  # ConnectionError, RuntimeError, ValueError, depending on the cause
        raise TunerError(
            f"cannot reach the Ray dashboard at {where} ({_first_line(error)}): the cluster is down or this is not "
            "its address (--address http://HEAD:8265); a sweep it ran keeps its state in its folder: on a new "
            f"cluster, resume it with: {tuner_command()} submit FOLDER --address http://HEAD:8265"
        ) from None


def _quiet_client_logs() -> None:
    """Ray's client logs every upload and websocket close at INFO and warns on every call
    that token auth is on (it is what keeps other users out: keep it); tuner says what matters."""
    import logging

    for name in (
        "ray.dashboard.modules.dashboard_sdk",
        "ray.dashboard.modules.job.sdk",
        "ray._private.runtime_env.packaging",
        "ray._private.authentication.authentication_token_setup",
    ):
        logging.getLogger(name).setLevel(logging.ERROR)


def check_cluster_paths(sweep: SweepConfig, file: str) -> None:
    """A job's working directory on the cluster is temporary: its outputs and data must be
    named by absolute paths (or URIs) that the cluster's nodes reach."""
    if not same_on_every_node(sweep.output_dir):
        raise TunerError(
            f"{file}: output_dir: a job's working directory on the cluster is temporary, so it needs an absolute "
            f"path on storage every node reaches, but got {sweep.output_dir!r}; "
            "e.g. --set output_dir=/mnt/shared/runs"
        )
    if sweep.data.root is not None and not same_on_every_node(sweep.data.root):
        raise TunerError(
            f"{file}: data.root: a job needs a path that exists on the cluster's nodes, but got the relative "
            f"{sweep.data.root!r}; give an absolute path, or leave it out to use the cluster's $TUNER_DATA_DIR"
        )
    if sweep.data.path is not None and not same_on_every_node(sweep.data.path):
        raise TunerError(
            f"{file}: data.path: a job needs a path that exists on the cluster's nodes, but got the relative "
            f"{sweep.data.path!r}; give an absolute path on storage the cluster reaches"
        )


def submit(
    target: str,
    overrides: list[str],
    *,
    smoke: bool,
    address: str | None,
    wait_s: float = STOP_WAIT_S,
    cluster_timeout_s: float = CLUSTER_TIMEOUT_S,
) -> Submission:
    """Validate here, then submit ``sweep`` (a file) or ``resume`` (a sweep folder) as a job;
    the cluster has ``cluster_timeout_s`` to accept it, and its driver the same for its waits."""
    given = Path(target)
    if is_remote(target) or (given.is_dir() and (given / "sweep.yaml").is_file()):
        if overrides or smoke:
            raise TunerError(f"{target}: a sweep folder is resumed as it was configured; drop --set and --smoke")
        from tuner.results.summaries import open_sweep

        sweep, folder = open_sweep(target)  # a storage URI: read through a working copy
        check_cluster_paths(sweep, str(folder.config))
        code = None  # a resume runs the code kept in the sweep folder (code/)
        command, staged_file = ["resume", folder.remote or str(folder.root.resolve())], None
    else:
        path = resolve_sweep_path(target)
        sweep = load_sweep(target, overrides, smoke=smoke)  # ConfigError: one line, nothing submitted
        check_cluster_paths(sweep, str(path))
        staged_file, code = path, None
        command = ["sweep", path.name, *(f"--set={item}" for item in overrides), *(["--smoke"] if smoke else [])]
        if uses_own_code(sweep):  # the user's code travels beside the file, in _job/code/
            code = snapshot.take(sweep.code_dir)
            command.append(f"--set=code_dir={JOB_CODE}")
    if cluster_timeout_s != CLUSTER_TIMEOUT_S:
        command.append(f"--cluster-timeout={cluster_timeout_s:g}")
    # -P: the job's working directory (wherever its node was started, a tuner checkout
    # maybe) must not come before the shipped copy of tuner on sys.path.
    entrypoint = shlex.join(["python", "-P", "-m", "tuner", *command])
    jobs = client(address)
    job_id = f"tuner-{sweep.name}-{time.strftime('%Y%m%d-%H%M%S')}-{os.urandom(2).hex()}"
    with tempfile.TemporaryDirectory(prefix="tuner-job-") as staging:
        package = _stage(Path(staging), staged_file, code)
        request = {
            "entrypoint": entrypoint,
            "submission_id": job_id,
            "runtime_env": {
                "py_modules": [str(package)],
                "env_vars": {"RAY_JOB_STOP_SIGNAL": "SIGTERM", "RAY_JOB_STOP_WAIT_TIME_S": str(int(wait_s))},
            },
            "metadata": {METADATA_KEY: sweep.name, "output_dir": sweep.output_dir, "command": command[0]},
        }
        _submit_once_accepted(jobs, request, cluster_timeout_s)
    return Submission(job_id, _address_of(jobs, address), entrypoint, sweep.output_dir)


def _submit_once_accepted(jobs: Any, request: dict[str, Any], limit_s: float) -> None:
    """Submit as soon as the cluster has a job agent to take it: a cluster that has just
    started, or a loaded one, has none for a while (over a minute was seen). A retry after
    an attempt that reached the cluster after all finds its own job there."""
    started = time.monotonic()
    told = False
    while True:
        try:
            jobs.submit_job(**request)
            return
        except Exception as error:  # the dashboard's refusal, as RuntimeError with its text
            if "already exists" in str(error) and _job_exists(jobs, request["submission_id"]):
                return
            if "No available agent" not in str(error):
                raise TunerError(f"the cluster refused the job ({_first_line(error)})") from None
        waited = time.monotonic() - started
        if waited > limit_s:
            raise TunerError(
                f"the cluster's job agent did not answer within {limit_s:g} s (--cluster-timeout); the head node "
                "may be overloaded or still starting: try again, or give it longer"
            )
        if not told and waited > 5:
            print(f"waiting for the cluster's job agent (up to {limit_s:g} s: --cluster-timeout)", flush=True)
            told = True
        time.sleep(1.0)


def _job_exists(jobs: Any, job_id: str) -> bool:
    try:
        jobs.get_job_info(job_id)
    except Exception:  # noqa: BLE001 - "does not exist" and friends
        return False
    return True


def _stage(staging: Path, sweep_file: Path | None, code: Any = None) -> Path:
    """The package the job ships: a copy of tuner with the space registry, the sweep file
    and the user's code (``code/``) in its ``_job/`` folder, where tuner/usercode/shipped.py
    looks for them on the cluster."""
    package = staging / "tuner"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", JOB_FILES.name)  # never a job's files in a job's
    shutil.copytree(PACKAGE_DIR, package, ignore=ignore)
    job_files = package / JOB_FILES.name
    job_files.mkdir()
    if registry_dir().is_dir():
        shutil.copytree(registry_dir(), job_files / "search_spaces", ignore=shutil.ignore_patterns("__pycache__"))
    if sweep_file is not None:
        shutil.copy2(sweep_file, job_files / sweep_file.name)
    if code is not None:
        snapshot.write_files(code.files, job_files / JOB_CODE)
    return package


def _address_of(jobs: Any, address: str | None) -> str:
    return getattr(jobs, "_address", None) or address or ""


def follow(job_id: str, address: str | None, cluster_timeout_s: float = CLUSTER_TIMEOUT_S) -> int:
    """Stream the job's logs until it ends; its driver's exit code (1 if unknown)."""
    jobs = client(address)

    async def tail() -> None:
        async for lines in jobs.tail_job_logs(job_id):
            print(lines, end="", flush=True)

    try:
        asyncio.run(tail())
    except KeyboardInterrupt:
        print(f"\nstopped following; the job goes on. Stop it with: {tuner_command()} stop {job_id}", flush=True)
        return 130
    info = _wait_for_end(jobs, job_id, timeout_s=cluster_timeout_s)
    code = getattr(info, "driver_exit_code", None)
    print(f"job {job_id}: {info.status}" + (f" (exit code {code})" if code is not None else ""), flush=True)
    if str(info.status).endswith("SUCCEEDED"):
        return 0
    return code if isinstance(code, int) and code > 0 else 1


def _wait_for_end(jobs: Any, job_id: str, timeout_s: float) -> Any:
    """The log stream can end a moment before the job's status does."""
    deadline = time.monotonic() + timeout_s
    while True:
        info = jobs.get_job_info(job_id)
        if info.status.is_terminal() or time.monotonic() > deadline:
            return info
        time.sleep(0.5)


@dataclass
class JobRow:
    job_id: str
    status: str
    sweep: str
    started: str
    folder: str


def list_jobs(address: str | None) -> list[JobRow]:
    """tuner's jobs on the cluster, oldest first, with the folder each sweep writes to."""
    jobs = client(address)
    rows = []
    for info in sorted(jobs.list_jobs(), key=lambda info: info.start_time or 0):
        metadata = info.metadata or {}
        if METADATA_KEY not in metadata or not info.submission_id:
            continue
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info.start_time / 1000)) if info.start_time else "-"
        rows.append(
            JobRow(
                info.submission_id,
                str(info.status).rsplit(".", 1)[-1],
                metadata[METADATA_KEY],
                started,
                _folder_from_logs(jobs, info.submission_id) or f"{metadata.get('output_dir', '?')}/...",
            )
        )
    return rows


def _folder_from_logs(jobs: Any, job_id: str) -> str | None:
    try:
        logs = jobs.get_job_logs(job_id)
    except Exception:  # noqa: BLE001 - a job without logs yet
        return None
    for line in logs.splitlines():
        if line.startswith(OUTPUT_LINE):
            return line[len(OUTPUT_LINE) :].strip()
    return None


def stop(job_id: str, address: str | None, *, wait: bool = True) -> str:
    """Ask the job to stop (its sweep saves its state first); its final status."""
    jobs = client(address)
    try:
        info = jobs.get_job_info(job_id)
    except Exception as error:  # noqa: BLE001 - RuntimeError "does not exist" and friends
        reason = _first_line(error)
        raise TunerError(f"no job {job_id!r} on the cluster ({reason}); list them with: tuner jobs") from None
    if METADATA_KEY not in (info.metadata or {}):
        raise TunerError(f"job {job_id!r} was not submitted by tuner; stop it with: ray job stop {job_id}")
    if info.status.is_terminal():
        return str(info.status).rsplit(".", 1)[-1]
    jobs.stop_job(job_id)
    if not wait:
        return "STOPPING"
    return str(_wait_for_end(jobs, job_id, timeout_s=STOP_WAIT_S + 30).status).rsplit(".", 1)[-1]


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
