"""The services' logs: with --log-format=json every line astr-worker and astr-scheduler write to
stderr, from start to the exit after SIGTERM, is one JSON object with time, level, thread, file,
line and message; the default text format is glog's line, and a bad log flag is a usage error."""

import datetime
import json
import re
import signal
import subprocess

import harness
from harness import STORIES

EXIT_TIMEOUT_S = 30
FIELDS = ["time", "level", "thread", "file", "line", "message"]
TIME_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$")
# glog's prefix: severity letter, yyyymmdd hh:mm:ss.uuuuuu, thread id, file:line]
TEXT_RE = re.compile(r"^[IWEF]\d{8} \d{2}:\d{2}:\d{2}\.\d{6} +\d+ [\w.]+:\d+\] ")


def sigterm_and_wait(c, proc):
    """SIGTERM to one process of cluster `c`; returns its whole log once it exited 0."""
    proc.signal(signal.SIGTERM)
    assert proc.wait(EXIT_TIMEOUT_S) == 0, proc.log_tail()
    return proc.log_text()


def json_records(log):
    """Every line of `log` parsed; fails naming the first line that is not a log object."""
    records = []
    lines = log.splitlines()
    assert lines, "empty log"
    for line in lines:
        try:
            r = json.loads(line)
        except json.JSONDecodeError as e:
            raise AssertionError(f"not a JSON line ({e}): {line!r}") from None
        assert isinstance(r, dict), line
        assert list(r) == FIELDS, line
        assert TIME_RE.match(r["time"]), line
        datetime.datetime.strptime(r["time"], "%Y-%m-%dT%H:%M:%S.%fZ")  # a real date and time
        assert r["level"] in ("INFO", "WARNING", "ERROR"), line
        assert isinstance(r["thread"], int) and r["thread"] > 0, line
        assert r["file"].endswith(".cc") and "/" not in r["file"], line
        assert isinstance(r["line"], int) and r["line"] > 0, line
        assert isinstance(r["message"], str) and r["message"], line
        records.append(r)
    return records


def messages(records):
    return [r["message"] for r in records]


def test_worker_json_log_is_one_object_per_line_from_start_to_sigterm(log_dir):
    c = harness.Cluster(log_dir)
    try:
        w = c.start_worker(log_format="json")
        log = sigterm_and_wait(c, w.proc)
    finally:
        c.close()
    msgs = messages(json_records(log))
    assert any(m.startswith("model: ") for m in msgs), msgs
    assert any(m.startswith("KV pool: ") for m in msgs), msgs
    assert f"listening on {w.address}" in msgs, msgs
    assert ("received SIGTERM: draining (running sequences may finish for up to 60 s), then "
            "shutting down") in msgs, msgs
    assert msgs[-1] == "stopped", msgs


def test_scheduler_json_log_is_one_object_per_line_from_start_to_sigterm(log_dir):
    c = harness.Cluster(log_dir)
    try:
        w = c.start_worker()
        s = c.start_scheduler(log_format="json")
        log = sigterm_and_wait(c, s.proc)
    finally:
        c.close()
    msgs = messages(json_records(log))
    assert any(m.startswith(f"worker {w.address}: ") for m in msgs), msgs
    assert f"listening on {s.proc.address}" in msgs, msgs
    assert "received SIGTERM: draining (new requests get UNAVAILABLE)" in msgs, msgs
    assert "drained: no request left" in msgs, msgs
    assert msgs[-1] == "stopped", msgs


def test_worker_text_log_lines_carry_glogs_prefix(log_dir):
    c = harness.Cluster(log_dir)
    try:
        w = c.start_worker()
        log = sigterm_and_wait(c, w.proc)
    finally:
        c.close()
    lines = log.splitlines()
    assert lines
    for line in lines:
        assert TEXT_RE.match(line), line
    assert any(line.endswith(f"] listening on {w.address}") for line in lines), lines


def test_bad_log_flags_are_usage_errors():
    for flag, value, said in [
        ("--log-format", "xml", "--log-format: 'xml' is not one of text or json"),
        ("--log-level", "debug", "--log-level: 'debug' is not one of info, warning or error"),
    ]:
        for binary, extra in [
            (harness.WORKER_BIN, ["--model", STORIES]),
            (harness.SCHEDULER_BIN, ["--workers", "127.0.0.1:1"]),
        ]:
            r = subprocess.run(
                [binary, *extra, flag, value], capture_output=True, text=True, timeout=60
            )
            assert r.returncode == 2, (binary, r.stderr)
            assert said in r.stderr, (binary, r.stderr)
            assert "listening on" not in r.stderr
