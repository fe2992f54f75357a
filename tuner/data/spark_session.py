"""The Spark session on the sweep's own Ray (RayDP): the extra and Java checked first, started, stopped."""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from tuner.errors import TunerError

# Spark 3.5 runs on these Javas (its docs); RayDP's jars are built for 8 and later.
JAVA_VERSIONS = (8, 11, 17)
# What Spark's own launcher adds for Java 17 (JavaModuleOptions), and RayDP's examples pass
# to the driver, the executors and the app master alike.
JAVA_17_OPTIONS = " ".join(
    ["-XX:+IgnoreUnrecognizedVMOptions", "-Djdk.reflect.useDirectMethodHandle=false"]
    + [
        f"--add-opens=java.base/{package}=ALL-UNNAMED"
        for package in (
            "java.lang",
            "java.lang.invoke",
            "java.lang.reflect",
            "java.io",
            "java.net",
            "java.nio",
            "java.math",
            "java.text",
            "java.util",
            "java.util.concurrent",
            "java.util.concurrent.atomic",
            "jdk.internal.ref",
            "sun.nio.ch",
            "sun.nio.cs",
            "sun.security.action",
            "sun.util.calendar",
        )
    ]
)
JAVA_OPTION_KEYS = (
    "spark.driver.extraJavaOptions",
    "spark.executor.extraJavaOptions",
    "spark.ray.raydp_app_master.extraJavaOptions",
)
INSTALL_JAVA = "install Java 17, e.g. apt-get install openjdk-17-jre-headless, or set JAVA_HOME to one"


def java_command() -> str | None:
    """The java Spark will start: $JAVA_HOME's, else the first on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return os.path.join(home, "bin", "java")
    return shutil.which("java")


def java_major(version_text: str) -> int | None:
    """The major version in ``java -version``'s output: 'version "1.8.0_392"' -> 8, '"17.0.15"' -> 17."""
    found = re.search(r'version "(\d+)(?:\.(\d+))?', version_text)
    if not found:
        return None
    major = int(found.group(1))
    return int(found.group(2) or 0) if major == 1 else major


def check_environment(field: str = "data.dataset") -> int:
    """Before Ray starts: the extra installed and a Java Spark runs on; its major version."""
    missing = [name for name in ("pyspark", "raydp") if importlib.util.find_spec(name) is None]
    if missing:
        raise TunerError(
            f"{field}: 'spark' needs {' and '.join(missing)}, which are not installed; "
            f"pip install 'tuner[spark]' (raydp and a pyspark it supports)"
        )
    java = java_command()
    if java is None:
        raise TunerError(
            f"{field}: 'spark' needs Java {', '.join(map(str, JAVA_VERSIONS))}; none found; {INSTALL_JAVA}"
        )
    try:
        said = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise TunerError(f"{field}: 'spark' needs Java, but {java} -version failed ({error}); {INSTALL_JAVA}") from None
    major = java_major(said.stderr + said.stdout)
    if major not in JAVA_VERSIONS:
        found = f"Java {major}" if major else "a Java whose version it could not read"
        raise TunerError(
            f"{field}: Spark 3.5 runs on Java {', '.join(map(str, JAVA_VERSIONS))}, but {java} is {found}; "
            f"{INSTALL_JAVA}"
        )
    return major


def function_of(spec: str, field: str = "data.spark.function") -> Any:
    """``module:function`` imported (from the working folder too), or one line saying why not."""
    module_name, _, name = spec.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # noqa: BLE001 - the user's module: any import error, as one line
        raise TunerError(f"{field}: cannot import {module_name!r} ({type(error).__name__}: {error})") from None
    function = getattr(module, name, None)
    if not callable(function):
        raise TunerError(f"{field}: {module_name} has no function {name!r}, but got {spec!r}")
    return function


def spark_configs(session: Any, java_major_version: int) -> dict[str, str]:
    """The file's configs, with Java 17's flags added to each Java option the file sets or not."""
    configs = {"spark.python.worker.reuse": "true", "spark.ui.showConsoleProgress": "false", **session.configs}
    configs.setdefault("spark.pyspark.python", sys.executable)  # the executors' Python UDFs: this venv's
    if java_major_version >= 17:
        for key in JAVA_OPTION_KEYS:
            configs[key] = f"{JAVA_17_OPTIONS} {configs.get(key, '')}".strip()
    return configs


@contextlib.contextmanager
def java_output_to(log: str | None) -> Iterator[None]:
    """While Spark's JVMs start and work, this process's stdout and stderr go to ``log``:
    the JVMs inherit them (log4j writes to both), and their lines go there, not between
    tuner's (None: left as they are)."""
    if log is None:
        yield
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    with open(log, "ab") as file:
        for fd in saved:
            os.dup2(file.fileno(), fd)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)


@contextlib.contextmanager
def session(config: Any, app_name: str, java_major_version: int, log: str | None = None) -> Iterator[Any]:
    """A Spark session on the running Ray, up within ``start_timeout_s`` (else one line and
    nothing left running); stopped on the way out. ``log``: where the JVMs' output goes."""
    import raydp

    spec = config.session
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    started: dict[str, Any] = {}

    def start() -> None:
        try:
            started["spark"] = raydp.init_spark(
                app_name,
                spec.executors,
                spec.executor_cores,
                spec.executor_memory,
                configs=spark_configs(spec, java_major_version),
            )
        except BaseException as error:  # noqa: BLE001 - handed to the caller's thread
            started["error"] = error

    deadline = time.monotonic() + spec.start_timeout_s
    with java_output_to(log):
        thread = threading.Thread(target=start, name="tuner-spark-start", daemon=True)
        thread.start()
        thread.join(spec.start_timeout_s)
    # init_spark returns before the executors are up, and a job then waits for them for
    # ever (one asking for more memory than a node has is never placed): wait here, within
    # the same limit.
    while "spark" in started and _executors(started["spark"]) < spec.executors:
        if time.monotonic() > deadline:
            with java_output_to(log), contextlib.suppress(Exception):
                raydp.stop_spark()
            started.pop("spark")
            break
        time.sleep(0.5)
    if "spark" in started and log is not None:
        with java_output_to(log):  # log4j says its reconfiguration on the JVM's stderr
            started["spark"].sparkContext.setLogLevel("ERROR")
    if "spark" not in started:
        failed = started.get("error")  # before the end below, whose error is ours, not Spark's
        with java_output_to(log):  # what the JVMs say as they go
            _end_a_start_under_way(thread, app_name)
        # No stop_spark here: a failed init_spark has stopped what it began, and one still
        # starting holds RayDP's lock, which RayDP's own exit hook would wait on for ever.
        # What it started is this driver's: it goes when Ray does.
        import atexit

        from raydp import context

        atexit.unregister(context.stop_spark)
        if failed is not None:
            reason = str(failed).strip().splitlines()[-1] if str(failed).strip() else ""
            where = f"; its output: {log}" if log else ""
            raise TunerError(
                f"data.spark.session: Spark did not start ({type(failed).__name__}: {reason}){where}"
            ) from None
        raise TunerError(
            f"data.spark.session.start_timeout_s: Spark was not up after {spec.start_timeout_s:g} s "
            f"({spec.executors} executor(s) of {spec.executor_cores} core(s), {spec.executor_memory}); "
            "a cluster without the CPUs or memory they ask for, or a Java that cannot start"
            + (f"; its output: {log}" if log else "")
        )
    try:
        yield started["spark"]
    finally:
        with java_output_to(log), contextlib.suppress(Exception):
            raydp.stop_spark()


def _end_a_start_under_way(thread: threading.Thread, app_name: str, limit_s: float = 10.0) -> None:
    """A start still under way at the limit waits in a ``ray.get`` on RayDP's master actor
    (its JVM starting, on a loaded machine). Left waiting, that call crashed the process at
    its exit (SIGSEGV) where it had joined a Ray it did not start (a warm one, a cluster):
    Ray's wait checks for signals through an interpreter already gone. The master is
    killed, so that the call raises and the thread ends here."""
    import ray
    from raydp.spark.ray_cluster_master import RAYDP_SPARK_MASTER_SUFFIX

    deadline = time.monotonic() + limit_s
    while thread.is_alive() and time.monotonic() < deadline:
        with contextlib.suppress(Exception):  # not created yet, or gone already
            ray.kill(ray.get_actor(app_name + RAYDP_SPARK_MASTER_SUFFIX))
        thread.join(0.5)


def _executors(spark: Any) -> int:
    """Executors registered with the session's driver (the driver itself not counted)."""
    try:
        return int(spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()) - 1
    except Exception:  # noqa: BLE001 - a session going away: none
        return 0
