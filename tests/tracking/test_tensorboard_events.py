"""TensorBoard's HParams for a trial that never ended in its event file: interrupted with
its sweep, then restarted by ``resume`` into a second file (tuner's TensorBoard callback
driven as Tune drives it, on a stand-in trial; no Ray started)."""

from __future__ import annotations

import pickle
import time
from pathlib import Path

import pytest

from tuner.tracking.callbacks import TensorBoardEvents, TrialFilesWritten


class StandInTrial:
    """What Ray's TensorBoard logger reads of a Tune trial."""

    def __init__(self, folder: Path):
        self.local_path = str(folder)
        self.evaluated_params = {"lr": 0.003, "optimizer": "sgd"}
        self.trial_id = "a1b2c_00000"

    def init_local_path(self) -> None:
        Path(self.local_path).mkdir(parents=True, exist_ok=True)


def _report(events: TensorBoardEvents, trial: StandInTrial, epoch: int) -> None:
    events.on_trial_result(epoch, [trial], trial, {"training_iteration": epoch, "val_accuracy": 0.5 + epoch / 100})


def _hparams_per_file(folder: Path) -> list[tuple[set[str], set[str], bool]]:
    """Per event file, in order: its HParams' values, its metrics, and whether its session ended."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    found = []
    for path in sorted(folder.glob("events.out.tfevents.*")):
        events = EventAccumulator(str(path), size_guidance={"tensors": 0})
        events.Reload()
        content = events.PluginTagToContent("hparams")
        if "_hparams_/session_start_info" not in content:
            found.append((set(), set(), False))
            continue
        start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"])
        experiment = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/experiment"])
        found.append(
            (
                set(start.session_start_info.hparams),
                {m.name.tag for m in experiment.experiment.metric_infos},
                "_hparams_/session_end_info" in content,
            )
        )
    return found


def test_an_interrupted_trials_first_event_file_has_its_hparams(tmp_path):
    trial = StandInTrial(tmp_path / "trial_driver_a1b2c_00000")
    first = TensorBoardEvents()
    pickled = pickle.dumps(first)  # as Tune keeps it for a resume
    first.on_trial_start(1, [trial], trial)
    _report(first, trial, 1)
    first.on_experiment_end([trial])  # Ctrl-C: the trial never ends in this file
    (interrupted,) = _hparams_per_file(Path(trial.local_path))
    assert interrupted == ({"lr", "optimizer"}, {"ray/tune/val_accuracy"}, False)

    time.sleep(1.05)  # an event file is named by the second it was opened in
    resumed = pickle.loads(pickled)  # `tuner resume`: the callback back from Tune's pickle
    resumed.on_trial_start(2, [trial], trial)
    _report(resumed, trial, 2)
    resumed.on_trial_complete(2, [trial], trial)
    resumed.written()  # (the files are written on a thread of their own)
    files = _hparams_per_file(Path(trial.local_path))
    assert len(files) == 2, "a restarted trial writes a second event file"
    assert files[1] == ({"lr", "optimizer"}, {"ray/tune/val_accuracy"}, True)  # Ray's end adds the status
    assert files[0] == interrupted


def test_a_callback_pickled_before_this_change_still_resumes(tmp_path):
    events = TensorBoardEvents()
    state = {k: v for k, v in events.__dict__.items() if k != "_hparams_in_file"}  # as an earlier tuner left it
    earlier = TensorBoardEvents.__new__(TensorBoardEvents)
    earlier.__setstate__(state)
    trial = StandInTrial(tmp_path / "t")
    earlier.on_trial_start(1, [trial], trial)
    _report(earlier, trial, 1)
    earlier.on_trial_complete(1, [trial], trial)
    earlier.written()
    assert _hparams_per_file(Path(trial.local_path))[0][2]


def test_a_write_that_failed_off_the_loop_stops_the_sweep_at_its_end(tmp_path):
    (tmp_path / "taken").write_text("a file where the trial's folder would be")
    trial = StandInTrial(tmp_path / "taken" / "trial_driver_a1b2c_00000")
    events = TensorBoardEvents()
    events.on_trial_start(1, [trial], trial)  # handed to the writes' thread: Tune's loop goes on
    _report(events, trial, 1)
    events.on_experiment_end([trial])  # the other callbacks' ends still run
    with pytest.raises(OSError, match="taken"):  # not lost: raised by the sweep's last callback
        TrialFilesWritten().on_experiment_end([trial])
    ok = StandInTrial(tmp_path / "trial_driver_a1b2c_00001")  # raised once: the next sweep's writes go on
    events.on_trial_start(1, [ok], ok)
    _report(events, ok, 1)
    events.on_experiment_end([ok])
    assert _hparams_per_file(Path(ok.local_path)) == [({"lr", "optimizer"}, {"ray/tune/val_accuracy"}, False)]


def test_the_trial_files_are_written_before_tune_saves_its_state(tmp_path):
    # Tune copies the trials' folders to the sweep's when it saves its state, and asks each
    # callback for its state just before: the writes still on the thread are made first.
    import threading

    from tuner.later import TRIAL_FILES

    trial = StandInTrial(tmp_path / "trial_driver_a1b2c_00000")
    events = TensorBoardEvents()
    busy = threading.Event()
    TRIAL_FILES.do(busy.wait)  # the thread held up by an earlier write
    events.on_trial_start(1, [trial], trial)
    _report(events, trial, 1)
    events.on_trial_complete(1, [trial], trial)
    threading.Timer(0.3, busy.set).start()
    assert TrialFilesWritten().get_state() is None  # (nothing of its own to save)
    assert _hparams_per_file(Path(trial.local_path)) == [({"lr", "optimizer"}, {"ray/tune/val_accuracy"}, True)]
