"""The HTTP API's API keys (--api-key-file), and what it does while the scheduler drains after
SIGTERM: /health and new requests answer 503 with Retry-After, and a stream still open at the drain
timeout ends with an error event and [DONE] (docs/http.md)."""
import os
import signal
import threading

import openai
import pytest

import harness
import openai_http as oh
import weights as W
from harness import apb

pytestmark = pytest.mark.skipif(bool(harness.missing_binaries()), reason="binaries not built")

KEYS = ["key-one-0123456789", "key-two-abcdefghij"]


def key_file(tmp_path):
    path = tmp_path / "api.keys"
    path.write_text("# API keys\n" + KEYS[0] + "\n\n  " + KEYS[1] + "  \n")
    return str(path)


def completion(cluster, headers=None):
    return oh.post(cluster.scheduler.http_address, "/v1/completions",
                   {"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0},
                   headers=headers)


def test_api_keys(make_cluster, tmp_path):
    c = make_cluster(scheduler_flags={"api_key_file": key_file(tmp_path)})
    addr = c.scheduler.http_address
    for headers, why in [(None, "missing"), ({"Authorization": "Bearer wrong"}, "wrong"),
                         ({"Authorization": KEYS[0]}, "no Bearer"),
                         ({"Authorization": "Bearer " + KEYS[0][:-1]}, "a prefix of a key")]:
        r = completion(c, headers)
        assert r.status == 401, (why, r)
        err = r.json()["error"]
        assert err["code"] == "invalid_api_key", err
        assert KEYS[0] not in err["message"] and KEYS[1] not in err["message"]
    for key in KEYS:
        r = completion(c, {"Authorization": "Bearer " + key})
        assert r.status == 200, r
        assert r.json()["usage"]["completion_tokens"] == 4
    # Tokenization and the model list need a key too; health and metrics never do.
    assert oh.post(addr, "/tokenize", {"prompt": "hi"}).status == 401
    assert oh.get(addr, "/v1/models").status == 401
    assert oh.get(addr, "/health").status == 200
    assert oh.get(addr, "/metrics").status == 200
    # The official client: the right key works, a wrong one is AuthenticationError.
    good = openai.OpenAI(base_url=c.scheduler.http_url + "/v1", api_key=KEYS[1], max_retries=0)
    model = good.models.list().data[0].id
    assert good.completions.create(model=model, prompt="Once", max_tokens=2,
                                  temperature=0).usage.completion_tokens == 2
    bad = openai.OpenAI(base_url=c.scheduler.http_url + "/v1", api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.completions.create(model=model, prompt="Once", max_tokens=2)


def test_a_key_file_without_keys_is_refused(new_cluster, tmp_path):
    empty = tmp_path / "empty.keys"
    empty.write_text("# nothing\n\n")
    c = new_cluster()
    c.start_worker()
    with pytest.raises(RuntimeError) as e:
        c.start_scheduler(api_key_file=str(empty))
    assert "--api-key-file" in str(e.value)


def test_drain_answers_503_and_ends_open_streams_with_an_error(make_cluster, tmp_path):
    token = W.token_file(str(tmp_path))
    c = make_cluster(scheduler_flags={"admin_token_file": token, "drain_timeout_s": 4,
                                      "sse_ping_s": 0.1})
    addr = c.scheduler.http_address
    admin = c.scheduler.admin_stub()
    # Freeze the scheduler so the stream below stays open (queued) until the drain timeout.
    admin.Pause(apb.PauseRequest(mode=apb.PAUSE_MODE_KEEP), metadata=W.auth(), timeout=30)
    result = {}

    def stream():
        result["r"] = oh.post(addr, "/v1/completions",
                              {"prompt": "Once upon a time", "max_tokens": 32, "stream": True},
                              timeout=60)

    t = threading.Thread(target=stream)
    t.start()
    harness.wait_until(lambda: c.stats().waiting_requests == 1, timeout=30)  # queued
    os.kill(c.scheduler.proc.proc.pid, signal.SIGTERM)
    harness.wait_until(lambda: oh.get(addr, "/health").status == 503, timeout=10)  # draining
    health = oh.get(addr, "/health")
    assert health.status == 503 and "retry-after" in health.headers, health
    r = completion(c)
    assert r.status == 503, r
    assert r.headers.get("retry-after") == "1", r.headers
    assert r.json()["error"]["type"] == "service_unavailable"
    t.join(timeout=60)
    assert not t.is_alive()
    body = result["r"].text()
    data = [line[6:] for line in body.split("\n") if line.startswith("data: ")]
    assert data[-1] == "[DONE]", body[-500:]
    assert '"error"' in data[-2], body[-500:]
    assert c.scheduler.proc.proc.wait(timeout=60) == 0
