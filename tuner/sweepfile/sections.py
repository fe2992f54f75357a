"""The sweep file's sections besides the search methods' (tuner/search/) and the data's
(tuner/data/config.py): the model, the training defaults, the space, the trials, scaling,
checkpoints, tracking and the objectives; every default is here, in one place."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator

from tuner.data.config import DataConfig
from tuner.search import spaces
from tuner.strict import Strict, custom

METRICS = {
    "val_accuracy": "max",
    "val_loss": "min",
    "train_loss": "min",
    "params": "min",  # the model's parameter count
    "latency_ms": "min",  # inference per image, measured after each epoch (only when an objective or constrained)
}
# what may be optimised at all with tuner's loop: one metric, or several objectives
SINGLE_ONLY = ("params", "latency_ms")
# The space's parameter that is a choice of models (written as model.name: {choice: ...})
MODEL_CHOICE = "model"
CHOOSABLE_MODELS = ("cnn", "resnet18", "resnet34", "synthetic")  # and torchvision:<builder>


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
            raise custom("unknown_model", str(error).removeprefix("model.name: ")) from None
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
            raise custom(
                "unknown_space",
                "no search space named {name!r}; choose one of: {valid}",
                name=name,
                valid=", ".join(spaces.registry_names()),
            )
        return name


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


def searchable_params(model: BaseModel) -> dict[str, type[BaseModel]]:
    """Hyperparameter name -> the section that defines it."""
    names: dict[str, type[BaseModel]] = {n: TrainConfig for n in TrainConfig.model_fields if n != "epochs"}
    names["augment"] = DataConfig  # e.g. {choice: [[], [random_crop, horizontal_flip]]}
    names.update({n: type(model) for n in type(model).model_fields if n not in ("name", "factory", "weights")})
    return names
