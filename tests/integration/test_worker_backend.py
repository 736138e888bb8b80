"""astr-worker's backend choice on a machine without a usable GPU: `cuda` (from --backend or
ASTR_BACKEND) is refused with the reason, `auto` serves on the CPU and logs why CUDA was not used,
and the real CUDA plugin, forced to load, reports the CUDA runtime's reason."""

import os
import subprocess

import pytest

import harness
from harness import STORIES

NEEDS_BINARIES = [harness.WORKER_BIN]
PLUGIN = os.path.join(harness.BIN_DIR, "..", "lib", "libastr_backend_cuda.so")
HAS_DRIVER = os.path.exists("/dev/nvidiactl") or os.path.exists("/proc/driver/nvidia/version")

pytestmark = pytest.mark.skipif(HAS_DRIVER, reason="this machine has an NVIDIA driver")


def run_worker(args, env_extra=None):
    env = dict(os.environ)
    env.pop("ASTR_BACKEND", None)
    env.update(env_extra or {})
    argv = [harness.WORKER_BIN, "--model", STORIES, "--listen", "127.0.0.1:0", "--threads", "1"]
    return subprocess.run(argv + args, env=env, capture_output=True, text=True, timeout=60)


def test_explicit_cuda_is_refused_with_the_reason():
    r = run_worker(["--backend", "cuda"])
    assert r.returncode == 1, r.stderr
    assert "the CUDA backend cannot run" in r.stderr
    assert "no NVIDIA driver" in r.stderr or "no CUDA backend" in r.stderr
    assert "listening on" not in r.stderr


def test_cuda_from_the_environment_is_refused_too():
    r = run_worker([], {"ASTR_BACKEND": "cuda"})
    assert r.returncode == 1, r.stderr
    assert "the CUDA backend cannot run" in r.stderr


def test_unknown_backend_is_a_usage_error():
    r = run_worker(["--backend", "gpu"])
    assert r.returncode == 2
    assert "--backend: 'gpu' is not one of auto, cpu, cuda or instant" in r.stderr


def start_auto_worker(log_dir, monkeypatch, env_extra):
    monkeypatch.delenv("ASTR_BACKEND", raising=False)
    for k, v in env_extra.items():
        monkeypatch.setenv(k, v)
    argv = [harness.WORKER_BIN, "--model", STORIES, "--listen", "127.0.0.1:0", "--threads", "1",
            "--backend", "auto"]
    proc = harness.ServerProcess("auto-worker", argv, log_dir)
    proc.wait_listening()
    harness.wait_serving(proc.address)
    return harness.Worker(proc)


def test_auto_serves_on_the_cpu_and_says_why(log_dir, monkeypatch):
    w = start_auto_worker(log_dir, monkeypatch, {})
    try:
        assert w.info().backend == "cpu"
        log = w.proc.log_text()
        assert "not using CUDA: " in log
        assert "running on the CPU backend" in log
    finally:
        w.close()


@pytest.mark.skipif(not os.path.exists(PLUGIN), reason="built without CUDA")
def test_auto_with_the_real_plugin_reports_the_runtime_reason(log_dir, monkeypatch):
    # Forced to load, the plugin starts without a driver library and its probe answers.
    w = start_auto_worker(log_dir, monkeypatch, {"ASTR_CUDA_PLUGIN": os.path.abspath(PLUGIN)})
    try:
        assert w.info().backend == "cpu"
        assert "not using CUDA: no usable CUDA device: " in w.proc.log_text()
    finally:
        w.close()
    r = run_worker(["--backend", "cuda"], {"ASTR_CUDA_PLUGIN": os.path.abspath(PLUGIN)})
    assert r.returncode == 1
    assert "no usable CUDA device" in r.stderr
