"""The sweep file's ``data:`` section: which images, where from, how they are split and
streamed, and Spark's part when Spark prepares them (tuner/data/spark.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from tuner.strict import Strict, fail

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
            raise fail(
                "data.spark: dataset 'spark' is read and prepared as data.spark says, and only it has that section, "
                "but got dataset {dataset!r}",
                dataset=self.dataset,
            )
        if self.dataset == "spark" and not self.image_size:
            raise fail("data.image_size: Spark's images are decoded to image_size x image_size; set it, e.g. 28")
        own = self.dataset in ("image_folder", "parquet")
        if own and not self.path:
            raise fail(
                "data.path: dataset {dataset!r} needs data.path (a folder or Parquet files)", dataset=self.dataset
            )
        if not own and self.path:
            raise fail(
                "data.path: dataset {dataset!r} is read from data.root; data.path is for image_folder and parquet",
                dataset=self.dataset,
            )
        return self
