"""astr-scheduler refuses a bad flag value before dialing any worker: exit code 2 and a message
naming the flag, within a moment (the worker address given is unreachable on purpose)."""

import subprocess

import pytest

import harness

UNREACHABLE = "127.0.0.1:1"

pytestmark = pytest.mark.skipif(
    bool(harness.missing_binaries((harness.SCHEDULER_BIN,))), reason="astr-scheduler not built"
)


@pytest.mark.parametrize(
    "flag,value",
    [
        ("--max-batch-tokens", "0"),
        ("--max-running", "0"),
        ("--prefill-chunk", "0"),
        ("--max-queued-requests", "0"),
        ("--max-queued-tokens", "0"),
        ("--worker-down-after-ms", "-1"),
        ("--reconnect-attempt-ms", "0"),
        ("--max-worker-failures", "-1"),
        ("--step-timeout-ms", "-1"),
        ("--drain-timeout-s", "-1"),
        ("--max-n", "0"),
        ("--max-stop-strings", "0"),
        ("--connect-timeout-s", "0"),
        ("--max-calls-per-peer", "-1"),
        ("--front-threads", "0"),
        ("--front-threads", "257"),
        ("--stream-stall-timeout-s", "-1"),
        ("--stream-pause-ms", "-1"),
        ("--max-message-mb", "0"),
        ("--worker-refresh-s", "0"),
        ("--worker-drain-timeout-s", "-1"),
        ("--max-step-ms", "-2"),
        ("--cache-route-slack", "-1"),
        ("--grammar-threads", "0"),
        ("--grammar-cache-mb", "0"),
        ("--grammar-max-compile-ms", "0"),
        ("--grammar-max-compile-mb", "-1"),
        ("--grammar-compile-workers", "0"),
        ("--grammar-compile-workers", "65"),
        ("--grammar-compiles-per-client", "0"),
        ("--grammar-max-queued-per-client", "0"),
        ("--grammar-max-queued-mb", "0"),
        ("--tool-call-parser", "qwen"),
        ("--max-logit-bias", "0"),
        ("--max-stop-token-ids", "0"),
        ("--tls-cert-file", "/nonexistent/cert.pem"),  # no key: they go together
        ("--tls-client-ca-file", "/nonexistent/ca.pem"),  # a client CA needs a certificate
        ("--worker-tls-ca-file", "/nonexistent/ca.pem"),
        ("--worker-tls-server-name", "workers.local"),  # needs --worker-tls-ca-file
        ("--api-key-file", "/nonexistent/keys"),
    ],
)
def test_bad_flag_value_is_refused_naming_the_flag(flag, value):
    proc = subprocess.run(
        [harness.SCHEDULER_BIN, "--workers", UNREACHABLE, "--listen", "127.0.0.1:0", flag, value],
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert proc.returncode == 2, proc.stderr
    assert flag in proc.stderr, proc.stderr


def test_a_key_that_is_not_its_certificates_is_refused(tmp_path):
    for name in ("a", "b"):
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                        str(tmp_path / f"{name}.key"), "-out", str(tmp_path / f"{name}.pem"),
                        "-days", "1", "-subj", f"/CN={name}"], check=True, capture_output=True)
    proc = subprocess.run(
        [harness.SCHEDULER_BIN, "--workers", UNREACHABLE, "--listen", "127.0.0.1:0",
         "--tls-cert-file", str(tmp_path / "a.pem"), "--tls-key-file", str(tmp_path / "b.key")],
        capture_output=True, text=True, timeout=10,
    )
    assert proc.returncode == 2, proc.stderr
    assert "the private key does not belong to the certificate" in proc.stderr, proc.stderr
    assert "--tls-key-file" in proc.stderr, proc.stderr


@pytest.mark.parametrize("workers", ["nohost", "host:0", "dns:///name", "[::1", "a:1,a:1", ","])
def test_bad_workers_entry_is_refused_naming_it(workers):
    proc = subprocess.run(
        [harness.SCHEDULER_BIN, "--workers", workers, "--listen", "127.0.0.1:0"],
        capture_output=True, text=True, timeout=10,
    )
    assert proc.returncode == 2, proc.stderr
    assert "--workers" in proc.stderr, proc.stderr


def test_help_lists_the_failure_handling_flags():
    proc = subprocess.run([harness.SCHEDULER_BIN, "--help"], capture_output=True, text=True,
                          timeout=10)
    assert proc.returncode == 0
    for flag in ("--step-timeout-ms", "--max-worker-failures", "--worker-down-after-ms",
                 "--reconnect-attempt-ms", "--overlap-steps", "--prefix-cache", "--max-step-ms",
                 "--cache-route-slack"):
        assert flag in proc.stdout, flag
