"""A tracking server that goes away: calls that fail in seconds, not MLflow's minutes; "is it
back?" asked in one short request; which errors say the server cannot be reached now (the
writer then keeps the records for later: tuner/tracking/callbacks.py)."""

from __future__ import annotations

import os


def fail_fast_over_http(uri: str) -> None:
    """An MLflow server that is away fails a call in seconds, not MLflow's 4 minutes of retries
    (the writer then keeps the records for later: tuner.tracking.callbacks): measured, 4 s when
    its port refuses, 35 s when nothing answers (3 tries of 10 s). A user's own setting of
    these variables wins."""
    if uri.startswith(("http://", "https://")):
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")


PROBE_TIMEOUT_S = 3  # how long "is it back?" waits for an answer


def answers(uri: str, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """Whether the tracking server at ``uri`` answers now: one request with MLflow's own
    credentials and TLS settings, no retries, a short timeout (so a server that is still away
    costs the writer 3 s a probe, not a retried call's 35 s). Any HTTP answer but a 5xx counts."""
    from mlflow.tracking._tracking_service.utils import get_default_host_creds
    from mlflow.utils.rest_utils import http_request

    try:
        http_request(
            get_default_host_creds(uri),
            "/api/2.0/mlflow/experiments/search",
            "POST",
            json={"max_results": 1},
            max_retries=0,
            timeout=timeout_s,
        )
    except Exception as error:
        if unreachable(error) is None:
            raise
        return False
    return True


def unreachable(error: BaseException) -> str | None:
    """A short reason when ``error`` says the tracking server cannot be reached now (refused,
    timed out, a 5xx answer), else None: a server that went away, not a bad request."""
    import requests

    text = str(error)
    away = (requests.exceptions.ConnectionError, requests.exceptions.Timeout, requests.exceptions.ChunkedEncodingError)
    if isinstance(error, away):
        return type(error).__name__
    # "Connection broken": an answer cut off as the server died (a killed server did, mid-body)
    markers = ("Max retries exceeded", "Connection refused", "timed out", "Failed to establish", "too many 5")
    markers += ("Connection broken", "Connection aborted", "Connection reset")
    if type(error).__name__ == "MlflowException" and "API request to" in text and any(m in text for m in markers):
        return "connection refused" if "refused" in text else "no answer"
    return None
