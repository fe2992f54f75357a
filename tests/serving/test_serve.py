"""``python -m tuner serve`` as users run it: a subprocess that starts its own local Ray and
a Ray Serve application, real HTTP requests on 127.0.0.1, the bad-input table against the
live service, batching under concurrent load, a replica killed mid-load, ``--stop``
leaving nothing running, and a model registered in MLflow served by its URI.

The model is a tiny CNN trained here for one epoch on real MNIST digits and exported as
``export_best`` writes it (seconds); each service has a Ray of its own, and one test runs
a second service beside the module's (each behind Serve's HAProxy ingress).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import psutil
import pytest
import torch
from integration_helpers import export_config, free_port, train_tiny_cnn, tuner_cli
from integration_helpers import http_get as get
from integration_helpers import http_post as post
from integration_helpers import png_bytes as png

from tuner.data.datasets import load_test_split
from tuner.results.export import load_best, write_package

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

START_TIMEOUT_S = 180


@pytest.fixture(scope="module")
def export(tmp_path_factory, data_dir):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        train = load_test_split("mnist", str(data_dir), train=True, download=False)
        test = load_test_split("mnist", str(data_dir), download=False)
        model = train_tiny_cnn(train.images[:3000], train.labels[:3000])
    finally:
        torch.set_num_threads(threads)
    folder = tmp_path_factory.mktemp("served") / "best"
    metrics = {"trial_id": "trial_00007", "epoch": 1, "val_accuracy": 0.9}
    write_package(folder, model, export_config("state_dict", sweep="serve_test"), metrics)
    return folder, test


@pytest.fixture(scope="module")
def data_dir():
    from integration_helpers import data_root

    return data_root()


class Service:
    def __init__(self, source: str, *args: str, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tuner", "serve", source, "--port", str(self.port), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "RAY_ADDRESS": "", **(env or {})},
            start_new_session=True,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"tuner serve exited {self.process.returncode}: {self.process.stdout.read()}")
            try:
                if get(self.url + "/healthz")[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        else:
            self.process.kill()
            raise AssertionError("tuner serve did not answer /healthz in time")
        self.tree = [psutil.Process(self.process.pid), *self.process_children()]

    def replica_log_lines(self) -> list[str]:
        """The lines of its replicas' Serve logs, in the session folder of the Ray it started."""
        folders = set()
        for process in self.tree:
            with contextlib.suppress(psutil.Error):  # a replica killed by a test before
                folders.update(arg.split("=", 1)[1] for arg in process.cmdline() if arg.startswith("--log_dir="))
        assert len(folders) == 1, folders
        files = sorted(Path(folders.pop(), "serve").glob("replica_*.log"))
        assert files, "no replica log"
        return [line for file in files for line in file.read_text().splitlines()]

    def process_children(self) -> list[psutil.Process]:
        return psutil.Process(self.process.pid).children(recursive=True)

    def stop_by_group_signal(self, timeout_s: float = 30.0) -> str:
        """SIGTERM to every process of the service's group, as a pod's stop sends it."""
        os.killpg(self.process.pid, signal.SIGTERM)
        output, _ = self.process.communicate(timeout=timeout_s)
        return output

    def stop(self) -> str:
        done = tuner_cli("serve", "--stop", "--port", str(self.port), timeout=120)
        assert done.returncode == 0, done.stderr
        output, _ = self.process.communicate(timeout=60)
        return done.stdout + output


@pytest.fixture(scope="module")
def service(export):
    folder, _ = export
    running = Service(str(folder), "--replicas", "2", "--max-batch-size", "16", "--max-images", "64")
    yield running
    if running.process.poll() is None:
        running.process.send_signal(signal.SIGINT)
        running.process.wait(timeout=60)


def test_a_png_gets_the_class_the_export_predicts(service, export):
    folder, test = export
    expected, _ = load_best(folder).predict(test.images[:8])
    for index in range(8):
        status, answer = post(service.url + "/predict", png(test.images[index, 0]), "image/png")
        assert status == 200, answer
        (prediction,) = answer["predictions"]
        assert prediction["class"] == expected[index]
        assert prediction["name"] == str(expected[index])
        assert sum(prediction["probabilities"]) == pytest.approx(1.0, abs=1e-4)
        assert answer["trial_id"] == "trial_00007"


def test_json_pixels_and_a_multipart_form_are_batches_in_order(service, export):
    folder, test = export
    expected, _ = load_best(folder).predict(test.images[:20])
    status, answer = post(
        service.url + "/predict", json.dumps({"images": test.images[:20, 0].tolist()}).encode(), "application/json"
    )
    assert status == 200 and [p["class"] for p in answer["predictions"]] == expected.tolist()
    boundary = "tunerboundary"
    body = (
        b"".join(
            f'--{boundary}\r\nContent-Disposition: form-data; name="images"; filename="{i}.png"\r\n\r\n'.encode()
            + png(test.images[i, 0])
            + b"\r\n"
            for i in range(5)
        )
        + f"--{boundary}--\r\n".encode()
    )
    status, answer = post(service.url + "/predict", body, f"multipart/form-data; boundary={boundary}")
    assert status == 200 and [p["class"] for p in answer["predictions"]] == expected[:5].tolist()


def test_model_healthz_and_the_openapi_page(service):
    status, model = get(service.url + "/model")
    assert status == 200
    assert model["trial_id"] == "trial_00007" and model["epoch"] == 1 and model["sweep"] == "serve_test"
    assert model["input"] == {"channels": 1, "size": 28, "resized": False, "max_bytes": 8 << 20, "max_images": 64}
    assert model["classes"] == [str(k) for k in range(10)] and model["metrics"]["val_accuracy"] == 0.9
    status, health = get(service.url + "/healthz")
    assert status == 200 and health["threads"] == 1  # a replica's torch: the one CPU it was given
    status, spec = get(service.url + "/openapi.json")
    predict = spec["paths"]["/predict"]["post"]
    assert set(predict["requestBody"]["content"]) == {
        "image/png",
        "image/jpeg",
        "multipart/form-data",
        "application/json",
    }
    assert {"200", "400", "413", "415", "422"} <= set(predict["responses"])
    with urllib.request.urlopen(service.url + "/docs", timeout=30) as page:
        assert page.status == 200 and b"swagger" in page.read().lower()


BAD = [
    (b"", "image/png", 400, "empty body"),
    (b"GIF89a garbage", "image/png", 400, "not an image Pillow can read"),
    (png(np.zeros((20, 20), np.uint8)), "image/png", 422, "a 20x20 image; the model takes 28x28"),
    (png(np.zeros((28, 28, 3), np.uint8)), "image/png", 422, "a RGB image (3 channels)"),
    (json.dumps([[1, 2, 3]]).encode(), "application/json", 422, "JSON pixels of shape [1, 3]"),
    (json.dumps([np.zeros((28, 28), int).tolist()] * 65).encode(), "application/json", 413, "65 images"),
    (b"\0" * (9 << 20), "image/png", 413, "the limit is 8388608"),
    (b"hello", "text/plain", 415, "content type 'text/plain'"),
]


@pytest.mark.parametrize(("body", "content_type", "status", "reason"), BAD, ids=[b[3][:24] for b in BAD])
def test_bad_input_is_a_4xx_with_one_line_and_good_requests_still_answer(
    service, export, body, content_type, status, reason
):
    _, test = export
    got, answer = post(service.url + "/predict", body, content_type)
    assert got == status, answer
    assert reason in answer["error"] and "\n" not in answer["error"]
    assert post(service.url + "/predict", png(test.images[0, 0]), "image/png")[0] == 200


def test_a_huge_body_without_a_length_is_refused_as_it_arrives(service, export):
    """Chunked transfer (no Content-Length): counted as it is read, 413 past the limit."""
    _, test = export
    request = urllib.request.Request(
        service.url + "/predict", data=(b"\0" * (1 << 20) for _ in range(9)), method="POST"
    )
    request.add_header("Content-Type", "image/png")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=60)
    assert refused.value.code == 413
    assert json.loads(refused.value.read())["error"] == "body of more than 8388608 bytes; the limit is 8388608"
    assert post(service.url + "/predict", png(test.images[0, 0]), "image/png")[0] == 200


def _load(url: str, image: bytes, clients: int, seconds: float, failures: list | None = None) -> tuple[int, int]:
    """``clients`` threads posting ``image`` for ``seconds``: (answered, failed); the
    monotonic time of each failure goes to ``failures``."""

    def client() -> tuple[int, int]:
        ok = failed = 0
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                status, _ = post(url + "/predict", image, "image/png")
            except OSError:
                status = 0
            if status == 200:
                ok += 1
            else:
                failed += 1
                if failures is not None:
                    failures.append(time.monotonic())
        return ok, failed

    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        results = list(pool.map(lambda _: client(), range(clients)))
    return sum(r[0] for r in results), sum(r[1] for r in results)


def test_concurrent_requests_are_batched_on_the_server(service, export):
    _, test = export
    ok, failed = _load(service.url, png(test.images[0, 0]), clients=16, seconds=5)
    assert failed == 0 and ok > 16
    largest = max(get(service.url + "/healthz")[1]["largest_batch"] for _ in range(6))
    assert largest > 1, "16 clients at once never made a batch of more than one image"


def _replica_pids(url: str, within_s: float = 30.0) -> set[int]:
    """The process ids that answer ``/healthz``, asked until two have answered or
    ``within_s`` passes. Serve's router picks by the queue lengths it last saw, so right
    after a burst of load a run of sequential requests may all go to one replica."""
    pids: set[int] = set()
    deadline = time.monotonic() + within_s
    while len(pids) < 2 and time.monotonic() < deadline:
        pids |= {get(url + "/healthz")[1]["pid"] for _ in range(12)}
        if len(pids) < 2:
            time.sleep(0.5)
    return pids


def test_a_killed_replica_is_replaced_and_only_its_requests_in_flight_fail(service, export):
    _, test = export
    pids = _replica_pids(service.url)
    assert len(pids) == 2, pids  # both replicas answer
    victim = sorted(pids)[0]
    clients, failures = 8, []
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        load = pool.submit(_load, service.url, png(test.images[0, 0]), clients, 12.0, failures)
        time.sleep(3)
        killed_at = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        ok, failed = load.result()
    # what was in flight on the dead replica (and what reached it before the proxy knew)
    # fails, inside a short window; the other replica answers everything else
    assert ok > 10 * failed, (ok, failed)
    assert all(killed_at <= at <= killed_at + 5 for at in failures), [round(at - killed_at, 2) for at in failures]
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:  # Serve starts a replica in its place
        seen = {get(service.url + "/healthz")[1]["pid"] for _ in range(12)}
        if len(seen) == 2 and victim not in seen:
            break
        time.sleep(1)
    else:
        raise AssertionError(f"no second replica after the kill: {seen}")


USERS_FACTORY = """
import torch.nn as nn


def build(num_classes, width=16):
    return nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, width), nn.ReLU(), nn.Linear(width, num_classes))
"""


def test_a_model_from_a_users_factory_serves_from_its_export_beside_another_service(service, export, tmp_path):
    """An export of a model built by a user's factory carries the user's code (code/); a
    replica, in a process and folder of its own, rebuilds it from there. It runs while the
    module's service does: two services on one machine, each HAProxy with ports of its own,
    each answering with its own model."""
    from tuner.models.build import build_model

    _, test = export
    code = tmp_path / "my_code"
    code.mkdir()
    (code / "my_nets.py").write_text(USERS_FACTORY)
    options = {"factory": "my_nets:build", "width": 16}
    model = build_model("factory", in_channels=1, num_classes=10, image_size=28, options=options, code_folder=code)
    config = export_config("state_dict", sweep="own_factory")
    config["model"] = {"name": "factory", "options": options}
    write_package(tmp_path / "best", model, config, {"trial_id": "trial_own", "epoch": 1}, code=code)
    expected, _ = load_best(tmp_path / "best").predict(test.images[:6])
    running = Service(str(tmp_path / "best"), "--access-log")
    try:
        status, answer = post(
            running.url + "/predict", json.dumps(test.images[:6, 0].tolist()).encode(), "application/json"
        )
        assert status == 200 and [p["class"] for p in answer["predictions"]] == expected.tolist()
        assert answer["trial_id"] == "trial_own"
        for _ in range(6):  # the other service still answers, with its own model
            status, answer = post(service.url + "/predict", png(test.images[0, 0]), "image/png")
            assert status == 200 and answer["trial_id"] == "trial_00007", answer
        # a line a request where --access-log asked for it (Serve writes its log as it goes),
        # none where it was left off (the module's service, after hundreds of requests)
        deadline = time.monotonic() + 10
        while not [line for line in running.replica_log_lines() if "POST /predict 200" in line]:
            assert time.monotonic() < deadline, running.replica_log_lines()[-5:]
            time.sleep(0.5)
        assert not [line for line in service.replica_log_lines() if "POST /predict" in line]
    finally:
        said = running.stop_by_group_signal()
    # SIGTERM to the whole process group (a pod's stop, Slurm's scancel): the service ends
    # cleanly, its own Ray too, with no Ray error line
    assert running.process.returncode == 0 and "service stopped" in said, said
    assert "GCS" not in said and "rpc_client" not in said, said
    time.sleep(2)
    left = [p for p in running.tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not left, [" ".join(p.cmdline())[:120] for p in left]


def test_a_second_service_on_the_same_port_is_refused_in_one_line(service, export):
    folder, _ = export
    done = tuner_cli("serve", str(folder), "--port", str(service.port), timeout=120)
    assert done.returncode == 2 and done.stderr.startswith(
        f"tuner: error: serve --port {service.port}: a tuner service (process {service.process.pid}) already listens"
    ), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_stop_takes_the_service_down_and_leaves_nothing_running(service):
    # (those of its start and those of now: HAProxy hands over to a new process of its own on a reload)
    tree = [p for p in {*service.tree, *service.process_children()} if p.is_running()]
    assert any("raylet" in " ".join(p.cmdline()) for p in tree), "the service's own Ray is not among its processes"
    assert any(p.name() == "haproxy" for p in tree), "Serve's HAProxy ingress is not among its processes"
    said = service.stop()
    assert service.process.returncode == 0, said
    assert "service stopped" in said
    time.sleep(2)
    left = [p for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not left, [" ".join(p.cmdline())[:120] for p in left]
    with pytest.raises(OSError):
        get(service.url + "/healthz")
    again = tuner_cli("serve", "--stop", "--port", str(service.port))
    assert again.returncode == 2 and "no tuner service on port" in again.stderr


def test_a_model_registered_in_mlflow_is_served_by_its_uri(export, tmp_path):
    """The same model as tuner registers it (tuner/tracking/served_model.py), served from
    ``models:/NAME/VERSION``."""
    import mlflow

    from tuner.tracking.mlflow_model import SERVED_MODEL_FILE, served_model_files

    folder, test = export
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    exported = load_best(folder)
    exported.example = test.images[:2]
    mlflow.set_tracking_uri(uri)
    try:
        with mlflow.start_run() as run:
            artifacts, signature = served_model_files(exported, tmp_path)
            mlflow.pyfunc.log_model(
                name="model", python_model=str(SERVED_MODEL_FILE), artifacts=artifacts, signature=signature
            )
        mlflow.register_model(f"runs:/{run.info.run_id}/model", "serve_test_cnn")
    finally:
        mlflow.set_tracking_uri(None)
    running = Service("models:/serve_test_cnn/1", env={"MLFLOW_TRACKING_URI": uri})
    try:
        expected, _ = exported.predict(test.images[:4])
        status, answer = post(
            running.url + "/predict", json.dumps(test.images[:4, 0].tolist()).encode(), "application/json"
        )
        assert status == 200 and [p["class"] for p in answer["predictions"]] == expected.tolist()
        status, model = get(running.url + "/model")
        assert model["registered_model"] == "serve_test_cnn" and model["version"] == "1"
    finally:
        running.stop()
