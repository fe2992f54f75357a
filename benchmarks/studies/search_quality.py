"""Search quality (issue 26): tuner's searcher x scheduler choices against Optuna and Ray Tune,
at equal budgets, on problems with a known optimum and learning curves that cross.

    python benchmarks/studies/search_quality.py --quick                 # 1 seed, 2 problems, 3 contestants (~4 min)
    TUNER_DATA_DIR=DIR python benchmarks/studies/search_quality.py      # 10 seeds, everything (~7-8 h on 2 cores)
    TUNER_DATA_DIR=DIR python benchmarks/studies/search_quality.py --budgets epochs   # equal epochs only (~3-4 h)
    python benchmarks/studies/search_quality.py --problems branin,conditional --contestants "tuner random+asha,ray bohb"

The problems and their learning curves are in benchmarks/studies/search_problems.py (Branin,
Hartmann-6, a conditional optimizer space, two-objective ZDT1, and tuner's CNN on an
MNIST subset). Every contestant runs the same trial: each epoch takes its number from the
sweep's epoch counter, sleeps ``--epoch-s`` (a stand-in for the epoch's compute, which
releases the GIL as torch does), and reports the noisy curve plus, for the benchmark only,
the noise-free value of its configuration.

Contestants (``CONTESTANTS``, data):

- tuner, through its own machinery: ``tuner.run(sweep_dict, address=...)`` with
  ``trainable: bench_trial:train``, a module this script writes into a temporary code
  folder (beside a copy of search_problems.py), calling ``context.report`` every epoch with
  a checkpoint; MLflow on (sqlite in the output folder), as users run it. A contestant
  tuner refuses when the sweep is validated (ConfigError / TunerError) is skipped with one
  line; on MNIST tuner runs its own loop (``data: {dataset: mnist, train_subset}``).
- Optuna in-process: TPE with a HyperbandPruner (``trial.report`` / ``should_prune`` every
  epoch), ``n_jobs`` = the CPUs (threads; the epochs release the GIL); NSGA-II for two objectives.
- Ray Tune as documented: a function trainable with ``tune.report`` and a checkpoint every
  epoch, ``reuse_actors=True``; random search + ASHA, and TuneBOHB + HyperBandForBOHB
  (conditional spaces: ``tune.sample_from`` for random search, a ConfigSpace with conditions
  for BOHB); OptunaSearch with a metric list for two objectives (FIFO).

Budgets, each a separate sweep per (problem, contestant, seed):

- ``epochs``: N trials x max epochs (``Problem.trials x Problem.max_epochs``). Reports are
  cut at that many epochs, in the order the epochs were taken from the counter. A
  contestant that stops trials early gets up to ``ceil(budget / 2)`` trials (FIFO: N); a
  trial that starts once the budget is spent reports one (uncounted) epoch and ends.
- ``time``: the same wall-clock limit for the whole sweep (tuner ``trials.time_budget_s``,
  Tune's ``time_budget_s``, Optuna's ``timeout``), ``--time-budget`` or
  ``max(20 s, 2 x budget epochs x epoch_s / CPUs)`` (MNIST: ``Problem.time_budget_s``), with
  as many trials allowed as could fit (``budget x CPUs / epoch_s``); time counts from the call
  that starts the sweep, so tuner's and Tune's start-up are in it.

tuner has no epoch budget for a whole sweep (only ``trials.num_samples`` and
``trials.time_budget_s``), so the trial function above stops itself once the counter is past
the budget; Tune's and Optuna's trials do the same, so that every tool spends alike. On
MNIST tuner's own loop cannot see the counter: its epochs are ordered by ``reported_at``
and cut at the budget afterwards (the trials past it still run).

Measured on the 2-core machine: MLflow on or off changes a 108-trial tuner sweep (branin,
random + ASHA, 216 epochs of 0.1 s) by about 1-4 s of 19-23 s, so it stays on.

Regret: the noise-free value of the configuration with the best *reported* value so far,
minus the optimum; two objectives: the ideal hypervolume minus that of the noise-free
objectives of the trials whose latest reports are non-dominated; MNIST: the validation
error (1 - val_accuracy) of the best-reported epoch. Output: a markdown table (median and
IQR and min-max over seeds of the final regret) on stdout, ``results.json`` (every report of
every run) and one ``<problem>.png`` of regret over the budget (median, IQR band) in ``--out``.

One Ray for the whole script (``ray.init`` with the dashboard on 127.0.0.1); tuner joins it
through ``address``, Tune runs in it; the script shuts down only that Ray.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import traceback
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ray.tune import Callback
from search_problems import (
    MNIST_TRAIN_SUBSET,
    PROBLEMS,
    ZDT1_REFERENCE,
    EpochCounter,
    Problem,
    hypervolume,
    pareto_front,
    synthetic_epoch,
)

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]  # benchmarks/studies/<this script>
# common.py (the peers' MNIST data and training loop), here and in Ray's workers
CONTESTANTS_DIR = REPO / "benchmarks" / "contestants"
sys.path.insert(0, str(CONTESTANTS_DIR))
os.environ["PYTHONPATH"] = os.pathsep.join([str(CONTESTANTS_DIR), os.environ.get("PYTHONPATH", "")])


@dataclass(frozen=True)
class Contestant:
    name: str
    tool: str  # tuner, optuna, ray
    options: dict[str, Any]  # tuner: the sweep's sections; optuna / ray: what to build
    stops_early: bool = True  # may stop trials early: gets up to ceil(epoch budget / 2) trials, not N
    multi: bool = False  # a two-objective contestant (runs only on two-objective problems)


CONTESTANTS = [
    Contestant("tuner random+asha", "tuner", {"searcher": {"name": "random"}, "scheduler": {"name": "asha"}}),
    Contestant("tuner optuna+asha", "tuner", {"searcher": {"name": "optuna"}, "scheduler": {"name": "asha"}}),
    Contestant(
        "tuner hyperopt+fifo", "tuner", {"searcher": {"name": "hyperopt"}, "scheduler": {"name": "fifo"}}, False
    ),
    Contestant("tuner bohb", "tuner", {"searcher": {"name": "bohb"}, "scheduler": {"name": "bohb"}}),
    Contestant("tuner auto", "tuner", {"searcher": {"name": "auto"}}),  # may pick a scheduler of its own
    Contestant("tuner optuna-gp", "tuner", {"searcher": {"name": "optuna", "sampler": "gp"}}, False),
    Contestant("tuner dehb", "tuner", {"searcher": {"name": "dehb"}, "scheduler": {"name": "dehb"}}),
    Contestant("tuner tpe+pasha", "tuner", {"searcher": {"name": "optuna"}, "scheduler": {"name": "pasha"}}),
    Contestant("optuna tpe+hyperband", "optuna", {"sampler": "tpe", "pruner": "hyperband"}),
    Contestant("ray random+asha", "ray", {"searcher": "random", "scheduler": "asha"}),
    Contestant("ray bohb", "ray", {"searcher": "bohb", "scheduler": "bohb"}),
    # two objectives
    Contestant("tuner random (2 obj)", "tuner", {"searcher": {"name": "random"}}, False, multi=True),
    Contestant("tuner optuna-tpe (2 obj)", "tuner", {"searcher": {"name": "optuna"}}, False, multi=True),
    Contestant(  # population 10, as the in-process study's (Optuna's default 50 would be all random here)
        "tuner nsga-ii (2 obj)",
        "tuner",
        {"searcher": {"name": "optuna", "sampler": "nsga2", "population_size": 10}},
        False,
        True,
    ),
    Contestant("tuner auto (2 obj)", "tuner", {"searcher": {"name": "auto"}}, True, multi=True),
    Contestant("optuna nsga-ii", "optuna", {"sampler": "nsga2"}, False, multi=True),  # population 10
    Contestant("ray optuna (2 obj)", "ray", {"searcher": "optuna"}, False, multi=True),
]
QUICK_CONTESTANTS = ["tuner random+asha", "optuna tpe+hyperband", "ray random+asha"]
QUICK_PROBLEMS = ["branin", "conditional"]

# The trial function tuner runs (written into the sweep's code folder, beside search_problems.py).
TUNER_TRIAL = """
import json

import search_problems


def train(params, context):
    problem = search_problems.PROBLEMS[params["bench_problem"]]
    point = problem.point(params)
    counter = search_problems.EpochCounter(params["bench_counter"])
    budget, seed, epoch_s = int(params["bench_budget"]), int(params["bench_seed"]), float(params["bench_epoch_s"])
    folder = context.trial_dir / "state"
    folder.mkdir(exist_ok=True)
    for epoch in range(context.start_epoch, context.max_epochs):
        if budget and context.epoch > 0 and counter.spent() >= budget:
            return  # the sweep's epoch budget is spent
        metrics = search_problems.synthetic_epoch(problem, point, epoch + 1, seed, counter, epoch_s)
        (folder / "epoch.json").write_text(json.dumps({"epoch": epoch + 1}))
        context.report(metrics, checkpoint=folder)
"""


@dataclass
class Budget:
    mode: str  # "epochs" or "time"
    epochs: int  # the epoch budget (also the counter's limit in "epochs" mode; 0: none)
    seconds: float | None  # the time budget ("time" mode)
    trials: int  # the most trials the contestant may start
    name: str  # the run's name: the sweep's, Tune's experiment's
    counter: Path  # the run's epoch counter (a new file per run)


@dataclass
class Run:
    problem: str
    contestant: str
    seed: int
    mode: str
    status: str = "ok"  # ok, skipped: ..., failed: ...
    wall_s: float = 0.0
    trials: int = 0
    budget_epochs: int = 0
    budget_s: float | None = None
    # every report: spent (the epoch's number in the sweep), at (s since the call), trial,
    # values (as reported, minimised), truth (noise-free; = values for MNIST)
    reports: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Env:
    out: Path
    code_dir: Path
    address: str
    cpus: int
    epoch_s: float
    data_root: str
    time_budget: float | None


# --- tuner ----------------------------------------------------------------------------------
def tuner_space(problem: Problem) -> dict[str, Any]:
    if problem.branches:
        branches = {
            branch: {p.name: {p.kind: [p.low, p.high]} for p in params} for branch, params in problem.branches.items()
        }
        return {problem.choice: {"choice": branches}}
    return {p.name: {p.kind: [p.low, p.high]} for p in problem.params}


def tuner_sweep(problem: Problem, contestant: Contestant, seed: int, budget: Budget, env: Env) -> dict:
    sweep: dict[str, Any] = {
        "name": budget.name,
        "output_dir": str(env.out / "runs"),
        "seed": seed,
        "train": {"epochs": problem.max_epochs},
        "trials": {"num_samples": budget.trials},
        **json.loads(json.dumps(contestant.options)),
    }
    if budget.seconds is not None:
        sweep["trials"]["time_budget_s"] = budget.seconds
    if not problem.synthetic:  # tuner's own loop and CNN on the MNIST subset
        sweep.update(
            metric="val_accuracy",
            data={"dataset": "mnist", "root": env.data_root, "train_subset": MNIST_TRAIN_SUBSET, "download": False},
            model={"name": "cnn"},
            space={"params": tuner_space(problem)},
        )
        sweep["train"].update(batch_size=128, optimizer="adam", lr_schedule="constant")
        return sweep
    constants = {
        "bench_problem": problem.name,
        "bench_seed": seed,
        "bench_counter": str(budget.counter),
        "bench_budget": budget.epochs if budget.mode == "epochs" else 0,
        "bench_epoch_s": env.epoch_s,
    }
    sweep.update(
        trainable="bench_trial:train",
        code_dir=str(env.code_dir),
        metric=list(problem.objectives) if problem.multi else "objective",
        mode=["min"] * len(problem.objectives) if problem.multi else "min",
        space={"params": {**tuner_space(problem), **constants}},
    )
    return sweep


def run_tuner(problem: Problem, contestant: Contestant, seed: int, budget: Budget, env: Env, run: Run) -> None:
    import tuner
    from tuner.api import load
    from tuner.errors import ConfigError, TunerError

    sweep = tuner_sweep(problem, contestant, seed, budget, env)
    log = env.out / "logs" / f"{budget.name}.log"
    try:
        with quiet(log):
            load(sweep)  # validation only: a sweep tuner refuses is skipped, not worked around
    except TunerError as error:
        run.status = f"skipped: {one_line(error)}"
        return
    started = time.time()
    try:
        with quiet(log):
            results = tuner.run(sweep, address=env.address)
    except ConfigError as error:  # refused when the sweep is built (a searcher's option, a missing package)
        run.status = f"skipped: {one_line(error)}"
        return
    run.wall_s = time.time() - started
    rows = results.history.to_dict("records")
    run.trials = len({row["trial_id"] for row in rows})
    if problem.synthetic:
        for row in rows:
            names = problem.objectives
            run.reports.append(
                {
                    "spent": int(row["spent"]),
                    "at": float(row["at"]) - started,
                    "trial": str(row["trial_id"]),
                    "values": [float(row[n]) for n in names],
                    "truth": [float(row[f"true_{n}"]) for n in names],
                }
            )
        return
    # tuner's own loop sees no epoch counter: its epochs count in the order the driver had them
    # (``reported_at``, tuner/folder/records.py); the validation error is the value and the truth
    rows.sort(key=lambda row: (float(row["reported_at"]), int(row["training_iteration"])))
    for spent, row in enumerate(rows, start=1):
        error = 1.0 - float(row["val_accuracy"])
        at, trial = float(row["reported_at"]) - started, str(row["trial_id"])
        run.reports.append({"spent": spent, "at": at, "trial": trial, "values": [error], "truth": [error]})


# --- Optuna, in-process -------------------------------------------------------------------------
def optuna_suggest(trial: Any, problem: Problem) -> dict[str, Any]:
    """Define-by-run: a conditional branch's parameters are asked for only in that branch."""
    if problem.branches:
        branch = trial.suggest_categorical(problem.choice, sorted(problem.branches))
        values = {problem.choice: branch}
        for p in problem.branches[branch]:
            values[f"{branch}_{p.name}"] = trial.suggest_float(
                f"{branch}_{p.name}", p.low, p.high, log=p.kind == "loguniform"
            )
        return values
    return {p.name: trial.suggest_float(p.name, p.low, p.high, log=p.kind == "loguniform") for p in problem.params}


def run_optuna(problem: Problem, contestant: Contestant, seed: int, budget: Budget, env: Env, run: Run) -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    counter = EpochCounter(budget.counter)
    limit = budget.epochs if budget.mode == "epochs" else 0
    started = time.time()

    def objective(trial: optuna.Trial) -> Any:
        point = problem.point(optuna_suggest(trial, problem))
        mnist = None if problem.synthetic else MnistTrial(problem, seed, env.data_root, point)
        last = None
        for epoch in range(1, problem.max_epochs + 1):
            if limit and counter.spent() >= limit:
                if last is None:
                    raise optuna.TrialPruned()  # started after the budget was spent
                break
            if mnist is not None:
                metrics = mnist.epoch(epoch, counter)
            else:
                metrics = synthetic_epoch(problem, point, epoch, seed, counter, env.epoch_s)
            run.reports.append(report_of(problem, metrics, started, str(trial.number)))
            last = [metrics[n] for n in problem.objectives]
            if not problem.multi:
                trial.report(last[0], epoch)
                if trial.should_prune():
                    raise optuna.TrialPruned()
        return tuple(last) if problem.multi else last[0]

    def stop_when_spent(study: optuna.Study, _: Any) -> None:
        if limit and counter.spent() >= limit:
            study.stop()

    if problem.multi:
        study = optuna.create_study(
            directions=["minimize"] * len(problem.objectives),
            sampler=optuna.samplers.NSGAIISampler(seed=seed, population_size=10),
        )
    else:
        study = optuna.create_study(
            direction="minimize",
            sampler=optuna.samplers.TPESampler(seed=seed),
            pruner=optuna.pruners.HyperbandPruner(min_resource=1, max_resource=problem.max_epochs),
        )
    study.optimize(
        objective,
        n_trials=budget.trials if budget.mode == "epochs" else None,
        timeout=budget.seconds,
        n_jobs=env.cpus,
        callbacks=[stop_when_spent],
    )
    run.wall_s = time.time() - started
    run.trials = len(study.trials)


# --- Ray Tune, as documented ----------------------------------------------------------------------
def ray_trainable(config: dict[str, Any], bench: dict[str, Any]) -> None:
    """A plain Tune function trainable: resumes from its checkpoint (BOHB pauses trials), reports every epoch."""
    from ray import tune

    problem = PROBLEMS[bench["problem"]]
    point = problem.point(config)
    counter = EpochCounter(bench["counter"])
    mnist = None if problem.synthetic else MnistTrial(problem, bench["seed"], bench["data_root"], point)
    start = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            start = json.loads((Path(folder) / "epoch.json").read_text())["epoch"]
            if mnist is not None:
                mnist.load(Path(folder))
    for epoch in range(start, problem.max_epochs):
        if bench["budget"] and epoch > 0 and counter.spent() >= bench["budget"]:
            return
        if mnist is not None:
            metrics = mnist.epoch(epoch + 1, counter)
        else:
            metrics = synthetic_epoch(problem, point, epoch + 1, bench["seed"], counter, bench["epoch_s"])
        with tempfile.TemporaryDirectory() as folder:
            (Path(folder) / "epoch.json").write_text(json.dumps({"epoch": epoch + 1}))
            if mnist is not None:
                mnist.save(Path(folder))
            tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(folder))


def ray_space(problem: Problem, searcher: str, seed: int) -> Any:
    from ray import tune

    def domain(p: Any) -> Any:
        return tune.loguniform(p.low, p.high) if p.kind == "loguniform" else tune.uniform(p.low, p.high)

    if not problem.branches:
        return {p.name: domain(p) for p in problem.params}
    if searcher == "bohb":  # TuneBOHB takes a ConfigSpace with conditions (Ray's bohb example)
        import ConfigSpace as CS

        space = CS.ConfigurationSpace(seed=seed)
        choice = CS.CategoricalHyperparameter(problem.choice, sorted(problem.branches))
        space.add(choice)
        for branch, params in problem.branches.items():
            for p in params:
                hyper = CS.UniformFloatHyperparameter(f"{branch}_{p.name}", p.low, p.high, log=p.kind == "loguniform")
                space.add(hyper)
                space.add(CS.EqualsCondition(hyper, choice, branch))
        return space
    # random search: tune.sample_from on the branch already drawn (Tune's "conditional search spaces")
    rng = random.Random(seed)

    def draw(branch: str, p: Any) -> Any:
        def sample(config: dict[str, Any]) -> float | None:
            if config[problem.choice] != branch:
                return None
            if p.kind == "loguniform":
                return math.exp(rng.uniform(math.log(p.low), math.log(p.high)))
            return rng.uniform(p.low, p.high)

        return tune.sample_from(sample)

    space: dict[str, Any] = {problem.choice: tune.choice(sorted(problem.branches))}
    for branch, params in problem.branches.items():
        space.update({f"{branch}_{p.name}": draw(branch, p) for p in params})
    return space


def run_ray(problem: Problem, contestant: Contestant, seed: int, budget: Budget, env: Env, run: Run) -> None:
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, HyperBandForBOHB
    from ray.tune.search import BasicVariantGenerator, ConcurrencyLimiter

    name = budget.name
    shutil.rmtree(env.out / "ray_results" / name, ignore_errors=True)  # (an --out folder used before)
    searcher, scheduler = contestant.options["searcher"], contestant.options.get("scheduler", "fifo")
    bench = {
        "problem": problem.name,
        "seed": seed,
        "counter": str(budget.counter),
        "budget": budget.epochs if budget.mode == "epochs" else 0,
        "epoch_s": env.epoch_s,
        "data_root": env.data_root,
    }
    space = ray_space(problem, searcher, seed)
    metric, mode = ("f1", "min") if problem.multi else ("objective", "min")
    if searcher == "bohb":
        from ray.tune.search.bohb import TuneBOHB

        own = {} if isinstance(space, dict) else {"space": space, "metric": metric, "mode": mode}  # a ConfigSpace
        search_alg = ConcurrencyLimiter(TuneBOHB(seed=seed, **own), max_concurrent=env.cpus)
        schedule = HyperBandForBOHB(time_attr="training_iteration", max_t=problem.max_epochs, reduction_factor=3)
    elif searcher == "optuna":
        from ray.tune.search.optuna import OptunaSearch

        search_alg = OptunaSearch(metric=list(problem.objectives), mode=["min"] * len(problem.objectives), seed=seed)
        schedule, metric, mode = FIFOScheduler(), None, None  # Tune's schedulers compare one metric
    else:
        search_alg = BasicVariantGenerator(random_state=seed)
        schedule = (
            ASHAScheduler(time_attr="training_iteration", max_t=problem.max_epochs, grace_period=1, reduction_factor=2)
            if scheduler == "asha"
            else FIFOScheduler()
        )
    trainable = tune.with_resources(tune.with_parameters(ray_trainable, bench=bench), {"cpu": 1})
    started = time.time()
    collect = Collect(problem, started)
    experiment = tune.Tuner(
        trainable,
        param_space=space if isinstance(space, dict) else {},
        tune_config=tune.TuneConfig(
            metric=metric,
            mode=mode,
            search_alg=search_alg,
            scheduler=schedule,
            num_samples=budget.trials,
            time_budget_s=budget.seconds,
            reuse_actors=True,
        ),
        run_config=tune.RunConfig(storage_path=str(env.out / "ray_results"), name=name, verbose=0, callbacks=[collect]),
    )
    with quiet(env.out / "logs" / f"{name}.log"):
        experiment.fit()
    run.wall_s = time.time() - started
    run.trials = len({r["trial"] for r in collect.reports})  # (Tune's count holds trials it never started)
    run.reports.extend(collect.reports)


class Collect(Callback):
    """Every result as Tune's driver receives it, from every trial, in one list."""

    def __init__(self, problem: Problem, started: float):
        self.problem, self.started, self.reports = problem, started, []

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        self.reports.append(report_of(self.problem, result, self.started, str(trial.trial_id)))


# --- MNIST for the peers: tuner's CNN, trained as common.py trains it ---------------------------------
_MNIST_DATA: dict[tuple[str, int], Any] = {}


class MnistTrial:
    """One trial of the peers on the MNIST subset: tuner's light CNN (its defaults: 16/32
    channels, hidden 128, no BatchNorm) with the trial's dropout, Adam at the trial's
    learning rate, batch 128, constant rate, on tuner's split (seeded by the benchmark
    seed, as tuner splits by the sweep's seed). The data are loaded once per process."""

    def __init__(self, problem: Problem, seed: int, data_root: str, point: dict[str, Any]):
        import torch

        from tuner.models.builtin import MnistCnn

        torch.set_num_threads(1)
        self.problem, self.seed, self.data_root = problem, seed, data_root
        torch.manual_seed(seed)
        self.model = MnistCnn(1, 10, 28, dropout=point["dropout"])
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=point["lr"])

    def data(self) -> Any:
        from common import Budget, Tensors

        key = (self.data_root, self.seed)
        if key not in _MNIST_DATA:
            budget = Budget(suite="default", lrs=[], epochs=self.problem.max_epochs, seed=self.seed)
            budget.train_subset, budget.data_root = MNIST_TRAIN_SUBSET, self.data_root
            with warnings.catch_warnings():  # torch: "the given NumPy array is not writable" (it is only read)
                warnings.simplefilter("ignore", UserWarning)
                _MNIST_DATA[key] = Tensors(budget)
        return _MNIST_DATA[key]

    def epoch(self, epoch: int, counter: EpochCounter) -> dict[str, float]:
        import torch
        from common import accuracy, train_epoch

        data = self.data()
        spent = counter.take()
        generator = torch.Generator().manual_seed(self.seed * 1000 + epoch)
        train_epoch(self.model, self.optimizer, data.train_x, data.train_y, 128, generator)
        error = 1.0 - accuracy(self.model, data.val_x, data.val_y)
        return {"objective": error, "true_objective": error, "spent": spent, "at": time.time(), "epoch_of_trial": epoch}

    def save(self, folder: Path) -> None:
        import torch

        torch.save({"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}, folder / "state.pt")

    def load(self, folder: Path) -> None:
        import torch

        state = torch.load(folder / "state.pt", weights_only=True)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])


# --- the reports, the regret -------------------------------------------------------------------
def report_of(problem: Problem, metrics: dict[str, Any], started: float, trial: str) -> dict[str, Any]:
    names = problem.objectives
    return {
        "spent": int(metrics["spent"]),
        "at": float(metrics["at"]) - started,
        "trial": trial,
        "values": [float(metrics[n]) for n in names],
        "truth": [float(metrics[f"true_{n}"]) for n in names],
    }


def regret_curve(problem: Problem, run: Run, xs: list[float], by: str) -> list[float | None]:
    """The regret after each budget point in ``xs`` (epochs spent, or seconds), None before the
    first report; reports beyond the epoch budget do not count."""
    reports = sorted(run.reports, key=lambda r: (r[by], r["spent"]))
    if by == "spent":
        reports = [r for r in reports if r["spent"] <= run.budget_epochs]
    out: list[float | None] = []
    index, best, latest = 0, None, {}
    for x in xs:
        while index < len(reports) and reports[index][by] <= x:
            report = reports[index]
            index += 1
            if problem.multi:
                latest[report["trial"]] = report
            elif best is None or report["values"][0] < best["values"][0]:
                best = report
        if problem.multi:
            out.append(hypervolume_gap(problem, list(latest.values())) if latest else None)
        else:
            out.append(best["truth"][0] - problem.optimum if best else None)
    return out


def hypervolume_gap(problem: Problem, reports: list[dict[str, Any]]) -> float:
    front = pareto_front([tuple(r["values"]) for r in reports])
    return problem.optimum - hypervolume([tuple(reports[i]["truth"]) for i in front], ZDT1_REFERENCE)


def final_regret(problem: Problem, run: Run) -> float | None:
    if not run.reports:
        return None
    if run.mode == "epochs":
        return regret_curve(problem, run, [run.budget_epochs], "spent")[0]
    return regret_curve(problem, run, [math.inf], "at")[0]


def spent_epochs(run: Run) -> int:
    return min(run.budget_epochs, max((r["spent"] for r in run.reports), default=0))


# --- output ---------------------------------------------------------------------------------------
def quantiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) == 1:
        return values[0], values[0], values[0]
    q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, median, q3


def table(problems: dict[str, Problem], runs: list[Run]) -> str:
    lines = [
        "| problem | budget | contestant | median regret | IQR | min - max | seeds | budget spent | median wall s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    groups: dict[tuple[str, str, str], list[Run]] = {}
    for run in runs:
        groups.setdefault((run.problem, run.mode, run.contestant), []).append(run)
    for (problem_name, mode, contestant), group in groups.items():
        problem = problems[problem_name]
        done = [r for r in group if r.status == "ok" and r.reports]
        budget = f"{group[0].budget_epochs} epochs" if mode == "epochs" else f"{group[0].budget_s:.0f} s"
        if not done:
            status = group[0].status if len(group[0].status) < 160 else group[0].status[:157] + "..."
            lines.append(f"| {problem_name} | {budget} | {contestant} | {status} | | | 0 | | |")
            continue
        regrets = [final_regret(problem, r) for r in done]
        q1, median, q3 = quantiles(regrets)
        spent = (
            f"{min(spent_epochs(r) for r in done)}-{max(spent_epochs(r) for r in done)}"
            if mode == "epochs"
            else f"{statistics.median(len(r.reports) for r in done):.0f} epochs"
        )
        lines.append(
            f"| {problem_name} | {budget} | {contestant} | {median:.4g} | {q1:.4g} - {q3:.4g} | "
            f"{min(regrets):.4g} - {max(regrets):.4g} | {len(done)} | {spent} | "
            f"{statistics.median(r.wall_s for r in done):.1f} |"
        )
    return "\n".join(lines)


def plot(problem: Problem, runs: list[Run], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = sorted({r.mode for r in runs}, key=["epochs", "time"].index)
    figure, axes = plt.subplots(1, len(modes), figsize=(6.5 * len(modes), 4.5), squeeze=False)
    for ax, mode in zip(axes[0], modes, strict=True):
        chosen = [r for r in runs if r.mode == mode and r.status == "ok" and r.reports]
        if not chosen:
            continue
        if mode == "epochs":
            top, by = max(r.budget_epochs for r in chosen), "spent"
            xs = list(range(1, top + 1))
        else:
            top, by = max(r.wall_s for r in chosen), "at"
            xs = [top * i / 200 for i in range(1, 201)]
        for contestant in dict.fromkeys(r.contestant for r in chosen):
            curves = [regret_curve(problem, r, xs, by) for r in chosen if r.contestant == contestant]
            points = []
            for i, x in enumerate(xs):
                column = [c[i] for c in curves if c[i] is not None]
                if len(column) == len(curves):  # every seed has a value
                    points.append((x, *quantiles([max(v, 1e-6) for v in column])))
            if points:
                x, q1, median, q3 = zip(*points, strict=True)
                (line,) = ax.plot(x, median, label=f"{contestant} ({len(curves)})", drawstyle="steps-post")
                ax.fill_between(x, q1, q3, color=line.get_color(), alpha=0.15, step="post")
        ax.set_yscale("log")
        ax.set_xlabel("epochs spent" if mode == "epochs" else "wall seconds since the sweep's call")
        ax.set_ylabel("hypervolume gap" if problem.multi else "regret (median, IQR band)")
        ax.set_title(f"{problem.name}: equal {'epochs' if mode == 'epochs' else 'wall time'}")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


# --- plumbing ---------------------------------------------------------------------------------------
def slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text).strip("-").replace("--", "-")


def one_line(error: BaseException) -> str:
    return " ".join(str(error).split())[:300]


@contextlib.contextmanager
def quiet(log: Path):
    """Whatever a tool prints goes to ``log`` (the benchmark prints one line per run)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as stream, contextlib.redirect_stdout(stream), contextlib.redirect_stderr(stream):
        yield


def write_code_dir(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(HERE / "search_problems.py", folder / "search_problems.py")
    (folder / "bench_trial.py").write_text(TUNER_TRIAL)


def budget_for(problem: Problem, contestant: Contestant, seed: int, mode: str, env: Env, quick: bool) -> Budget:
    name = f"{problem.name}-{slug(contestant.name)}-{mode}-s{seed}"
    counter = env.out / "counters" / f"{name}.txt"
    counter.unlink(missing_ok=True)  # (an --out folder used before)
    epochs = problem.epoch_budget
    if mode == "time":
        seconds = env.time_budget or problem.time_budget_s or max(20.0, 2 * epochs * env.epoch_s / env.cpus)
        if quick:
            seconds = min(seconds, 20.0)
        # as many trials as could fit (each spends at least one epoch): the time budget ends the sweep
        epoch_s = env.epoch_s if problem.synthetic else 2.0  # (an MNIST-subset epoch takes 2-4 s on one core)
        trials = math.ceil(seconds * env.cpus / max(epoch_s, 0.05))
        return Budget("time", epochs, seconds, max(trials, problem.trials), name, counter)
    trials = math.ceil(epochs / 2) if contestant.stops_early else problem.trials
    return Budget("epochs", epochs, None, max(trials, problem.trials), name, counter)


RUNNERS = {"tuner": run_tuner, "optuna": run_optuna, "ray": run_ray}


def run_one(
    problem: Problem, contestant: Contestant, seed: int, mode: str, env: Env, quick: bool, skipped: dict
) -> Run:
    budget = budget_for(problem, contestant, seed, mode, env, quick)
    run = Run(problem.name, contestant.name, seed, mode, budget_epochs=budget.epochs, budget_s=budget.seconds)
    if (problem.name, contestant.name) in skipped:  # refused once: the same sweep for every seed and budget
        run.status = skipped[problem.name, contestant.name]
        return run
    try:
        RUNNERS[contestant.tool](problem, contestant, seed, budget, env, run)
    except Exception as error:  # one failed run does not end the benchmark
        run.status = f"failed: {one_line(error)}"
        with open(env.out / "logs" / "failures.log", "a") as log:
            log.write(f"--- {problem.name} {contestant.name} {mode} seed {seed}\n{traceback.format_exc()}\n")
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=10, help="seeds per problem and contestant (mnist: at most 3)")
    parser.add_argument("--problems", default=",".join(PROBLEMS), help=f"of: {', '.join(PROBLEMS)}")
    parser.add_argument("--contestants", default=None, help="comma-separated names (default: all)")
    parser.add_argument("--budgets", default="epochs,time", help="epochs, time or both")
    parser.add_argument(
        "--quick", action="store_true", help="1 seed, a quarter of the trials, 3 contestants, 2 problems"
    )
    parser.add_argument("--epoch-s", type=float, default=0.1, help="seconds each synthetic epoch sleeps")
    parser.add_argument("--time-budget", type=float, default=None, help="seconds per sweep in the time budget")
    parser.add_argument("--cpus", type=int, default=os.cpu_count(), help="Ray's CPUs (= concurrent trials)")
    parser.add_argument("--out", default=None, help="output folder (default: a new temporary one)")
    parser.add_argument(
        "--from",
        dest="saved",
        default=None,
        help="results.json files, comma-separated: their runs' table and curves together (runs cut short too)",
    )
    args = parser.parse_args()
    if args.saved:
        return from_saved([Path(p) for p in args.saved.split(",") if p], Path(args.out) if args.out else None)

    problems = [p.strip() for p in args.problems.split(",") if p.strip()]
    names = [c.strip() for c in args.contestants.split(",")] if args.contestants else [c.name for c in CONTESTANTS]
    if args.quick:
        args.seeds = 1
        problems = problems if args.problems != parser.get_default("problems") else QUICK_PROBLEMS
        names = names if args.contestants else QUICK_CONTESTANTS
    unknown = [p for p in problems if p not in PROBLEMS] + [n for n in names if n not in {c.name for c in CONTESTANTS}]
    if unknown:
        raise SystemExit(f"unknown problem or contestant: {', '.join(unknown)}")
    contestants = [c for c in CONTESTANTS if c.name in names]
    modes = [m.strip() for m in args.budgets.split(",") if m.strip()]
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="search-quality-"))
    out.mkdir(parents=True, exist_ok=True)
    data_root = os.environ.get("TUNER_DATA_DIR", str(REPO / "data"))
    selected = {name: PROBLEMS[name] for name in problems}
    if args.quick:  # a quarter of the trials: the epoch budget (and so the time budget) shrinks with them
        selected = {name: quick_problem(problem) for name, problem in selected.items()}

    import ray

    # Tune's end-of-run listing of trials a time budget cut before they wrote anything
    for name in ("ray.tune.analysis.experiment_analysis", "ray.tune.logger"):
        logging.getLogger(name).setLevel(logging.ERROR)
    ray.init(
        address="local",
        num_cpus=args.cpus,
        include_dashboard=True,
        dashboard_host="127.0.0.1",
        log_to_driver=False,
        configure_logging=True,
        logging_level="WARNING",
    )
    env = Env(
        out=out,
        code_dir=out / "code",
        address=ray.get_runtime_context().gcs_address,
        cpus=args.cpus,
        epoch_s=args.epoch_s,
        data_root=data_root,
        time_budget=args.time_budget,
    )
    write_code_dir(env.code_dir)
    (out / "counters").mkdir(exist_ok=True)
    runs: list[Run] = []
    skipped: dict[tuple[str, str], str] = {}
    started = time.time()
    try:
        for seed in range(args.seeds):
            for problem in selected.values():
                if not problem.synthetic and seed >= 3:
                    continue  # the real task: a few seeds only
                for contestant in contestants:
                    if contestant.multi != problem.multi:
                        continue
                    for mode in modes:
                        run = run_one(problem, contestant, seed, mode, env, args.quick, skipped)
                        runs.append(run)
                        if (problem.name, contestant.name) not in skipped:
                            print(summary_line(problem, run), flush=True)
                        if run.status.startswith("skipped"):
                            skipped[problem.name, contestant.name] = run.status
                        (out / "results.json").write_text(json.dumps(raw(args, selected, runs), default=float))
    finally:
        ray.shutdown()
    print(f"\n{len(runs)} runs in {time.time() - started:.0f} s\n")
    print(table(selected, runs))
    for problem in selected.values():
        chosen = [r for r in runs if r.problem == problem.name]
        if any(r.status == "ok" for r in chosen):
            plot(problem, chosen, out / f"{problem.name}.png")
    print(f"\nraw results: {out / 'results.json'}; curves: {out}/<problem>.png; tools' output: {out / 'logs'}")


def quick_problem(problem: Problem) -> Problem:
    from dataclasses import replace

    return replace(problem, trials=max(4, problem.trials // 4))


def summary_line(problem: Problem, run: Run) -> str:
    if run.status != "ok":
        if run.status.startswith("skipped"):
            return f"skipped {run.contestant} ({run.problem}): {run.status.split(': ', 1)[1]}"
        return f"failed {run.contestant} ({run.problem}, {run.mode}, seed {run.seed}): {run.status.split(': ', 1)[1]}"
    regret = final_regret(problem, run)
    spent = f"{spent_epochs(run)}/{run.budget_epochs} epochs" if run.mode == "epochs" else f"{len(run.reports)} epochs"
    return (
        f"{run.problem:<12} {run.mode:<6} seed {run.seed:<2} {run.contestant:<22} regret {regret:.4g}  "
        f"({spent}, {run.trials} trials, {run.wall_s:.1f} s)"
    )


def from_saved(paths: list[Path], out: Path | None) -> None:
    """The table and curves of saved results.json files (every run they hold, finished or cut short):
    runs split over several invocations (one per budget, some contestants, more seeds) read as one."""
    problems: dict[str, Problem] = {}
    runs: list[Run] = []
    for path in paths:
        saved = json.loads(path.read_text())
        problems.update({name: PROBLEMS[name] for name in saved["problems"]})
        runs += [Run(**run) for run in saved["runs"]]
    out = out or paths[0].parent
    out.mkdir(parents=True, exist_ok=True)
    seeds = sorted({run.seed for run in runs})
    print(f"{len(runs)} runs, seeds {seeds[0]}-{seeds[-1]}, from {', '.join(map(str, paths))}\n")
    print(table(problems, runs))
    for problem in problems.values():
        chosen = [r for r in runs if r.problem == problem.name]
        if any(r.status == "ok" for r in chosen):
            plot(problem, chosen, out / f"{problem.name}.png")
    print(f"\ncurves: {out}/<problem>.png")


def raw(args: argparse.Namespace, problems: dict[str, Problem], runs: list[Run]) -> dict[str, Any]:
    return {
        "args": vars(args),
        "problems": {name: asdict(problem) for name, problem in problems.items()},
        "runs": [asdict(run) for run in runs],
    }


if __name__ == "__main__":
    sys.exit(main())
