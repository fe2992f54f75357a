"""What tuner does when its MLflow tracking server goes away, without Ray or a server: which
errors mean "away", how the writer keeps and replays its writes, what it says and when. The
same on a real ``mlflow server``: tests/tracking/test_tracking_server_away.py."""

from __future__ import annotations

import http.server
import os
import socket
import threading
import time

import pytest
import requests
from mlflow.exceptions import MlflowException
from mlflow.tracking._tracking_service.utils import get_default_host_creds
from mlflow.utils.rest_utils import http_request

from tuner import console
from tuner.folder import records
from tuner.folder.store import SweepFolder
from tuner.tracking import mlflow_outage
from tuner.tracking import writer as writer_module
from tuner.tracking.callbacks import MlflowTrials
from tuner.tracking.writer import MlflowWriter


def _closed_port() -> str:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{taken.getsockname()[1]}"


def _refused() -> MlflowException:
    """What MLflow raises for a call to a port nothing listens on (no retries: at once)."""
    uri = _closed_port()
    with pytest.raises(MlflowException) as raised:
        http_request(get_default_host_creds(uri), "/api/2.0/mlflow/runs/log-batch", "POST", json={}, max_retries=0)
    return raised.value


def test_a_server_that_cannot_be_reached_is_away_and_a_bad_request_is_not():
    assert mlflow_outage.unreachable(_refused()) == "connection refused"
    assert mlflow_outage.unreachable(requests.exceptions.ConnectTimeout("slow")) == "ConnectTimeout"
    assert (
        mlflow_outage.unreachable(MlflowException("Run 'abc' not found", error_code="RESOURCE_DOES_NOT_EXIST")) is None
    )
    assert mlflow_outage.unreachable(ValueError("Max retries exceeded")) is None  # not MLflow's: a bug of ours


def test_an_answer_cut_off_as_the_server_dies_is_away():
    # A server killed as it answered: its headers sent, then the connection closed mid-body.
    # Taken for a bug, this error stopped a sweep (exit 1) the moment its server went away.
    with socket.socket() as dying:
        dying.bind(("127.0.0.1", 0))
        dying.listen(8)

        def answer_half():
            taken, _ = dying.accept()
            with taken:
                taken.recv(65536)
                taken.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")

        threading.Thread(target=answer_half, daemon=True).start()
        uri = f"http://127.0.0.1:{dying.getsockname()[1]}"
        with pytest.raises(MlflowException) as raised:
            http_request(get_default_host_creds(uri), "/api/2.0/mlflow/runs/create", "POST", json={}, max_retries=0)
    assert "Connection broken" in str(raised.value)
    assert mlflow_outage.unreachable(raised.value) == "no answer"
    assert mlflow_outage.unreachable(requests.exceptions.ChunkedEncodingError("ended")) == "ChunkedEncodingError"


def test_a_probe_answers_within_its_timeout_whatever_the_server_does():
    assert not mlflow_outage.answers(_closed_port())  # refused: at once
    with socket.socket() as silent:  # accepts (the backlog) and never answers: a hung server
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        began = time.monotonic()
        assert not mlflow_outage.answers(f"http://127.0.0.1:{silent.getsockname()[1]}", timeout_s=1)
        assert time.monotonic() - began < 5  # not a retried call's 35 s

    class NotFound(http.server.BaseHTTPRequestHandler):  # any answer but a 5xx: it is there
        def do_POST(self):
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        assert mlflow_outage.answers(f"http://127.0.0.1:{server.server_port}")
    finally:
        server.shutdown()
        server.server_close()


def test_only_an_http_store_gets_short_retries_and_the_users_own_settings_win(monkeypatch):
    for name in ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)
    mlflow_outage.fail_fast_over_http("sqlite:////tmp/mlflow.db")
    assert "MLFLOW_HTTP_REQUEST_TIMEOUT" not in os.environ
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "60")
    mlflow_outage.fail_fast_over_http("https://mlflow.example:5000")
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "2"
    assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "60"


class _Record:
    uri = "http://127.0.0.1:1"

    def __init__(self):
        self.backfilled = 0

    def backfill(self, histories):
        self.backfilled += 1


@pytest.fixture
def writer(tmp_path, monkeypatch):
    """The MLflow writer's side (its process's), called in line: its record a stand-in, its
    lines collected, whether the server answers up to the test."""
    trials = MlflowWriter(sweep=None, folder=SweepFolder(tmp_path))
    trials.record = _Record()
    trials.said, trials.server_answers = [], False
    monkeypatch.setattr(writer_module, "answers", lambda uri: trials.server_answers)
    token = console.SAYING.set(trials.said.append)
    yield trials
    console.SAYING.reset(token)


def test_writes_while_the_server_is_away_are_kept_in_order_and_written_once_it_answers(writer, tmp_path):
    written = []
    refused = _refused()

    def fails_once(name):
        if not written or written[-1] != "retried":
            written.append("retried")
            raise refused
        written.append(name)

    writer.guarded(written.append, "epoch 1")
    writer.guarded(fails_once, "epoch 2")  # the server goes away here
    writer.guarded(written.append, "epoch 3")  # kept behind it, not tried
    assert written == ["epoch 1", "retried"]
    assert len(writer.said) == 1 and writer.said[0].startswith(f"MLflow at {_Record.uri} is unreachable")
    assert "connection refused" in writer.said[0] and "the sweep goes on" in writer.said[0]
    assert records.mlflow_behind(SweepFolder(tmp_path))  # a sweep that ends now leaves it to resume

    assert not writer.probe()  # still away: nothing tried, nothing said
    assert written == ["epoch 1", "retried"] and len(writer.said) == 1

    writer.server_answers = True
    assert writer.probe()
    assert written == ["epoch 1", "retried", "epoch 2", "epoch 3"]  # in their order, after the gaps backfilled
    assert writer.record.backfilled == 1
    assert len(writer.said) == 2 and writer.said[1].startswith(f"MLflow at {_Record.uri} is back after")
    assert records.mlflow_behind(SweepFolder(tmp_path)) is None
    assert writer.probe() and len(writer.said) == 2  # nothing missed: nothing said again


def test_a_write_that_fails_for_another_reason_is_raised_not_kept(writer):
    def bad(_):
        raise MlflowException("INVALID_PARAMETER_VALUE: metric value is not a number")

    with pytest.raises(MlflowException, match="INVALID_PARAMETER_VALUE"):
        writer.guarded(bad, "epoch 1")
    assert writer.missed == [] and writer.said == []


def test_a_line_goes_through_the_sweeps_reporter_when_one_shows(capsys):
    said = []
    token = console.SAYING.set(said.append)
    try:
        console.say("through the reporter")
    finally:
        console.SAYING.reset(token)
    console.say("printed")
    assert said == ["through the reporter"]
    assert capsys.readouterr().out == "printed\n"


def test_epochs_no_later_result_would_write_are_written_within_flush_s(tmp_path, monkeypatch):
    """A slow epoch's metrics, or those of trials that all wait: written by the writer's own
    clock (``tick``, between events) once ``FLUSH_S`` old, not held until the next result."""

    class Queued(_Record):
        def __init__(self):
            super().__init__()
            self.pending, self.flushed_at, self.flushes = {"t1": ["epoch 3"]}, time.monotonic(), 0

        def flush(self):
            self.pending, self.flushed_at, self.flushes = {}, time.monotonic(), self.flushes + 1

    monkeypatch.setattr(writer_module, "FLUSH_S", 0.3)
    trials = MlflowWriter(sweep=None, folder=SweepFolder(tmp_path))
    trials.record = Queued()
    trials.tick()  # queued just now: not yet
    assert trials.record.flushes == 0
    assert 0.05 <= trials.wait_s() <= 0.3  # the writer waits for events no longer than the next flush is due
    time.sleep(0.35)
    for _ in range(50):  # ticks come often; one flush is due, and made once
        trials.tick()
    assert trials.record.flushes == 1 and trials.record.pending == {}


def test_a_callback_that_an_earlier_tuner_pickled_comes_back_with_the_fields_added_since(tmp_path):
    import pickle

    earlier_state = {"sweep": None, "paths": SweepFolder(tmp_path), "record": None, "writer": None, "writes": []}
    restored = MlflowTrials.__new__(MlflowTrials)
    restored.__setstate__(earlier_state)  # what unpickling that sweep's tuner.pkl does
    assert restored.folder == SweepFolder(tmp_path) and restored.writer is None
    again = pickle.loads(pickle.dumps(restored))
    assert again.folder == SweepFolder(tmp_path) and again.writer is None
