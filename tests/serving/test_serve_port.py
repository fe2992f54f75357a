"""A port that is taken, as ``tuner serve`` says it before Ray starts: by a tuner service of
this machine (which ``serve --stop`` ends), or by something else."""

from __future__ import annotations

import os
import socket

import pytest

from tuner.errors import TunerError
from tuner.serving import deploy


@pytest.fixture
def taken_port(tmp_path, monkeypatch):
    monkeypatch.setattr(deploy, "state_dir", lambda: tmp_path / "serve-records")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        yield listening.getsockname()[1]


def test_a_port_a_tuner_service_holds_names_it_and_how_to_stop_it(taken_port):
    with deploy._recorded("127.0.0.1", taken_port, None):  # what a running `tuner serve` leaves
        with pytest.raises(TunerError) as refused:
            deploy._check_port_free("127.0.0.1", taken_port)
    said = str(refused.value)
    holder = f"a tuner service (process {os.getpid()}) already listens on 127.0.0.1:{taken_port}"
    assert said.startswith(f"serve --port {taken_port}: {holder}; stop it with: ")
    assert f" serve --stop --port {taken_port} (or Ctrl-C where it runs), or give another --port" in said
    assert "\n" not in said


def test_a_port_something_else_holds_is_one_line_with_the_systems_reason(taken_port):
    with pytest.raises(TunerError, match=r"cannot listen on 127\.0\.0\.1:\d+ \(Address already in use\); give another"):
        deploy._check_port_free("127.0.0.1", taken_port)
