"""A sweep as a Ray Job on a cluster: ``submit``, ``jobs``, ``stop`` (tuner.cluster.jobs); a
local Ray kept warm between sweeps: ``ray up``, ``ray down``, ``ray status``
(tuner.cluster.warm). Each command's parser stands above its handler."""

from __future__ import annotations

import argparse
import time

from tuner.cli.common import Commands, add_cluster_timeout, add_sweep_file, cluster_timeout
from tuner.invocation import tuner_command


def register(commands: Commands) -> None:
    commands.update(submit=_add_submit, jobs=_add_jobs, stop=_add_stop, ray=_add_ray)


def _add_submit(commands: argparse._SubParsersAction) -> None:
    submit = commands.add_parser("submit", help="run a sweep (or resume a sweep folder) as a Ray Job on a cluster")
    add_sweep_file(submit)
    submit.add_argument("--address", help="the cluster's dashboard, e.g. http://HOST:8265 (else $RAY_ADDRESS)")
    submit.add_argument("--follow", action="store_true", help="stream the job's logs; exit with its outcome")
    add_cluster_timeout(submit)
    submit.set_defaults(handler=cmd_submit)


def cmd_submit(args: argparse.Namespace) -> int:
    from tuner.cluster import jobs

    job = jobs.submit(args.file, args.overrides, smoke=args.smoke, address=args.address, **cluster_timeout(args))
    address = f" --address {job.address}" if job.address else ""
    print(f"submitted job {job.job_id} to {job.address or 'the cluster'}: {job.entrypoint}")
    print(f"  follow:  ray job logs --follow {job.job_id}{address}")
    print(f"  list:    {tuner_command()} jobs{address}")
    print(f"  stop:    {tuner_command()} stop {job.job_id}{address}   (the sweep saves its state; resume continues it)")
    print(f"  results: in {job.output_dir}/ on the cluster's storage (tuner jobs names the sweep's folder)")
    if args.follow:
        return jobs.follow(job.job_id, args.address or job.address or None, **cluster_timeout(args))
    return 0


def _add_jobs(commands: argparse._SubParsersAction) -> None:
    jobs = commands.add_parser("jobs", help="tuner's Ray Jobs on a cluster and their state")
    jobs.add_argument("--address", help="the cluster's dashboard, e.g. http://HOST:8265 (else $RAY_ADDRESS)")
    jobs.set_defaults(handler=cmd_jobs)


def cmd_jobs(args: argparse.Namespace) -> int:
    from tuner.cluster import jobs

    rows = jobs.list_jobs(args.address)
    if not rows:
        print("no tuner jobs on this cluster")
        return 0
    width = max(len(row.job_id) for row in rows)
    print(f"{'job':<{width}}  {'status':<10}{'sweep':<20}{'started':<21}folder")
    for row in rows:
        print(f"{row.job_id:<{width}}  {row.status:<10}{row.sweep:<20}{row.started:<21}{row.folder}")
    return 0


def _add_stop(commands: argparse._SubParsersAction) -> None:
    stop = commands.add_parser("stop", help="stop a sweep's Ray Job; its sweep saves its state for resume")
    stop.add_argument("job_id", help="the job id that submit printed (see: tuner jobs)")
    stop.add_argument("--address", help="the cluster's dashboard, e.g. http://HOST:8265 (else $RAY_ADDRESS)")
    stop.add_argument("--no-wait", action="store_true", help="return at once instead of waiting for the job to end")
    stop.set_defaults(handler=cmd_stop)


def cmd_stop(args: argparse.Namespace) -> int:
    from tuner.cluster import jobs

    status = jobs.stop(args.job_id, args.address, wait=not args.no_wait)
    print(f"job {args.job_id}: {status}")
    if status == "STOPPED":
        print(f"  its sweep saved its state: continue it with '{tuner_command()} resume FOLDER' or submit FOLDER")
    return 0


def _add_ray(commands: argparse._SubParsersAction) -> None:
    ray = commands.add_parser(
        "ray",
        help="keep a local Ray warm between sweeps: up, down, status",
        description="A local Ray kept running between commands: every sweep, resume and extend on this machine "
        "joins it instead of starting and stopping a Ray of its own. It stops with `tuner ray down`, or "
        "after --idle-stop minutes with no command joined.",
    )
    ray.add_argument("action", choices=("up", "down", "status"))
    ray.add_argument("--num-cpus", type=int, help="CPUs it offers trials (up; default: all of the machine's)")
    ray.add_argument(
        "--idle-stop",
        type=float,
        default=60.0,
        metavar="MINUTES",
        help="stop after this many minutes with no command joined (up; default 60)",
    )
    ray.set_defaults(handler=cmd_ray)


def cmd_ray(args: argparse.Namespace) -> int:
    from tuner.cluster import warm
    from tuner.errors import TunerError

    if args.action == "up":
        if args.idle_stop <= 0:
            raise TunerError(f"--idle-stop: must be more than 0 minutes, got {args.idle_stop:g}")
        ray, started = warm.up(args.num_cpus, args.idle_stop * 60)
        verb = "started" if started else "already up"
        print(f"warm Ray {verb} at {ray.address} (dashboard {ray.dashboard}); sweeps on this machine join it")
        print(f"  stops after {ray.idle_stop_s / 60:g} min with no sweep, or with: {tuner_command()} ray down")
        return 0
    if args.action == "down":
        ray = warm.down()
        print(f"warm Ray at {ray.address} stopped" if ray else "no warm Ray is up")
        return 0
    ray = warm.current()
    if ray is None:
        print(f"no warm Ray is up (start one: {tuner_command()} ray up)")
        return 0
    joined = warm.joined_commands()
    since = time.strftime("%F %T", time.localtime(ray.started))
    print(f"warm Ray at {ray.address} (dashboard {ray.dashboard}), up since {since}")
    print(f"  {len(joined)} command(s) joined now" + (f" (pids {', '.join(map(str, joined))})" if joined else ""))
    print(f"  stops after {ray.idle_stop_s / 60:g} min with no command joined, or with: {tuner_command()} ray down")
    return 0
