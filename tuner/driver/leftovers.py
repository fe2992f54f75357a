"""Placement groups left behind by dead Train runs, removed while the sweep runs.

A Ray Train run (a TorchTrainer trial) reserves its workers in a placement group that its
controller actor creates. Ray ties such a group's life to the *job* (the sweep's driver),
not to the actor, and Train's own cleaner actor learns of the group only once the workers
have started: a Train run stopped while its workers were still being placed (ASHA's stop,
PBT's exploit, a stall) left its group reserved until the sweep ended. tuner's trial groups
and their workers' token share fill the CPUs exactly, so one token group left behind
blocked every later Train run on that node, and two sweeps side by side on a loaded
machine both waited for good (docs/ray-notes.md).

So the driver removes, every few seconds, the groups of its own job whose creator was an
actor that is now dead: nothing can use them any more. Groups the driver itself made
(Tune's trial groups) have no creator actor, and other jobs' groups are never touched.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from ray.tune import Callback

log = logging.getLogger(__name__)


def orphaned_groups() -> list[Any]:
    """This job's placement groups whose creator actor is dead and that Ray has not removed:
    their PlacementGroupIDs. (Ray's public table leaves the creator out: its GCS record.)"""
    import ray
    from ray._private.state import state
    from ray.core.generated import gcs_pb2

    job = ray.get_runtime_context().get_job_id()
    removed = gcs_pb2.PlacementGroupTableData.REMOVED
    found = []
    for raw in state._connect_and_get_accessor().get_placement_group_table():
        group = gcs_pb2.PlacementGroupTableData.FromString(raw)
        if (
            group.state != removed
            and not group.is_detached
            and group.creator_job_id.hex() == job
            and not ray.ActorID(group.creator_actor_id).is_nil()  # (the driver's own: no actor)
            and group.creator_actor_dead
        ):
            found.append(ray.PlacementGroupID(group.placement_group_id))
    return found


def remove_orphaned_groups() -> int:
    """Remove them; how many were removed."""
    from ray.util.placement_group import PlacementGroup, remove_placement_group

    count = 0
    for group_id in orphaned_groups():
        try:
            remove_placement_group(PlacementGroup(group_id))
            count += 1
        except Exception as error:  # noqa: BLE001 - removed meanwhile (Train's cleaner): nothing to do
            log.debug("placement group %s: %s", group_id.hex(), error)
    return count


class LeftoverGroups(Callback):
    """A Tune callback (in the driver) that removes the groups dead Train runs left, every
    ``EVERY_S`` seconds. Best effort: a Ray whose GCS records read otherwise is left as is."""

    EVERY_S = 5.0

    def __init__(self) -> None:
        self.next_look = 0.0

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "next_look": 0.0}

    def on_experiment_end(self, trials, **info):  # a Train run stopped in the last seconds
        self.next_look = 0.0
        self.on_step_end(0, trials)

    def on_step_end(self, iteration, trials, **info):
        if time.monotonic() < self.next_look:
            return
        self.next_look = time.monotonic() + self.EVERY_S
        try:
            removed = remove_orphaned_groups()
        except Exception as error:  # noqa: BLE001 - a private record of Ray's: never fail the sweep
            log.debug("looking for placement groups left behind: %s", error)
            return
        if removed:
            log.debug("removed %d placement group(s) left by dead Train runs", removed)
