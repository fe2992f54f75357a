"""Serving under load (issue 27): ``tuner serve`` (Ray Serve, batched) against a plain
single-process FastAPI/uvicorn app and ``mlflow models serve``, on the same model and the
same requests, on loopback; then one replica killed mid-load.

    TUNER_DATA_DIR=DIR python benchmarks/studies/serve_load.py            # ~5 min on 2 cores
    python benchmarks/studies/serve_load.py --seconds 5 --clients 1,8     # shorter
    python benchmarks/studies/serve_load.py --model resnet18 --cpus 2     # a costlier model; both cores to Serve

The model: tuner's default light CNN (16/32 channels, hidden 128) after one epoch on 5,000
real MNIST digits, or (``--model resnet18``) tuner's ResNet-18 for 28 px digits as
initialised (what it costs per image is measured, not what it answers); exported as a
sweep exports it and registered in a local MLflow store as a sweep registers it. Every
request is one 28x28 digit as JSON pixels (each server's own format: tuner and the
baseline ``{"images": [...]}``, MLflow ``{"inputs": [...]}``).

Load: an asyncio client (aiohttp, one process) keeps N requests in flight for
``--seconds`` (after a warm-up second, not counted): requests per second, latency
percentiles, failures. Each server runs alone, started and stopped here.

Replica loss: ``tuner serve --replicas 2`` at the highest client count; after a third of
the time one replica's process (from GET /healthz) is SIGKILLed; counted: failed requests,
the span from the first failure to the last, and the seconds until Serve has two replicas
again.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]  # benchmarks/studies/<this script>
PY = sys.executable

BASELINE_APP = """
import json, sys
import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from tuner.results.export import load_best

model = load_best(sys.argv[1])
app = FastAPI()

@app.post("/predict")
async def predict(request: Request):
    images = np.asarray(json.loads(await request.body())["images"], dtype=np.uint8)
    probabilities = model.probabilities(images[:, None] if images.ndim == 3 else images)
    answers = [{"class": int(p.argmax()), "probability": float(p.max())} for p in probabilities]
    return JSONResponse({"predictions": answers})

@app.get("/healthz")
async def healthz():
    return {"status": "ok"}

if __name__ == "__main__":
    import uvicorn
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def prepare(folder: Path, model_name: str) -> tuple[Path, str, Any]:
    """The exported model, its registered MLflow URI's store, and test digits."""
    import mlflow
    import torch

    sys.path.insert(0, str(REPO / "tests"))
    from integration_helpers import export_config, train_tiny_cnn  # the tests' one-epoch CNN

    from tuner.data.datasets import load_test_split
    from tuner.results.export import load_best, write_package
    from tuner.tracking.mlflow_model import SERVED_MODEL_FILE, served_model_files

    torch.set_num_threads(2)
    train = load_test_split("mnist", None, train=True, download=False)
    test = load_test_split("mnist", None, download=False)
    config = export_config("state_dict", sweep="serve_load")
    if model_name == "cnn":
        model = train_tiny_cnn(train.images[:5000], train.labels[:5000])
    else:
        from tuner.models.builtin import build_model

        torch.manual_seed(0)
        model = build_model(model_name, in_channels=1, num_classes=10, image_size=28, options={}).eval()
        config["model"] = {"name": model_name, "options": {}}
    export = folder / "best"
    write_package(export, model, config, {"trial_id": "t0", "epoch": 1})
    exported = load_best(export)
    exported.example = test.images[:2]
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    mlflow.set_tracking_uri(uri)
    with mlflow.start_run() as run:
        artifacts, signature = served_model_files(exported, folder)
        mlflow.pyfunc.log_model(
            name="model", python_model=str(SERVED_MODEL_FILE), artifacts=artifacts, signature=signature
        )
    mlflow.register_model(f"runs:/{run.info.run_id}/model", "serve_load_model")
    return export, uri, test.images[:256, 0]


class Server:
    def __init__(self, name: str, command: list[str], url: str, path: str, env: dict[str, str] | None = None):
        self.name, self.url, self.path = name, url, path
        self.log = tempfile.NamedTemporaryFile("w+", prefix=f"serve-{name.split()[0]}-", suffix=".log", delete=False)
        self.process = subprocess.Popen(
            command,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
        self.started = time.monotonic()

    def wait(self, health: str, timeout: float = 240) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited; see {self.log.name}")
            try:
                with urllib.request.urlopen(self.url + health, timeout=5) as answer:
                    if answer.status == 200:
                        return time.monotonic() - self.started
            except OSError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"{self.name} did not answer in {timeout} s; see {self.log.name}")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
            try:
                self.process.wait(timeout=90)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


async def load(url: str, bodies: list[bytes], clients: int, seconds: float, events: list | None = None) -> dict:
    """``clients`` requests in flight for ``seconds`` after one second of warm-up."""
    import aiohttp

    latencies: list[float] = []
    failed = 0
    start = time.monotonic()
    warm_until, end = start + 1.0, start + 1.0 + seconds

    async def client(index: int, session: aiohttp.ClientSession) -> None:
        nonlocal failed
        sent = index
        while time.monotonic() < end:
            body = bodies[sent % len(bodies)]
            sent += clients
            began = time.monotonic()
            try:
                async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as answer:
                    await answer.read()
                    ok = answer.status == 200
            except (TimeoutError, aiohttp.ClientError):
                ok = False
            now = time.monotonic()
            if began >= warm_until:
                if ok:
                    latencies.append(now - began)
                else:
                    failed += 1
                    if events is not None:
                        events.append(now)

    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=clients)) as session:
        await asyncio.gather(*(client(i, session) for i in range(clients)))
    latencies.sort()

    def pct(q: float) -> float:
        return 1000 * latencies[min(len(latencies) - 1, int(q * len(latencies)))] if latencies else float("nan")

    return {
        "clients": clients,
        "rps": len(latencies) / seconds,
        "p50_ms": pct(0.50),
        "p95_ms": pct(0.95),
        "p99_ms": pct(0.99),
        "ok": len(latencies),
        "failed": failed,
    }


def bodies_for(kind: str, images: Any) -> list[bytes]:
    if kind == "mlflow":  # its signature: uint8 [N, 1, 28, 28], exactly
        return [json.dumps({"inputs": [[image.tolist()]]}).encode() for image in images]
    return [json.dumps({"images": [image.tolist()]}).encode() for image in images]


def replica_kill(url: str, bodies: list[bytes], clients: int, seconds: float) -> dict:
    pids = set()
    for _ in range(20):
        with urllib.request.urlopen(url + "/healthz", timeout=10) as answer:
            pids.add(json.loads(answer.read())["pid"])
    victim = min(pids)
    failures: list[float] = []

    async def run() -> dict:
        task = asyncio.create_task(load(url + "/predict", bodies, clients, seconds, failures))
        await asyncio.sleep(1.0 + seconds / 3)
        killed_at = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        result = await task
        result["killed_at"] = killed_at
        return result

    result = asyncio.run(run())
    back = None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        seen = set()
        for _ in range(20):
            with urllib.request.urlopen(url + "/healthz", timeout=10) as answer:
                seen.add(json.loads(answer.read())["pid"])
        if len(seen) == 2 and victim not in seen:
            back = time.monotonic() - result["killed_at"]
            break
        time.sleep(1)
    span = (max(failures) - min(failures)) if failures else 0.0
    return {**result, "replicas_seen": len(pids), "failure_span_s": span, "replaced_after_s": back}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", default="1,8,32", help="concurrent clients per level")
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds per level")
    parser.add_argument("--contestants", default="tuner-1,tuner-2,baseline,mlflow")
    parser.add_argument("--model", default="cnn", choices=("cnn", "resnet18"), help="the served model")
    parser.add_argument(
        "--cpus", type=float, default=None, help="CPUs for tuner serve in all, shared by its replicas (default: 1 each)"
    )
    parser.add_argument("--out", default=None, help="a folder for results.json (default: a new temporary one)")
    args = parser.parse_args()
    levels = [int(c) for c in args.clients.split(",")]
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="serve-load-"))
    out.mkdir(parents=True, exist_ok=True)
    export, uri, images = prepare(out, args.model)
    (out / "baseline_app.py").write_text(textwrap.dedent(BASELINE_APP))
    env = {"RAY_ADDRESS": "", "MLFLOW_TRACKING_URI": uri, "PYTHONPATH": str(REPO)}
    # mlflow models serve runs `uvicorn` by name: this interpreter's bin/ first on PATH
    env["PATH"] = f"{Path(PY).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    chosen = [c.strip() for c in args.contestants.split(",")]
    results: dict[str, Any] = {"levels": levels, "seconds": args.seconds, "model": args.model, "runs": {}}
    for name in chosen:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        title, command, health, path, kind = contestant(name, port, export, out, args.cpus)
        server = Server(title, command, url, path, env)
        try:
            ready = server.wait(health)
            bodies = bodies_for(kind, images)
            runs = []
            for clients in levels:
                result = asyncio.run(load(url + path, bodies, clients, args.seconds))
                runs.append(result)
                print(f"{server.name:<36} {clients:>3} clients: {line(result)}", flush=True)
            kill = None
            if name == "tuner-2":
                kill = replica_kill(url, bodies, max(levels), max(args.seconds, 15.0))
                print(
                    f"replica killed at {max(levels)} clients: {kill['ok']} answered, {kill['failed']} failed over "
                    f"{kill['failure_span_s']:.2f} s; a new replica after {kill['replaced_after_s']} s",
                    flush=True,
                )
            results["runs"][name] = {"server": server.name, "ready_s": ready, "levels": runs, "replica_kill": kill}
        finally:
            server.stop()
        (out / "results.json").write_text(json.dumps(results, indent=2))
    print()
    print(table(results))
    print(f"\nraw: {out / 'results.json'}")


def contestant(
    name: str, port: int, export: Path, out: Path, cpus: float | None
) -> tuple[str, list[str], str, str, str]:
    """(title, command, health path, predict path, request format)."""
    if name.startswith("tuner-"):
        replicas = name.split("-")[1]
        command = [PY, "-m", "tuner", "serve", str(export), "--port", str(port), "--replicas", replicas]
        if cpus is not None:
            command += ["--cpus", str(cpus / int(replicas))]
        return f"tuner serve ({replicas} replica(s))", command, "/healthz", "/predict", "tuner"
    if name == "baseline":
        command = [PY, str(out / "baseline_app.py"), str(export), str(port)]
        return "FastAPI + uvicorn, one process", command, "/healthz", "/predict", "tuner"
    if name == "mlflow":
        model = "models:/serve_load_model/1"
        command = [PY, "-m", "mlflow", "models", "serve", "-m", model, "--env-manager", "local"]
        command += ["--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
        return "mlflow models serve (1 worker)", command, "/ping", "/invocations", "mlflow"
    raise SystemExit(f"unknown contestant {name!r}")


def line(result: dict[str, Any]) -> str:
    return (
        f"{result['rps']:7.1f} req/s, p50 {result['p50_ms']:6.1f} ms, p95 {result['p95_ms']:6.1f} ms, "
        f"p99 {result['p99_ms']:6.1f} ms, failed {result['failed']}"
    )


def ratio(runs: dict[str, Any], level: dict[str, Any], other: str) -> str:
    found = [r for r in runs.get(other, {}).get("levels", []) if r["clients"] == level["clients"]]
    return f"{level['rps'] / found[0]['rps']:.2f}" if found and found[0]["rps"] else "-"


def table(results: dict[str, Any]) -> str:
    runs = results["runs"]
    lines = [
        "| server | clients | req/s | x baseline | x mlflow | p50 ms | p95 ms | p99 ms | failed |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs.values():
        for level in run["levels"]:
            lines.append(
                f"| {run['server']} | {level['clients']} | {level['rps']:.1f} | {ratio(runs, level, 'baseline')} | "
                f"{ratio(runs, level, 'mlflow')} | {level['p50_ms']:.1f} | {level['p95_ms']:.1f} | "
                f"{level['p99_ms']:.1f} | {level['failed']} |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
