"""The ``tune.Tuner`` of a sweep: the trial (direct or TorchTrainer) with its resources, the
search space, searcher and scheduler, checkpoints and the driver's callbacks; new, or
restored from the sweep folder for a resume."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tuner.driver.plan import DRIVER_MEMORY
from tuner.errors import TunerError
from tuner.folder import remote

if TYPE_CHECKING:
    from tuner.driver.run import Run


def build_tuner(
    run: Run, data_ref: Any, use_gpu: bool, slots: int, *, streamed: bool = False, reporter: Any = None
) -> Any:
    """The ``tune.Tuner`` for a run, new or restored from its folder's ``tune/``: ``data_ref``
    the trials' data in Ray's object store, ``slots`` the trials that can run at once,
    ``reporter`` tuner's progress view (None: Ray's own, ``--verbose``)."""
    from ray import tune

    from tuner.driver import earlier, moved
    from tuner.driver.callbacks import ProgressCallback, SpareCores, StudyTrials, SweepRecords
    from tuner.driver.leftovers import LeftoverGroups
    from tuner.driver.stalls import StallWatch
    from tuner.search import registry, spaces
    from tuner.tracking.callbacks import MlflowTrials, TensorBoardEvents, TrialFilesWritten, TuneCsv, TuneJson
    from tuner.trial.runner import TrialSetup, trial_bundles, trial_driver, with_kept_parameters
    from tuner.trial.session import TrialHooks

    sweep, folder, restore = run.sweep, run.folder, run.resume
    study = None
    if sweep.objective is not None:  # the study that answers the objective's trial.suggest_* calls
        from tuner.search import define_by_run

        study = define_by_run.start(sweep, folder)
    setup = TrialSetup.of(
        sweep,
        use_gpu=use_gpu,
        train_dir=folder.train_storage,
        hooks=run.hooks or TrialHooks(),
        streamed=streamed,
        code=run.code,
        trials_dir=None if folder.remote else str(folder.tune),
        study=study,
        function=run.function,
    )
    trainable = tune.with_resources(
        with_kept_parameters(trial_driver, setup=setup, data=[data_ref]),
        tune.PlacementGroupFactory(trial_bundles(setup, DRIVER_MEMORY), strategy="PACK"),
    )
    keep = None if sweep.scheduler.clones_checkpoints else sweep.checkpoint.keep  # PBT clones old ones
    callbacks = [
        # first: the others read what it puts in the trials' config
        *([StudyTrials(study, sweep.metric, sweep.max_epochs)] if study is not None else []),
        SweepRecords(folder, keep, sweep.metric, sweep.mode),
        TensorBoardEvents(),
        TuneJson(),  # (Tune's own, written off its loop as TensorBoard's are)
        TuneCsv(),
        *([MlflowTrials(sweep, folder)] if sweep.tracking.mlflow.enabled else []),
        *([ProgressCallback(folder)] if reporter is not None else []),
        StallWatch(folder, sweep.trials.stall_timeout_s),
        LeftoverGroups(),
    ]
    lend = sweep.scaling.lend_spare_cores and setup.direct and not use_gpu and not streamed
    if lend and not folder.remote and not sweep.own_loop:
        callbacks.append(SpareCores(folder, sweep.total_trials, int(sweep.scaling.cpus_per_worker)))
    callbacks.append(TrialFilesWritten())  # last: a trial file's failed write raised once the others have ended
    if restore:
        try:
            try:
                restored = tune.Tuner.restore(folder.tune_uri, trainable, resume_unfinished=True, resume_errored=True)
            except ModuleNotFoundError as error:
                if not earlier.made_by_earlier_tuner(error):
                    raise
                earlier.bring_forward(folder, callbacks)  # a sweep an earlier tuner started
                restored = tune.Tuner.restore(folder.tune_uri, trainable, resume_unfinished=True, resume_errored=True)
            # Tune reads its searcher's state when the restored sweep starts; a copied or moved
            # folder's is made to name this folder first (once Tune's own state has read)
            moved.point_searcher_here(folder)
            return restored
        except TunerError:
            raise
        except Exception as error:  # a truncated or foreign tuner.pkl
            reason = str(error).strip().splitlines()[0] if str(error).strip() else ""
            where = remote.join(folder.tune_uri, "tuner.pkl")
            raise TunerError(
                f"{where}: Tune's saved sweep cannot be restored ({type(error).__name__}: {reason})"
            ) from None
    search_alg = registry.build_searcher(
        sweep,
        slots,
        gpus_out_of_sight=use_gpu and not sweep.scaling.direct,
        cpus_kept_free=streamed,
        draw=folder.part - 1,  # an extension's random points are new ones
    )
    if run.searcher_from is not None:
        from ray.tune.search import Searcher

        if isinstance(search_alg, Searcher):  # model-based: its model, trials and random state as saved
            search_alg.restore_from_dir(run.searcher_from)
    if run.evaluated:
        from tuner.driver.progress import show

        told, outside = sweep.searcher.tell_earlier(search_alg, run.evaluated)
        show(
            f"  warm start: {told} trial(s) of {sweep.searcher.warm_start} told to the searcher"
            + (f" ({outside} outside this space left out)" if outside else "")
        )
    return tune.Tuner(
        trainable,
        # Optuna holds the space itself (define-by-run: tuner/search/tune_optuna.py)
        param_space={} if sweep.searcher.holds_space(sweep) else spaces.to_param_space(sweep.param_specs()),
        tune_config=tune.TuneConfig(
            metric=sweep.metric,
            mode=sweep.mode,
            search_alg=search_alg,
            scheduler=registry.build_scheduler(sweep, search_alg),
            num_samples=sweep.trials.num_samples,
            time_budget_s=sweep.trials.time_budget_s,
            # A direct trial's process (torch imported, data mapped) serves the next trial.
            reuse_actors=sweep.scaling.direct,
        ),
        run_config=tune.RunConfig(
            name=folder.tune.name,
            storage_path=folder.tune_storage,
            # Every checkpoint, as far as Tune knows; the records callback prunes each ended
            # trial to its `keep` best (see driver.callbacks.SweepRecords for why not Tune).
            checkpoint_config=tune.CheckpointConfig(
                num_to_keep=None, checkpoint_score_attribute=sweep.metric, checkpoint_score_order=sweep.mode
            ),
            failure_config=tune.FailureConfig(max_failures=sweep.trials.max_failures),
            # tuner's loop ends at train.epochs by itself; a user's function or command is ended there
            # (an objective ends itself, as in an Optuna study; asha's or median's max_t may end it sooner)
            stop={"training_iteration": sweep.train.epochs} if sweep.own_loop and not sweep.objective else None,
            callbacks=callbacks,
            verbose=0 if reporter is not None else 1,  # tuner's own view, or Ray's tables (--verbose)
        ),
    )
