"""The sweep file: schema, defaults (all here, in one place) and validation.

Everything is checked when the file loads, before Ray starts: unknown keys (with a
did-you-mean), types, ranges, names from the registries, and combinations that
cannot work. Errors read ``file:line: field.path: what is wrong, but got value``.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from tuner.errors import ConfigError
from tuner.folder import remote
from tuner.spec import spaces
from tuner.spec.shipped import submitted_file
from tuner.spec.yamlio import LoadedYaml, load_yaml, parse_scalar

EXPERIMENTS_DIR = Path(__file__).resolve().parents[2] / "experiments"
METRICS = {
    "val_accuracy": "max",
    "val_loss": "min",
    "train_loss": "min",
    "params": "min",  # the model's parameter count
    "latency_ms": "min",  # inference per image, measured after each epoch (only when an objective)
}
# what may be optimised at all with tuner's loop: one metric, or several objectives
SINGLE_ONLY = ("params", "latency_ms")
# The space's parameter that is a choice of models (written as model.name: {choice: ...})
MODEL_CHOICE = "model"
CHOOSABLE_MODELS = ("cnn", "resnet18", "resnet34", "synthetic")  # and torchvision:<builder>


class Strict(BaseModel):
    """Base for every section: unknown keys are errors with a did-you-mean."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    open_options: ClassVar[bool] = False  # OpenOptions: keys besides the fields are options

    @model_validator(mode="before")
    @classmethod
    def _reject_unknown_keys(cls, data: Any) -> Any:
        if isinstance(data, dict) and not cls.open_options:
            valid = sorted(cls.model_fields)
            for key in data:
                if key not in cls.model_fields:
                    close = difflib.get_close_matches(str(key), valid, n=1)
                    hint = f"; did you mean {close[0]!r}?" if close else ""
                    raise _custom(
                        "unknown_key",
                        "unknown key {key!r}{hint} (valid keys: {valid})",
                        key=key,
                        hint=hint,
                        valid=", ".join(valid),
                    )
        return data


# --- data -----------------------------------------------------------------------------
BUILT_IN_DATASETS = ("mnist", "fashion_mnist", "cifar10", "synthetic")


class SparkSessionConfig(Strict):
    """The Spark session RayDP starts on the sweep's Ray (``raydp.init_spark``'s knobs)."""

    executors: int = Field(1, ge=1, le=4096)
    executor_cores: int = Field(1, ge=1, le=512)
    executor_memory: str = Field("1g", pattern=r"^[0-9]+[kmgtKMGT]?[bB]?$")  # as Spark writes it: 512m, 2g
    configs: dict[str, str] = Field(default_factory=dict)  # more Spark configs, e.g. spark.sql.shuffle.partitions
    start_timeout_s: float = Field(180.0, gt=0, le=3600)  # Spark not up by then: one line, nothing left
    keep: bool = False  # true: left running through the sweep, its executors' CPUs counted out of the trials'


class SparkConfig(Strict):
    """``data.dataset: spark``: Spark on the sweep's Ray reads and prepares the data;
    the trials get it through Ray Data (tuner/data/spark.py)."""

    input: str  # a path or URI Spark reads (a file, a folder, a glob)
    format: Literal["auto", "parquet", "csv", "json", "images"] = "auto"  # auto: from the name
    options: dict[str, str] = Field(default_factory=dict)  # the reader's options, e.g. header: "true"
    image_column: str = "image"  # PNG/JPEG bytes, or an array of pixel values
    pixel_columns: str | None = None  # instead: the numeric columns starting with this, in order (CSV)
    label_column: str = "label"  # integer classes, or strings (sorted into classes)
    split_column: str | None = None  # values train / val / test; else data.val_fraction, test_fraction
    test_fraction: float = Field(0.0, ge=0, lt=1)  # held out for the export's test score (seeded)
    standardise: bool = True  # mean and std per channel, fitted on the training split only
    function: str | None = Field(None, pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")  # module:function(spark, df) -> df
    session: SparkSessionConfig = Field(default_factory=SparkSessionConfig)


class DataConfig(Strict):
    dataset: Literal["mnist", "fashion_mnist", "cifar10", "synthetic", "image_folder", "parquet", "spark"] = "mnist"
    root: str | None = None  # built-in sets: None is $TUNER_DATA_DIR, else ./data
    path: str | None = None  # image_folder: DIR/train/<class>/*; parquet: a file, folder or glob
    image_size: int | None = Field(None, ge=8, le=4096)  # decode to size x size (needed for mixed sizes)
    channels: Literal[1, 3] = 3  # image_folder / parquet: grey or RGB
    image_column: str = "image"  # parquet: encoded PNG/JPEG bytes
    label_column: str = "label"  # parquet: integer or string labels
    streaming: Literal["auto", True, False] = "auto"  # stream with Ray Data when too big for memory
    object_store_share: float = Field(0.5, gt=0, le=1)  # auto: stream when decoded > this share of the store
    augment: list[Literal["random_crop", "horizontal_flip"]] = Field(default_factory=list)
    crop_padding: int = Field(4, ge=0, le=64)  # random_crop: pad, then crop back to size
    val_fraction: float = Field(0.1, gt=0, lt=1)  # held out of the training set
    train_subset: int | None = Field(None, ge=100)  # use N training images (seeded)
    test_subset: int | None = Field(None, ge=100)  # score the export on the first N test images
    download: bool = True  # with torchvision, when the files are missing
    spark: SparkConfig | None = None  # dataset: spark

    @model_validator(mode="after")
    def _source(self) -> DataConfig:
        if (self.dataset == "spark") != (self.spark is not None):
            raise _fail(
                "data.spark: dataset 'spark' is read and prepared as data.spark says, and only it has that section, "
                "but got dataset {dataset!r}",
                dataset=self.dataset,
            )
        if self.dataset == "spark" and not self.image_size:
            raise _fail("data.image_size: Spark's images are decoded to image_size x image_size; set it, e.g. 28")
        own = self.dataset in ("image_folder", "parquet")
        if own and not self.path:
            raise _fail(
                "data.path: dataset {dataset!r} needs data.path (a folder or Parquet files)", dataset=self.dataset
            )
        if not own and self.path:
            raise _fail(
                "data.path: dataset {dataset!r} is read from data.root; data.path is for image_folder and parquet",
                dataset=self.dataset,
            )
        return self


# --- models ---------------------------------------------------------------------------
class CnnConfig(Strict):
    """The classic MNIST CNN: two 3x3 convs, max-pool, dropout, two linear layers."""

    name: Literal["cnn"] = "cnn"
    conv1: int = Field(16, ge=1, le=1024)  # channels of the first conv
    conv2: int = Field(32, ge=1, le=1024)  # channels of the second conv
    hidden: int = Field(128, ge=1, le=8192)  # width of the first linear layer
    dropout: float = Field(0.25, ge=0, lt=1)  # after the pool
    fc_dropout: float = Field(0.5, ge=0, lt=1)  # after the first linear layer
    batch_norm: bool = False  # a BatchNorm after each conv


class ResNetConfig(Strict):
    """torchvision ResNet with a 3x3 stride-1 stem and no max-pool, for 28/32 px inputs."""

    name: Literal["resnet18", "resnet34"]
    zero_init_residual: bool = False


class SyntheticConfig(Strict):
    """No training: each epoch sleeps ``epoch_s`` and reports a known noisy learning curve
    of ``train.lr`` and ``train.weight_decay`` (tuner/trial/synthetic.py), to measure tuner itself."""

    name: Literal["synthetic"]
    epoch_s: float = Field(0.0, ge=0, le=3600)  # seconds each epoch sleeps
    noise: float = Field(0.005, ge=0, le=0.5)  # std of the accuracy's measurement noise


class OpenOptions(Strict):
    """A model whose options are its builder's keywords: any key besides the named fields
    is passed on (and may be searched); the builder's signature checks them at load."""

    model_config = ConfigDict(extra="allow", frozen=True)
    open_options: ClassVar[bool] = True

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class TorchvisionConfig(OpenOptions):
    """Any torchvision classification network by name (tuner/models/zoo.py): the
    classifier sized to the data's classes, grey images repeated to three channels."""

    name: str = Field(pattern=r"^torchvision:[a-z][a-z0-9_]*$")  # torchvision:resnet50
    # A local state dict (.pth) to start from, read by each trial: a path every node sees,
    # like data.path (relative to the working folder). Nothing is downloaded.
    weights: str | None = None

    @field_validator("weights")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        return str(Path(value).expanduser().resolve()) if value else value

    @field_validator("name")
    @classmethod
    def _known_builder(cls, name: str) -> str:
        from tuner.errors import TunerError
        from tuner.models import zoo

        try:
            zoo.builder(name)
        except TunerError as error:  # names the closest builder
            raise _custom("unknown_model", str(error).removeprefix("model.name: ")) from None
        return name


class FactoryConfig(OpenOptions):
    """A user's model factory (tuner/models/factory.py): ``module:function`` in the code
    folder, called with the other keys of this section and the data's shape."""

    name: Literal["factory"] = "factory"
    factory: str  # my_models:build

    @field_validator("factory")
    @classmethod
    def _reference(cls, value: str) -> str:
        from tuner.usercode.names import check_reference

        return check_reference(value)


MODEL_TAGS = ("cnn", "resnet18", "resnet34", "synthetic", "torchvision", "factory")


def _model_kind(data: Any) -> str | None:
    if isinstance(data, dict):
        if "factory" in data:
            return "factory"
        name = data.get("name", "cnn")
    else:
        name = getattr(data, "name", None)
    if isinstance(name, str) and name.startswith("torchvision:"):
        return "torchvision"
    return name if isinstance(name, str) else None


ModelConfig = Annotated[
    Annotated[CnnConfig, Tag("cnn")]
    | Annotated[ResNetConfig, Tag("resnet18")]
    | Annotated[ResNetConfig, Tag("resnet34")]
    | Annotated[SyntheticConfig, Tag("synthetic")]
    | Annotated[TorchvisionConfig, Tag("torchvision")]
    | Annotated[FactoryConfig, Tag("factory")],
    Discriminator(_model_kind),
]


# --- training defaults (any of these may be searched) ---------------------------------
class TrainConfig(Strict):
    epochs: int = Field(3, ge=1, le=10_000)  # max epochs per trial (schedulers' max_t)
    batch_size: int = Field(128, ge=1, le=65_536)  # per worker
    lr: float = Field(1e-3, gt=0, le=10)
    optimizer: Literal["adam", "adamw", "sgd"] = "adam"
    momentum: float = Field(0.9, ge=0, lt=1)  # sgd only
    weight_decay: float = Field(0.0, ge=0, lt=1)
    lr_schedule: Literal["constant", "cosine", "step"] = "constant"
    label_smoothing: float = Field(0.0, ge=0, lt=1)
    amp: bool = True  # mixed precision on GPU (bf16 where supported); no effect on CPU


# --- search space ---------------------------------------------------------------------
class SpaceConfig(Strict):
    use: str | None = None  # a registry name: search_spaces/<use>.yaml
    params: dict[str, Any] = Field(default_factory=dict)  # inline; override `use`

    @field_validator("use")
    @classmethod
    def _known_space(cls, name: str | None) -> str | None:
        if name is not None and name not in spaces.registry_names():
            raise _custom(
                "unknown_space",
                "no search space named {name!r}; choose one of: {valid}",
                name=name,
                valid=", ".join(spaces.registry_names()),
            )
        return name


# --- searchers (tuner/spec/searchers.py builds them) ----------------------------------------
class WarmStart(Strict):
    # an earlier sweep folder (runs/<sweep>): its finished trials seed the searcher (optuna only)
    warm_start: str | None = None


class RandomSearcher(WarmStart):
    name: Literal["random"] = "random"


class GridSearcher(WarmStart):
    name: Literal["grid"]


OPTUNA_SAMPLERS = ("tpe", "cmaes", "gp", "qmc", "nsga2", "random")


class OptunaSearcher(WarmStart):
    name: Literal["optuna"]
    sampler: Literal["tpe", "cmaes", "gp", "qmc", "nsga2", "random"] = "tpe"
    n_startup_trials: int = Field(4, ge=0)  # random trials before tpe, cmaes or gp take over
    population_size: int = Field(50, ge=2)  # nsga2: trials per generation (the first is random)


class HyperOptSearcher(WarmStart):
    name: Literal["hyperopt"]
    n_initial_points: int = Field(4, ge=0)  # random trials before TPE takes over


class BohbSearcher(WarmStart):
    name: Literal["bohb"]


class AutoSearcher(WarmStart):
    """tuner picks the searcher (and the scheduler, if the file names none) from the space,
    the budget and the metric (tuner/spec/auto.py), and says what and why when the sweep starts."""

    name: Literal["auto"]


SearcherConfig = Annotated[
    RandomSearcher | GridSearcher | OptunaSearcher | HyperOptSearcher | BohbSearcher | AutoSearcher,
    Field(discriminator="name"),
]


# --- schedulers (tuner/spec/schedulers.py builds them); max_t is train.epochs ---------------
class FifoScheduler(Strict):
    name: Literal["fifo"] = "fifo"


class AshaScheduler(Strict):
    """Asynchronous successive halving (Li et al., 2018)."""

    name: Literal["asha"]
    grace_period: int = Field(1, ge=1)  # epochs before a trial can be stopped
    reduction_factor: float = Field(2, gt=1)
    brackets: int = Field(1, ge=1)


class HyperBandScheduler(Strict):
    """Synchronous HyperBand (Li et al., 2017); pauses and resumes trials."""

    name: Literal["hyperband"]
    reduction_factor: float = Field(3, gt=1)


class MedianScheduler(Strict):
    """Median stopping rule (Golovin et al., 2017)."""

    name: Literal["median"]
    grace_period: int = Field(1, ge=1)
    min_samples_required: int = Field(3, ge=1)


class PbtScheduler(Strict):
    """Population based training (Jaderberg et al., 2017)."""

    name: Literal["pbt"]
    perturbation_interval: int = Field(1, ge=1)  # epochs between exploit/explore
    quantile_fraction: float = Field(0.25, gt=0, le=0.5)
    resample_probability: float = Field(0.25, ge=0, le=1)
    mutations: dict[str, Any] | None = None  # default: every non-constant space param


class Pb2Scheduler(Strict):
    """Population based bandits (Parker-Holder et al., 2020): PBT whose explore step is a
    GP bandit over the bounds of the space's numeric parameters. Needs GPy (tuner[pb2])."""

    name: Literal["pb2"]
    perturbation_interval: int = Field(1, ge=1)  # epochs between exploit/explore
    quantile_fraction: float = Field(0.25, gt=0, le=0.5)


class BohbScheduler(Strict):
    """HyperBand for BOHB (Falkner et al., 2018); needs the bohb searcher."""

    name: Literal["bohb"]
    reduction_factor: float = Field(3, gt=1)


SchedulerConfig = Annotated[
    FifoScheduler | AshaScheduler | HyperBandScheduler | MedianScheduler | PbtScheduler | Pb2Scheduler | BohbScheduler,
    Field(discriminator="name"),
]


# --- trials, scaling, checkpoints -------------------------------------------------------
class TrialsConfig(Strict):
    num_samples: int = Field(4, ge=1)  # trials (per grid point, with grid values)
    max_concurrent: int | None = Field(None, ge=1)  # None: as many as resources allow
    time_budget_s: float | None = Field(None, gt=0)  # the sweep's wall-clock budget (Tune's)
    max_failures: int = Field(0, ge=0)  # retries per trial, from its last checkpoint
    # A running trial that reports nothing for this long is stopped as stalled (its threads'
    # stacks kept in its folder) and retried under max_failures; "auto": several times the
    # slowest epoch seen so far, never under a floor; null: never (tuner/driver/stalls.py).
    stall_timeout_s: Literal["auto"] | Annotated[float, Field(gt=0)] | None = "auto"


class ScalingConfig(Strict):
    workers: int = Field(1, ge=1, le=4096)  # Ray Train workers per trial (DDP)
    use_gpu: Literal["auto"] | bool = "auto"  # auto: GPUs if the cluster has any
    cpus_per_worker: float = Field(1.0, ge=0.05)
    gpus_per_worker: float = Field(1.0, gt=0, le=8)  # fractions let trials share a GPU
    # How a trial runs its loop: "direct" inside the Tune trial itself (one worker, no
    # TorchTrainer start-up), "torch_trainer" as a Ray Train run; auto: direct for 1 worker.
    runner: Literal["auto", "direct", "torch_trainer"] = "auto"
    # Once no trial waits and none will come, the running trials (direct, on a one-node
    # CPU cluster) train with the cores nobody holds; false: each keeps to its own CPUs
    # (the same floating-point sums whatever else runs: torch's depend on its threads).
    lend_spare_cores: bool = True

    @property
    def direct(self) -> bool:
        return self.runner == "direct" or (self.runner == "auto" and self.workers == 1)


class CheckpointConfig(Strict):
    keep: int = Field(2, ge=1)  # per trial, the best by the sweep metric


class MlflowConfig(Strict):
    enabled: bool = True
    tracking_uri: str | None = None  # None: $MLFLOW_TRACKING_URI, else sqlite:///<output_dir>/mlflow.db
    experiment: str | None = None  # None: the sweep name
    registered_model: str | None = None  # None: <dataset>_<model>, e.g. mnist_cnn
    # false: the best model is logged on the sweep's parent run, not made a version of
    # registered_model in the model registry (--smoke: a smoke run's model is not the real one)
    registry: bool = True


class TrackingConfig(Strict):
    mlflow: MlflowConfig = MlflowConfig()


class Objective(Strict):
    metric: str = Field(pattern=r"^[A-Za-z_][\w./-]*$")
    mode: Literal["max", "min"]


class SelectRule(Strict):
    """Which point of the Pareto front is the sweep's best (exported): the best by one
    objective among those meeting ``where``; ``select: knee`` (the default) is tuner/folder/pareto.py's knee."""

    max: str | None = None
    min: str | None = None
    where: str | None = None  # "params < 200000 and latency_ms <= 2"


class SweepConfig(Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    # tuner's loop reports val_accuracy, val_loss and train_loss; a user's code, its own names
    metric: str = Field("val_accuracy", pattern=r"^[A-Za-z_][\w./-]*$")
    mode: Literal["max", "min"] | None = None  # None: the metric's natural direction
    # Several objectives: written `metric: [val_accuracy, params]` with `mode: [max, min]`,
    # kept as metric/mode = the first and this list of every one (as sweep.yaml saves it).
    objectives: list[Objective] = Field(default_factory=list)
    select: Literal["knee"] | SelectRule = "knee"  # which point of the Pareto front is exported
    # A user's code (docs/own-code.md): a training function or a command runs each trial
    # instead of tuner's loop; model.factory names a model of the user's for either.
    trainable: str | None = None  # my_train:train, called as train(params, context)
    command: list[str] | None = Field(None, min_length=1)  # ["python", "train.py", "--lr", "{lr}"]
    code_dir: str | None = None  # the folder the user's modules are in; None: the sweep file's
    seed: int = 0
    output_dir: str = "runs"  # the sweep writes to <output_dir>/<name>/
    data: DataConfig = DataConfig()
    model: ModelConfig = CnnConfig()
    train: TrainConfig = TrainConfig()
    space: SpaceConfig = SpaceConfig()
    searcher: SearcherConfig = RandomSearcher()
    scheduler: SchedulerConfig = FifoScheduler()
    trials: TrialsConfig = TrialsConfig()
    scaling: ScalingConfig = ScalingConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    tracking: TrackingConfig = TrackingConfig()
    # The file it was read from and the line of every key: for the errors found after
    # validation, when the data are planned (a data.path that is not a folder).
    _origin: LoadedYaml | None = PrivateAttr(default=None)
    # searcher: auto: what it picked and why, said when the sweep starts
    _picked: str | None = PrivateAttr(default=None)

    @field_validator("output_dir")
    @classmethod
    def _a_path(cls, value: str) -> str:
        # A storage URI (s3://bucket/runs, gs://..., file:///...): tuner/folder/remote.py.
        if remote.is_remote(value) and not remote.usable_uri(value):
            raise _custom(
                "uri_output_dir",
                "not a storage URI tuner can use; give scheme://bucket/folder, e.g. s3://my-bucket/runs",
                value=value,
            )
        return value

    @model_validator(mode="before")
    @classmethod
    def _a_choice_of_models(cls, data: Any) -> Any:
        """``model: {name: {choice: {cnn: {...}, resnet18: {...}}}}``: the model section becomes
        the first model, and the space a conditional choice ``model`` over them, each value with
        its own options (tuner/trial/runner.py builds the one a trial took)."""
        model = data.get("model") if isinstance(data, dict) else None
        if not isinstance(model, dict) or not isinstance(model.get("name"), dict):
            return data
        choice = model["name"].get("choice") if len(model["name"]) == 1 else None
        if not isinstance(choice, dict) or not choice:
            raise _fail(
                "model.name: a model's name, or a choice of models with their options "
                "({{choice: {{cnn: {{...}}, resnet18: {{...}}}}}}), but got {name!r}",
                name=model["name"],
            )
        others = sorted(set(model) - {"name"})
        if others:
            raise _fail(
                "model.{key}: with a choice of models, give each model's options under its name in model.name.choice",
                key=others[0],
            )
        space = dict(data.get("space") or {})
        params = dict(space.get("params") or {})
        if MODEL_CHOICE in params:
            raise _fail("space.params.model: the choice of models is model.name's; give it there only")
        params[MODEL_CHOICE] = {"choice": {name: options or {} for name, options in choice.items()}}
        return {**data, "model": {"name": next(iter(choice))}, "space": {**space, "params": params}}

    @model_validator(mode="before")
    @classmethod
    def _several_objectives(cls, data: Any) -> Any:
        """``metric: [a, b]`` / ``mode: [max, min]``: metric and mode become the first, and
        ``objectives`` every one."""
        if not isinstance(data, dict) or not isinstance(data.get("metric"), list):
            if isinstance(data, dict) and isinstance(data.get("mode"), list):
                raise _fail(
                    "mode: a list of modes goes with a list of metrics, but metric is {m!r}", m=data.get("metric")
                )
            return data
        metrics, modes = data["metric"], data.get("mode")
        if not metrics or not all(isinstance(m, str) for m in metrics):
            raise _fail("metric: a list of metric names, but got {metrics!r}", metrics=metrics)
        if len(set(metrics)) != len(metrics):
            raise _fail("metric: each objective once, but got {metrics}", metrics=metrics)
        if modes is None:
            unknown = [m for m in metrics if m not in METRICS]
            if unknown:
                raise _fail(
                    "mode: say whether each metric is best at max or min (mode: [max, min, ...]); "
                    "{m!r} is not one of tuner's",
                    m=unknown[0],
                )
            modes = [METRICS[m] for m in metrics]
        if not isinstance(modes, list) or len(modes) != len(metrics):
            raise _fail(
                "mode: one mode per metric ({n} metrics: {metrics}), but got {modes!r}",
                n=len(metrics),
                metrics=metrics,
                modes=modes,
            )
        if len(metrics) == 1:
            return {**data, "metric": metrics[0], "mode": modes[0]}
        return {
            **data,
            "metric": metrics[0],
            "mode": modes[0],
            "objectives": [{"metric": m, "mode": mode} for m, mode in zip(metrics, modes, strict=True)],
        }

    @model_validator(mode="after")
    def _check(self) -> SweepConfig:
        _check_own_code(self)
        if self.mode is None:
            object.__setattr__(self, "mode", METRICS[self.metric])
        _check_space(self)
        if self.searcher.name == "auto":
            _pick(self)
        _check_objectives(self)
        _check_pairs(self)
        return self

    @property
    def objective_pairs(self) -> list[tuple[str, str]]:
        """(metric, mode) of every objective; [] for one metric."""
        return [(o.metric, o.mode) for o in self.objectives]

    def best_rule(self) -> Any:
        """``select`` as tuner/folder/pareto.py takes it."""
        from tuner.folder import pareto

        if not isinstance(self.select, SelectRule):
            return pareto.Rule()
        by = self.select.max or self.select.min
        where = pareto.parse_where(self.select.where) if self.select.where else ()
        return pareto.Rule(by=by, mode="max" if self.select.max else "min", where=where)

    def best_epoch(self, histories: dict[str, list[dict[str, Any]]]) -> Any:
        """The sweep's best (trial, epoch) over ``histories``: by its metric, or by ``select``
        on the Pareto front of several objectives (tuner.folder.records.best_epoch)."""
        from tuner.folder import records

        return records.best_epoch(histories, self.metric, self.mode, self.objective_pairs, self.best_rule())

    @property
    def picked(self) -> str | None:
        """What ``searcher: auto`` picked and why; None when the file named the searcher."""
        return getattr(self, "_picked", None)

    @property
    def own_loop(self) -> bool:
        """A user's training function or command runs each trial, not tuner's loop."""
        return self.trainable is not None or self.command is not None

    @property
    def uses_data(self) -> bool:
        """Whether trials get the data section's images: always in tuner's loop; a user's
        function or command only when the file has a data section."""
        return not self.own_loop or "data" in self.model_fields_set

    @property
    def has_model(self) -> bool:
        """Whether there is a model to export: tuner's loop, or a user's code with model.factory."""
        return not self.own_loop or isinstance(self.model, FactoryConfig)

    def searched_model_options(self) -> list[str]:
        """Searched names that go to a torchvision builder or a user's factory as options."""
        if not isinstance(self.model, OpenOptions):
            return []
        return [name for name in self.flat_specs() if name not in searchable_params(self.model)]

    def flat_specs(self) -> dict[str, spaces.ParamSpec]:
        """Every name a trial's config can hold, a conditional choice's parameters included."""
        return spaces.flat_specs(self.param_specs())

    def param_specs(self, *, registry_only: bool = False) -> dict[str, spaces.ParamSpec]:
        """The resolved search space: registry space, then inline params over it."""
        specs = spaces.load_registry_space(self.space.use) if self.space.use else {}
        if not registry_only:
            specs.update({k: spaces.parse_param(v) for k, v in self.space.params.items()})
        return specs

    @property
    def max_epochs(self) -> int:
        return self.train.epochs

    def locate(self, error: ConfigError) -> ConfigError:
        """``error``, about a field of this config (``data.path: ...``), naming the file and
        line the field was read from, as validation's errors do; as it was when that is unknown."""
        origin = getattr(self, "_origin", None)  # None: built in code, or unpickled from before
        if error.file is not None or origin is None:
            return error
        return ConfigError(error.reason, file=origin.file, line=_line_of_message(error.reason, origin))

    @property
    def total_trials(self) -> int:
        """num_samples, times every combination of grid values."""
        total = self.trials.num_samples
        for spec in self.param_specs().values():
            if spec.kind == "grid":
                total *= len(spec.args)
        return total


def searchable_params(model: BaseModel) -> dict[str, type[BaseModel]]:
    """Hyperparameter name -> the section that defines it."""
    names: dict[str, type[BaseModel]] = {n: TrainConfig for n in TrainConfig.model_fields if n != "epochs"}
    names["augment"] = DataConfig  # e.g. {choice: [[], [random_crop, horizontal_flip]]}
    names.update({n: type(model) for n in type(model).model_fields if n not in ("name", "factory", "weights")})
    return names


def _custom(kind: str, message: str, **ctx: Any) -> PydanticCustomError:
    """A pydantic error with a message formatted here (pydantic's templates know no ``!r``)."""
    text = message.format(**ctx)
    return PydanticCustomError(kind, "{text}", {"text": text, **ctx})


def _fail(message: str, **ctx: Any) -> PydanticCustomError:
    return _custom("sweep_check", message, **ctx)


def _parse_params(origin: str, params: dict[str, Any]) -> dict[str, spaces.ParamSpec]:
    specs = {}
    for name, value in params.items():
        try:
            specs[name] = spaces.parse_param(value)
        except ValueError as error:
            raise _fail("{where}.{name}: {error}", where=origin, name=name, error=error) from None
    return specs


def _check_space(cfg: SweepConfig) -> None:
    """Every searched name is a hyperparameter, and every value it can take is valid."""
    specs = {**cfg.param_specs(registry_only=True), **_parse_params("space.params", cfg.space.params)}
    mutations = {}
    if isinstance(cfg.scheduler, PbtScheduler) and cfg.scheduler.mutations:
        mutations = _parse_params("scheduler.mutations", cfg.scheduler.mutations)
        for name, spec in mutations.items():
            if spec.kind in ("constant", "grid"):
                raise _fail(
                    "scheduler.mutations.{name}: pbt mutates with a distribution or a choice, but got {dist} {args}",
                    name=name,
                    dist=spec.kind,
                    args=list(spec.args),
                )
    _check_branch_names("space.params", specs, set(specs))
    if cfg.own_loop:  # the user's function or command takes whatever it is given
        return
    models = specs.get(MODEL_CHOICE)
    if models is not None:
        specs = {k: v for k, v in specs.items() if k != MODEL_CHOICE}
        _check_model_choice(cfg, models)
    allowed = searchable_params(cfg.model)
    for origin, params in (("space.params", specs), ("scheduler.mutations", mutations)):
        for where, name, spec in _walk(origin, params):
            if name not in allowed and isinstance(cfg.model, OpenOptions):
                continue  # an option of the model's builder: its signature is checked at load
            if name not in allowed:
                close = difflib.get_close_matches(name, sorted(allowed), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise _fail(
                    "{where}.{name}: not a hyperparameter of model {model!r}{hint} (searchable: {valid})",
                    where=where,
                    name=name,
                    model=cfg.model.name,
                    hint=hint,
                    valid=", ".join(sorted(allowed)),
                )
            section = allowed[name]
            if section.model_fields[name].annotation is int and not _integral(spec):
                raise _fail(
                    "{where}.{name}: {name} is an integer; use randint, choice, grid or a quantized "
                    "distribution with integer bounds and q, but got {dist} {args}",
                    where=where,
                    name=name,
                    dist=spec.kind,
                    args=list(spec.args),
                )
            _check_values(where, name, spec, section, cfg.model.name)


def _check_values(where: str, name: str, spec: spaces.ParamSpec, section: type[BaseModel], model: str) -> None:
    """Every value ``name`` can take is valid for the section that defines it."""
    for value in spec.representative_values():
        data = {name: value} if section in (TrainConfig, DataConfig) else {"name": model, name: value}
        try:
            section.model_validate(data)
        except ValidationError as error:
            raise _fail(
                "{where}.{name}: value {value!r} is invalid ({reason})",
                where=where,
                name=name,
                value=value,
                reason=_lower_first(error.errors()[0]["msg"]),
            ) from None


def _check_model_choice(cfg: SweepConfig, models: spaces.ParamSpec) -> None:
    """Each model of ``model.name``'s choice is one of tuner's, and its options are its own."""
    if models.kind != "branches":
        raise _fail("model.name: a choice of models maps each model to its options ({{choice: {{cnn: {{}}, ...}}}})")
    for name, options in models.branches.items():
        if not isinstance(name, str) or not (name in CHOOSABLE_MODELS or name.startswith("torchvision:")):
            raise _fail(
                "model.name.choice.{name}: a choice of models takes {valid} or torchvision:<builder>",
                name=name,
                valid=", ".join(CHOOSABLE_MODELS),
            )
        try:
            model = TypeAdapter(ModelConfig).validate_python({"name": name})
        except ValidationError as error:
            raise _fail("model.name.choice.{name}: {reason}", name=name, reason=error.errors()[0]["msg"]) from None
        allowed = searchable_params(model)
        for where, option, spec in _walk(f"model.name.choice.{name}", options):
            if option not in allowed and not isinstance(model, OpenOptions):
                raise _fail(
                    "{where}.{option}: not an option of model {name!r} (its options: {valid})",
                    where=where,
                    option=option,
                    name=name,
                    valid=", ".join(sorted(n for n, s in allowed.items() if s is type(model))),
                )
            if option in allowed:
                _check_values(where, option, spec, allowed[option], name)


def _walk(origin: str, specs: dict[str, spaces.ParamSpec]) -> list[tuple[str, str, spaces.ParamSpec]]:
    """(where, name, spec) of every parameter, those under a conditional choice's values too
    (where: ``space.params.optimizer.sgd``)."""
    found = []
    for name, spec in specs.items():
        found.append((origin, name, spec))
        for value, params in spec.branches.items():
            found.extend(_walk(f"{origin}.{name}.{value}", params))
    return found


def _check_branch_names(origin: str, specs: dict[str, spaces.ParamSpec], outer: set[str]) -> None:
    """A parameter under a choice's value is named nowhere above it: a trial gets plain names."""
    for name, spec in specs.items():
        choice = "model.name.choice" if (origin, name) == ("space.params", MODEL_CHOICE) else f"{origin}.{name}"
        for value, params in spec.branches.items():
            for inner in params:
                if inner in outer or inner == name:
                    raise _fail(
                        "{choice}.{value}.{inner}: {inner!r} is already a parameter outside this branch; "
                        "a trial gets plain names, so give it in every branch or outside the choice only",
                        choice=choice,
                        value=value,
                        inner=inner,
                    )
            _check_branch_names(f"{origin}.{name}.{value}", params, outer | set(params) | {name})


def _check_objectives(cfg: SweepConfig) -> None:
    """Several objectives: metrics trials report, a searcher that compares them, FIFO, a rule."""
    names = [o.metric for o in cfg.objectives]
    if cfg.objectives and (names[0], cfg.objectives[0].mode) != (cfg.metric, cfg.mode):
        raise _fail(
            "objectives: the first objective is the metric ({metric}), but got {first}",
            metric=cfg.metric,
            first=names[0],
        )
    if not cfg.objectives:
        if cfg.metric in SINGLE_ONLY:
            raise _fail(
                "metric: {metric!r} alone would find the smallest model, however bad; give it beside another, "
                "e.g. metric: [val_accuracy, {metric}]",
                metric=cfg.metric,
            )
        if isinstance(cfg.select, SelectRule):
            raise _fail(
                "select: picks one point of a Pareto front, for several objectives (metric: [a, b]); "
                "with one metric the best is its best"
            )
        return
    if not cfg.own_loop:
        for objective in cfg.objectives:
            if objective.metric not in METRICS:
                raise _fail(
                    "metric: tuner's loop reports {known}, but got {metric!r}",
                    known=", ".join(METRICS),
                    metric=objective.metric,
                )
            if objective.mode != METRICS[objective.metric]:
                raise _fail(
                    "mode: {metric} is best at {natural}, but got {mode!r}",
                    metric=objective.metric,
                    natural=METRICS[objective.metric],
                    mode=objective.mode,
                )
    if cfg.scheduler.name != "fifo":
        raise _fail(
            "scheduler.name: {scheduler!r} compares trials by one metric, but the sweep has {n} objectives ({names}); "
            "use fifo (every trial runs its epochs)",
            scheduler=cfg.scheduler.name,
            n=len(names),
            names=", ".join(names),
        )
    searcher = cfg.searcher.name
    if searcher in ("hyperopt", "bohb") or (searcher == "optuna" and cfg.searcher.sampler == "cmaes"):
        which = "optuna's cmaes sampler" if searcher == "optuna" else f"searcher {searcher!r}"
        raise _fail(
            "searcher.name: {which} optimises one metric, but the sweep has {n} objectives; use optuna "
            "(sampler tpe, nsga2, gp, qmc or random), random or auto",
            which=which,
            n=len(names),
        )
    if cfg.searcher.warm_start is not None:
        raise _fail(
            "searcher.warm_start: a warm start tells one metric's results; the sweep has {n} objectives", n=len(names)
        )
    if isinstance(cfg.select, SelectRule):
        chosen = [k for k in ("max", "min") if getattr(cfg.select, k) is not None]
        if len(chosen) != 1:
            raise _fail("select: give max: METRIC or min: METRIC (one of them), optionally with where, or select: knee")
        by = getattr(cfg.select, chosen[0])
        from tuner.folder import pareto

        try:
            conditions = pareto.parse_where(cfg.select.where) if cfg.select.where else ()
        except ValueError as error:
            raise _fail("select.where: {error}", error=error) from None
        for name in [by, *(c.metric for c in conditions)]:
            if name not in names:
                raise _fail(
                    "select: {name!r} is not an objective; choose from {names}", name=name, names=", ".join(names)
                )


def _check_own_code(cfg: SweepConfig) -> None:
    """A user's function or command, or tuner's loop, and a metric the trials report."""
    if cfg.trainable is not None and cfg.command is not None:
        raise _fail(
            "trainable / command: a trial runs either a training function or a command, but both are given "
            "(trainable {trainable!r}, command {command})",
            trainable=cfg.trainable,
            command=cfg.command,
        )
    if cfg.trainable is not None:
        from tuner.usercode.names import check_reference

        try:
            check_reference(cfg.trainable)
        except ValueError as error:
            raise _fail("trainable: {error}", error=error) from None
    if cfg.own_loop and "model" in cfg.model_fields_set and not isinstance(cfg.model, FactoryConfig):
        raise _fail(
            "model.name: model {name!r} is trained by tuner's own loop, but the file gives {which} to train instead; "
            "with {which}, give model.factory (to export the best model) or no model section",
            name=cfg.model.name,
            which="trainable" if cfg.trainable is not None else "command",
        )
    if cfg.command is not None and cfg.scaling.workers > 1:
        raise _fail(
            "scaling.workers: a command runs as one process per trial, but scaling.workers is {workers}; "
            "start the workers inside the command (torchrun) or use trainable",
            workers=cfg.scaling.workers,
        )
    if cfg.own_loop:
        loop_only = sorted(set(cfg.train.model_fields_set) - {"epochs"})
        if loop_only:
            raise _fail(
                "train.{key}: a setting of tuner's own loop, which {which} replaces; give your code its values "
                "in space.params (a constant is a plain value there) and keep train.epochs only",
                key=loop_only[0],
                which="trainable" if cfg.trainable is not None else "command",
            )
    if cfg.metric not in METRICS:
        if not cfg.own_loop:
            raise _fail(
                "metric: tuner's loop reports {known}, but got {metric!r} (a training function or command of "
                "your own may report any metric)",
                known=", ".join(METRICS),
                metric=cfg.metric,
            )
        if cfg.mode is None:
            raise _fail(
                "metric: {metric!r} is your code's own; say whether it is best at max or min (mode: max or mode: min)",
                metric=cfg.metric,
            )


def _integral(spec: spaces.ParamSpec) -> bool:
    """Whether every value the distribution samples is a whole number."""
    if spec.kind in ("uniform", "loguniform"):
        return False
    if spec.is_quantized:
        return all(float(a).is_integer() for a in spec.args)
    return True


def _pick(cfg: SweepConfig) -> None:
    """``searcher: auto``: the searcher, and the scheduler unless the file names one."""
    from tuner.spec import auto

    choice = auto.pick(
        cfg.param_specs(),
        trials=cfg.trials.num_samples,
        epochs=cfg.train.epochs,
        scheduler_given="scheduler" in cfg.model_fields_set,
        objectives=len(cfg.objectives),
        scheduler=cfg.scheduler.name,
    )
    searcher = dict(choice.searcher)
    if cfg.searcher.warm_start is not None:
        if searcher["name"] != "optuna":  # only Optuna is told earlier results
            raise _fail(
                "searcher.warm_start: {reason}, which takes no earlier results; warm starts need Optuna "
                "(a space without grid values, a scheduler other than pbt, pb2 or bohb)",
                reason=choice.reason.split(";")[0],
            )
        searcher["warm_start"] = cfg.searcher.warm_start
    object.__setattr__(cfg, "searcher", TypeAdapter(SearcherConfig).validate_python(searcher))
    if choice.scheduler is not None:
        object.__setattr__(cfg, "scheduler", TypeAdapter(SchedulerConfig).validate_python(choice.scheduler))
        cfg.model_fields_set.add("scheduler")  # saved in sweep.yaml with the searcher
    cfg._picked = choice.reason


def _check_pairs(cfg: SweepConfig) -> None:
    searcher, scheduler = cfg.searcher.name, cfg.scheduler.name
    specs = cfg.param_specs()
    kinds = {spec.kind for spec in specs.values()}
    if "branches" in kinds:
        conditional = next(name for name, spec in specs.items() if spec.kind == "branches")
        if searcher in ("grid", "bohb"):
            why = {
                "grid": "a grid expands fixed lists, not parameters that exist under one value",
                "bohb": "its ConfigSpace space is built flat",
            }[searcher]
            raise _fail(
                "{where}: a conditional choice needs searcher random, optuna or hyperopt; "
                "searcher {searcher!r} cannot take one ({why})",
                where="model.name" if conditional == MODEL_CHOICE else f"space.params.{conditional}",
                searcher=searcher,
                why=why,
            )
        if scheduler in ("pbt", "pb2"):
            raise _fail(
                "{where}: scheduler {scheduler!r} mutates parameters every trial has, "
                "but a conditional choice's parameters exist in some trials only",
                where="model.name" if conditional == MODEL_CHOICE else f"space.params.{conditional}",
                scheduler=scheduler,
            )
    if cfg.searcher.warm_start is not None and searcher != "optuna":
        raise _fail(
            "searcher.warm_start: searcher {searcher!r} cannot be told earlier results (Ray's {searcher} takes "
            "no evaluated points); use optuna or auto",
            searcher=searcher,
        )
    if cfg.searcher.warm_start is not None and cfg.searcher.sampler == "qmc":
        raise _fail("searcher.warm_start: the qmc sampler draws a fixed sequence and learns nothing from trials")
    if (searcher == "bohb") != (scheduler == "bohb"):
        raise _fail(
            "searcher.name / scheduler.name: bohb searcher and bohb scheduler go together, "
            "but got searcher {searcher!r} with scheduler {scheduler!r}",
            searcher=searcher,
            scheduler=scheduler,
        )
    if "grid" in kinds and searcher not in ("random", "grid"):
        raise _fail(
            "space.params: grid values need the random or grid searcher, but got searcher {searcher!r} "
            "(use choice instead)",
            searcher=searcher,
        )
    if cfg.data.streaming is True and scheduler in ("hyperband", "bohb"):
        raise _fail(
            "data.streaming: true caps the trials running at once (CPUs stay free for Ray Data), which starves "
            "scheduler {scheduler!r}'s brackets; use asha, median, pbt or fifo, or data.streaming: auto",
            scheduler=scheduler,
        )
    if searcher == "grid" and "grid" not in kinds:
        raise _fail("searcher.name: 'grid' needs at least one {{grid: [...]}} parameter in the space")
    if searcher == "bohb" and any(spec.is_quantized for spec in specs.values()):
        raise _fail("space.params: bohb drops quantization; use choice instead of quniform/qloguniform")
    if scheduler in ("pbt", "pb2") and searcher != "random":
        raise _fail(
            "searcher.name: {scheduler} explores by itself and takes the random searcher, but got {searcher!r}",
            scheduler=scheduler,
            searcher=searcher,
        )
    if scheduler == "pb2" and not any(s.kind in spaces.RANGE_KINDS for s in specs.values()):
        raise _fail(
            "space.params: pb2 explores within the bounds of numeric parameters (uniform, loguniform, quniform, "
            "qloguniform, randint), but the space has none; use pbt for choices"
        )
    if scheduler == "pbt" and not (
        cfg.scheduler.mutations or any(s.kind not in ("constant", "grid") for s in specs.values())
    ):
        raise _fail("scheduler.mutations: pbt needs something to mutate: give mutations or a space with a distribution")
    grace = getattr(cfg.scheduler, "grace_period", None)
    if grace is not None and grace > cfg.train.epochs:
        raise _fail(
            "scheduler.grace_period: must be <= train.epochs ({epochs}), but got {grace}",
            epochs=cfg.train.epochs,
            grace=grace,
        )
    if scheduler != "fifo" and cfg.train.epochs < 2 and scheduler != "median":
        raise _fail(
            "train.epochs: scheduler {scheduler!r} needs at least 2 epochs to act, but got 1", scheduler=scheduler
        )
    if cfg.scaling.runner == "direct" and cfg.scaling.workers > 1:
        raise _fail(
            "scaling.runner: 'direct' runs one worker inside the trial, but scaling.workers is {workers}; "
            "use auto or torch_trainer",
            workers=cfg.scaling.workers,
        )
    if cfg.metric in METRICS and cfg.mode != METRICS[cfg.metric]:
        raise _fail(
            "mode: {metric} is best at {natural}, but got mode={mode!r}",
            metric=cfg.metric,
            natural=METRICS[cfg.metric],
            mode=cfg.mode,
        )


# --- loading ------------------------------------------------------------------------------
def resolve_sweep_path(name_or_path: str) -> Path:
    """A path as given, or a bare name looked up in ``experiments/`` (``.yaml`` optional)."""
    submitted = submitted_file(name_or_path)  # a submitted job runs the file it was given
    if submitted is not None:
        return submitted
    path = Path(name_or_path)
    if path.exists() or path.parent != Path("."):
        return path
    for candidate in (EXPERIMENTS_DIR / name_or_path, EXPERIMENTS_DIR / f"{name_or_path}.yaml"):
        if candidate.is_file():
            return candidate
    return path


def apply_overrides(data: dict[str, Any], overrides: list[str], *, file: str) -> dict[str, Any]:
    """``--set a.b=value`` overrides; the value is parsed as YAML (``1e-3``, ``[1, 2]``)."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*", key):
            raise ConfigError(f"--set {item!r}: expected key.path=value", file=file)
        node = data
        *parents, last = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {item!r}: {part} is not a section", file=file)
        try:
            node[last] = parse_scalar(raw)
        except ConfigError as error:
            raise ConfigError(f"--set {item!r}: {error.reason}", file=file) from None
    return data


SMOKE_OVERRIDES = [
    "data.train_subset=2000",
    "data.test_subset=2000",
    "train.epochs=2",
    "trials.num_samples=2",
    "trials.time_budget_s=null",
    "tracking.mlflow.registry=false",
]


def smoke_overrides(data: dict[str, Any]) -> list[str]:
    """--smoke's overrides for a sweep file's data: a user's function or command without a
    data section gets none (a data override would give it a data set it never asked for)."""
    own = "trainable" in data or "command" in data
    if own and "data" not in data:
        return [item for item in SMOKE_OVERRIDES if not item.startswith("data.")]
    return SMOKE_OVERRIDES


def json_schema() -> dict[str, Any]:
    """The sweep file's JSON Schema, from the models that validate it: for editors (the
    YAML language server completes and checks a file while it is typed)."""
    schema = SweepConfig.model_json_schema()
    # As written in a file: metric and mode may be lists (several objectives), which the
    # model turns into metric/mode + objectives before its fields see them.
    properties = schema["properties"]
    properties["metric"] = {"anyOf": [properties["metric"], {"type": "array", "items": {"type": "string"}}]}
    properties["mode"] = {"anyOf": [properties["mode"], {"type": "array", "items": {"enum": ["max", "min"]}}]}
    # The model itself as a choice, each model with its options (checked by the loader, per model).
    choice_of_models = {
        "type": "object",
        "properties": {
            "name": {
                "type": "object",
                "properties": {
                    "choice": {"type": "object", "minProperties": 1, "additionalProperties": {"type": "object"}}
                },
                "required": ["choice"],
                "additionalProperties": False,
            }
        },
        "required": ["name"],
        "additionalProperties": False,
    }
    properties["model"] = {"anyOf": [properties["model"], choice_of_models]}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "tuner sweep file",
        "description": "A tuner sweep: python -m tuner sweep FILE",
        **{key: value for key, value in schema.items() if key != "title"},
    }


def load_sweep(
    name_or_path: str, overrides: list[str] | None = None, *, smoke: bool = False, import_code: bool = True
) -> SweepConfig:
    """Read, override and validate a sweep file. Raises ConfigError, never starts Ray.
    ``import_code``: import and check the user's code it names (not to read a finished sweep)."""
    path = resolve_sweep_path(name_or_path)
    loaded = load_yaml(path, display_name=str(path))
    if not isinstance(loaded.data, dict):
        raise ConfigError(
            f"a sweep file is a mapping of sections, but got {type(loaded.data).__name__}",
            file=loaded.file,
            line=1,
        )
    data = dict(loaded.data)
    data.setdefault("name", path.stem)
    if smoke:
        data = apply_overrides(data, smoke_overrides(data), file=loaded.file)
        _smoke_fit(data)
    data = apply_overrides(data, overrides or [], file=loaded.file)
    try:
        sweep = validate(data, loaded, import_code=False)
        _check_added_params(sweep, loaded, overrides or [])  # a typo, before the user's code is asked
        if not import_code:
            return sweep
        from tuner.spec import own_code

        return own_code.check(sweep, loaded)
    except ConfigError as error:
        raise _said_against_override(error, overrides or [], loaded.file) from None


def _said_against_override(error: ConfigError, overrides: list[str], file: str) -> ConfigError:
    """An error about a key a ``--set`` gave names that ``--set``, not a line of the file."""
    head = error.reason.split(":", 1)[0].strip()
    if error.file != file or not re.fullmatch(r"[\w.]+", head):
        return error
    path = head.split(".")
    for item in reversed(overrides):  # the last --set of a key is the one that counts
        key = item.partition("=")[0].split(".")
        if path[: len(key)] == key:
            return ConfigError(f"--set {item!r}: {error.reason}", file=file)
    return error


def _check_added_params(sweep: SweepConfig, loaded: LoadedYaml, overrides: list[str]) -> None:
    """A ``--set space.params.NAME`` the file does not have, where nothing checks the name (a
    user's function or command, a builder's options), is a typo when NAME is all but one the
    sweep already has (``batchsize`` for ``batch_size``): refused with the name it meant."""
    if not (sweep.own_loop or isinstance(sweep.model, OpenOptions)):
        return  # every name is checked against the model's hyperparameters (_check_space)
    added = {}
    for item in overrides:
        key = item.partition("=")[0].split(".")
        if len(key) == 3 and key[:2] == ["space", "params"] and ("space", "params", key[2]) not in loaded.lines:
            added[key[2]] = item
    known = set(sweep.flat_specs()) - set(added)
    if not sweep.own_loop:
        known |= set(searchable_params(sweep.model))
    for name, item in added.items():
        close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.85)
        if close:
            raise ConfigError(
                f"--set {item!r}: space.params.{name}: the sweep has no hyperparameter {name!r}; did you mean "
                f"{close[0]!r}? (a new one with a name that close goes in the file's space.params)",
                file=loaded.file,
            )


def _smoke_fit(data: dict[str, Any]) -> None:
    """Keep a smoke run valid: a grace period cannot exceed the 2 smoke epochs."""
    scheduler = data.get("scheduler")
    if isinstance(scheduler, dict) and isinstance(scheduler.get("grace_period"), int):
        scheduler["grace_period"] = min(scheduler["grace_period"], 1)


def validate(data: dict[str, Any], loaded: LoadedYaml, *, import_code: bool = True) -> SweepConfig:
    try:
        sweep = SweepConfig.model_validate(data, strict=True)  # YAML types as written: no "3" -> 3
    except ValidationError as error:
        raise _to_config_error(error, data, loaded) from None
    sweep._origin = loaded
    if not import_code:
        return sweep
    from tuner.spec import own_code

    return own_code.check(sweep, loaded)


def _to_config_error(error: ValidationError, data: Any, loaded: LoadedYaml) -> ConfigError:
    errors = error.errors()
    first = errors[0]
    path = _data_path(data, first["loc"])
    alternatives = [
        e["msg"]
        for e in errors[1:]
        if _data_path(data, e["loc"]) == path
        and e["type"] == first["type"]
        or _data_path(data, e["loc"]) == path
        and first["type"] not in ("unknown_key", "sweep_check")
    ]
    kind, ctx = first["type"], first.get("ctx", {})
    if kind == "unknown_key":
        path = (*path, ctx["key"])
        message = first["msg"]
    elif kind == "union_tag_invalid":
        section = path[-1] if path else "value"
        valid = ctx.get("expected_tags", "").replace("'", "")
        if section == "model":
            valid = "cnn, resnet18, resnet34, synthetic, torchvision:<builder> (e.g. torchvision:resnet50)"
        message = f"unknown {section} {ctx.get('tag')!r}; choose one of: {valid}"
        path = (*path, "name")
    elif kind == "value_error" and isinstance(ctx.get("error"), ConfigError):
        return ctx["error"]
    elif kind == "sweep_check":
        return ConfigError(first["msg"], file=loaded.file, line=_line_of_message(first["msg"], loaded))
    elif kind == "missing":
        message = "required, but missing"
    else:
        accepted = " or ".join(dict.fromkeys(_lower_first(m) for m in [first["msg"], *alternatives]))
        message = f"{accepted}, but got {first.get('input')!r}"
    dotted = ".".join(str(p) for p in path) or "(top level)"
    return ConfigError(f"{dotted}: {message}", file=loaded.file, line=loaded.line_of(path))


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]


def _data_path(data: Any, loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """Pydantic's error location without union tags: the path into the YAML data."""
    path: list[Any] = []
    node = data
    for part in loc:
        if isinstance(node, dict) and part in node:
            node = node[part]
            path.append(part)
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
            path.append(part)
        elif isinstance(part, str) and (
            isinstance(node, dict) and node.get("name") == part or part.startswith("function-") or part in MODEL_TAGS
        ):
            continue  # a discriminator tag or validator frame, not a key
        elif node is not data and not isinstance(node, (dict, list)) and path:
            break  # at a scalar: what follows names union members (``literal['auto']``, ``bool``)
        else:
            path.append(part)
            node = None
    return tuple(path)


def _line_of_message(message: str, loaded: LoadedYaml) -> int | None:
    """The line of the field path a cross-field message starts with (``a.b.c: ...``)."""
    for head in message.split(":", 1)[0].split(" / "):
        head = head.strip()
        if re.fullmatch(r"[\w.]+", head) and tuple(head.split(".")) in loaded.lines:
            return loaded.lines[tuple(head.split("."))]
    head = message.split(":", 1)[0].split(" / ")[0].strip()
    return loaded.line_of(tuple(head.split("."))) if re.fullmatch(r"[\w.]+", head) else None
