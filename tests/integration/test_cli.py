"""The `astr` client subcommands against a running scheduler: generate prints what the unary API
returns, health and info answer; deploy/local/astr-local starts and stops a local deployment."""

import json
import os
import re
import socket
import urllib.request
import subprocess

import pytest

import harness
from harness import request, unary

PROMPTS = ["Once upon a time", "The little dog"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("mode", ["stream", "no_stream"])
def test_generate_prints_unary_text(cluster, prompt, mode):
    want = unary(cluster.stub, request(text=prompt, max_tokens=16)).one().text
    assert not want.endswith("\n")
    extra = ["--no-stream"] if mode == "no_stream" else []
    r = harness.run_cli(
        "generate", "--server", cluster.scheduler.address, "--prompt", prompt,
        "--temperature", "0", "--max-tokens", "16", *extra,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.removesuffix("\n") == want, f"stdout {r.stdout!r}, unary text {want!r}"


def test_health(cluster):
    r = harness.run_cli("health", "--server", cluster.scheduler.address)
    assert r.returncode == 0, r.stdout + r.stderr


def test_health_fails_without_server():
    r = harness.run_cli("health", "--server", f"127.0.0.1:{free_port()}", timeout=60)
    assert r.returncode != 0, r.stdout


def test_info(cluster):
    r = harness.run_cli("info", "--server", cluster.scheduler.address)
    assert r.returncode == 0, r.stderr
    info = cluster.scheduler.model_info()
    assert info.model_name in r.stdout
    assert cluster.workers[0].address in r.stdout


LOCAL = os.path.join(harness.SOURCE_DIR, "deploy", "local", "astr-local")


@pytest.mark.skipif(not os.access(LOCAL, os.X_OK), reason="deploy/local/astr-local not written yet")
def test_astr_local_detach_status_stop(tmp_path):
    pid_file = str(tmp_path / "astr-local.pid")
    common = ["--pid-file", pid_file]
    start = subprocess.run(
        [LOCAL, "--detach", "--model", harness.STORIES, "--workers", "2", "--port", "0", "--http-port", "0",
         "--threads", "1", "--num-pages", "256", "--log-dir", str(tmp_path / "logs"),
         "--build-dir", os.path.dirname(harness.BIN_DIR), "--start-timeout-s", "60"] + common,
        capture_output=True, text=True, timeout=120,
    )
    try:
        assert start.returncode == 0, start.stdout + start.stderr
        addr = start.stdout.strip().splitlines()[-1]
        assert addr.startswith("127.0.0.1:"), start.stdout
        harness.wait_serving(addr, timeout=30)
        status = subprocess.run([LOCAL, "status"] + common, capture_output=True, text=True, timeout=30)
        assert status.returncode == 0, status.stdout + status.stderr
        r = harness.run_cli("generate", "--server", addr, "--prompt", "Once upon a time",
                            "--temperature", "0", "--max-tokens", "8")
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith(", there was a little girl")  # llama.cpp golden (models/README.md)
        r = harness.run_cli("info", "--server", addr)
        assert r.returncode == 0 and r.stdout.count("127.0.0.1:") >= 2, r.stdout  # both workers
        # The OpenAI-compatible HTTP API answers on the port astr-local reported.
        m = re.search(r"HTTP API \(OpenAI-compatible\) at (http://127\.0\.0\.1:\d+/v1)", start.stderr)
        assert m, start.stderr
        with urllib.request.urlopen(m.group(1) + "/models", timeout=30) as resp:
            model = json.loads(resp.read())["data"][0]
        assert model["object"] == "model" and model["id"] and model["id"] in r.stdout, (model, r.stdout)
    finally:
        stop = subprocess.run([LOCAL, "stop", "--stop-timeout-s", "30"] + common,
                              capture_output=True, text=True, timeout=120)
    assert stop.returncode == 0, stop.stdout + stop.stderr
    health = harness.run_cli("health", "--server", addr)
    assert health.returncode != 0, "the deployment still answers after stop"
    status = subprocess.run([LOCAL, "status"] + common, capture_output=True, text=True, timeout=30)
    assert status.returncode != 0, "status says running after stop"
