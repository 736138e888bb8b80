"""SGLang's weight-sync and generation-control HTTP routes, and vLLM's /pause, /resume and
/is_paused (--admin-http-listen, docs/rl.md), sent the way their RL clients send them: `requests.post(f"{url}/update_weights_from_disk",
json={"model_path": ...})` and friends, with the admin token as a Bearer header.

A trainer's Hugging Face checkpoint posted to workers that serve the GGUF changes the served
greedy output to `astr run`'s on that checkpoint; a missing or wrong token is refused (401/403)
and changes nothing; pause / continue / flush / version behave as SGLang documents them."""
import re
import subprocess
import threading

import pytest
import requests

import harness
import weights as W
from harness import request

pytestmark = pytest.mark.skipif(bool(harness.missing_binaries()), reason="binaries not built")

PROMPT = [1, 403, 407, 261, 378]
_ADMIN_HTTP_RE = re.compile(r"admin http on (\S+):(\d+)")
BEARER = {"Authorization": f"Bearer {W.TOKEN}"}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("sglang_http")
    old = W.convert_stories(str(root / "old"))
    new = W.write_folder(old, W.perturbed(W.load(old), seed=3), str(root / "new"))
    return {"root": root, "old": old, "new": new, "token": W.token_file(str(root))}


@pytest.fixture
def served(make_cluster, models):
    """Two workers serving stories260K from GGUF; the scheduler with the admin HTTP routes."""
    c = make_cluster(model=harness.STORIES, num_workers=2, worker_flags={"dtype": "f32"},
                     scheduler_flags={"admin_token_file": models["token"],
                                      "admin_http_listen": "127.0.0.1:0",
                                      "tokenizer": harness.STORIES})
    url = "http://" + c.scheduler.proc.wait_log(_ADMIN_HTTP_RE)
    return c, url


def greedy(c, max_tokens=24):
    return list(c.stub.Generate(request(token_ids=PROMPT, max_tokens=max_tokens),
                                timeout=harness.RPC_TIMEOUT_S).completions[0].token_ids)


def offline(model, max_tokens=24):
    return harness.offline_run(model, prompt_ids=PROMPT, max_tokens=max_tokens,
                               extra=("--dtype", "f32"))["token_ids"]


def test_update_weights_from_disk_serves_the_checkpoint(served, models):
    c, url = served
    assert greedy(c) == offline(harness.STORIES)
    # What verl's / slime's SGLang client posts.
    r = requests.post(f"{url}/update_weights_from_disk",
                      json={"model_path": models["new"], "weight_version": "step-7"},
                      headers=BEARER, timeout=120)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["success"] is True and body["num_paused_requests"] == 0
    assert greedy(c) == offline(models["new"])
    assert requests.get(f"{url}/get_weight_version", headers=BEARER,
                        timeout=10).json() == {"weight_version": "step-7"}

    # Another model is refused, naming what differs, and the served weights stay.
    other = str(models["root"] / "other")
    subprocess.run([harness.ASTR_BIN, "make-model", "--format", "hf", "--dtype", "f32",
                    "--layers", "2", "--out", other], check=True, capture_output=True)
    r = requests.post(f"{url}/update_weights_from_disk", json={"model_path": other},
                      headers=BEARER, timeout=60)
    assert r.status_code == 400
    assert r.json()["success"] is False and "not the served model" in r.json()["message"]
    assert greedy(c) == offline(models["new"])


def test_the_token_is_required_and_a_refusal_changes_nothing(served, models):
    c, url = served
    for headers, status in [({}, 401), ({"Authorization": W.TOKEN}, 401),
                            ({"Authorization": "Bearer wrong"}, 403)]:
        r = requests.post(f"{url}/update_weights_from_disk", json={"model_path": models["new"]},
                          headers=headers, timeout=30)
        assert r.status_code == status, (headers, r.text)
        assert r.json()["success"] is False
        r = requests.get(f"{url}/get_weight_version", headers=headers, timeout=10)
        assert r.status_code == status
    assert requests.get(f"{url}/get_weight_version", headers=BEARER,
                        timeout=10).json() == {"weight_version": "0"}
    assert greedy(c) == offline(harness.STORIES)


def test_bad_bodies_name_the_field(served):
    _, url = served
    cases = [({"model_path": 5}, "model_path"), ({}, "model_path"),
             ({"model_path": "/x", "abort_all_requests": "yes"}, "abort_all_requests")]
    for body, field in cases:
        r = requests.post(f"{url}/update_weights_from_disk", json=body, headers=BEARER, timeout=30)
        assert r.status_code == 400 and field in r.json()["message"], (body, r.text)
    r = requests.post(f"{url}/update_weights_from_disk", data="{", headers=BEARER, timeout=30)
    assert r.status_code == 400 and "JSON" in r.json()["message"]
    r = requests.post(f"{url}/pause_generation", json={"mode": "later"}, headers=BEARER, timeout=30)
    assert r.status_code == 400 and "mode" in r.json()["message"]
    r = requests.post(f"{url}/no_such_route", json={}, headers=BEARER, timeout=30)
    assert r.status_code == 404


def test_pause_in_place_holds_generation_until_continue(served):
    c, url = served
    want = greedy(c)
    r = requests.post(f"{url}/pause_generation", json={"mode": "in_place"}, headers=BEARER,
                      timeout=30)
    assert r.status_code == 200 and r.json()["status"] == "ok"
    got = {}
    t = threading.Thread(target=lambda: got.update(ids=greedy(c)))
    t.start()
    t.join(timeout=1.0)
    assert t.is_alive(), "a request completed while generation was paused"
    # slime's call: json={}.
    r = requests.post(f"{url}/continue_generation", json={}, headers=BEARER, timeout=30)
    assert r.status_code == 200 and r.json()["status"] == "ok"
    t.join(timeout=60)
    assert got["ids"] == want
    r = requests.post(f"{url}/flush_cache", headers=BEARER, timeout=30)
    assert r.status_code == 200 and "flushed" in r.text


def test_abort_request_by_rid_and_all(served):
    c, url = served
    # Paused, so the requests wait in the queue, where an abort finds them deterministically.
    assert requests.post(f"{url}/pause_generation", json={"mode": "in_place"}, headers=BEARER,
                         timeout=30).json()["status"] == "ok"
    results = {}

    def run(rid):
        results[rid] = c.stub.Generate(request(token_ids=PROMPT, max_tokens=16, request_id=rid),
                                       timeout=harness.RPC_TIMEOUT_S).completions[0]

    threads = [threading.Thread(target=run, args=(rid,)) for rid in ("a-1", "a-2", "a-3")]
    for t in threads:
        t.start()
    harness.wait_until(lambda: c.stats().waiting_requests == 3, 30)
    # verl's call: {"rid": ..., "abort_all": false}; SGLang answers 200 with an empty body.
    r = requests.post(f"{url}/abort_request", json={"rid": "a-2", "abort_all": False},
                      headers=BEARER, timeout=30)
    assert r.status_code == 200 and r.text == ""
    threads[1].join(timeout=30)
    assert results["a-2"].finish_reason == harness.pb.FINISH_REASON_ABORT
    assert "a-1" not in results and "a-3" not in results  # the others still wait
    r = requests.post(f"{url}/abort_request", json={"abort_all": True}, headers=BEARER,
                      timeout=30)
    assert r.status_code == 200
    for t in threads:
        t.join(timeout=30)
    assert all(results[rid].finish_reason == harness.pb.FINISH_REASON_ABORT
               for rid in ("a-1", "a-3"))
    # AReaL's call: no body at all.
    r = requests.post(f"{url}/continue_generation", headers=BEARER, timeout=30)
    assert r.status_code == 200 and r.json()["status"] == "ok"
    assert greedy(c) == offline(harness.STORIES)
    r = requests.post(f"{url}/abort_request", json={}, headers=BEARER, timeout=30)
    assert r.status_code == 400 and "rid" in r.json()["message"]


def test_vllm_pause_keep_and_resume(served):
    # vLLM's RL routes: POST /pause?mode=..., POST /resume, GET /is_paused.
    c, url = served
    want = greedy(c)
    r = requests.post(f"{url}/pause", params={"mode": "keep"}, headers=BEARER, timeout=30)
    assert r.status_code == 200 and r.json() == {"status": "paused"}
    assert requests.get(f"{url}/is_paused", headers=BEARER, timeout=10).json() == {
        "is_paused": True}
    got = {}
    t = threading.Thread(target=lambda: got.update(ids=greedy(c)))
    t.start()
    t.join(timeout=1.0)
    assert t.is_alive(), "a request completed while generation was paused"
    r = requests.post(f"{url}/resume", headers=BEARER, timeout=30)
    assert r.status_code == 200 and r.json() == {"status": "resumed"}
    t.join(timeout=60)
    assert got["ids"] == want
    assert requests.get(f"{url}/is_paused", headers=BEARER, timeout=10).json() == {
        "is_paused": False}


def test_vllm_pause_waits_for_inflight_requests(served):
    c, url = served
    done = {}
    t = threading.Thread(target=lambda: done.update(ids=greedy(c, max_tokens=100)))
    t.start()
    harness.wait_until(lambda: c.stats().running_requests >= 1 or "ids" in done, 30)
    # The deprecated knob means mode=wait: the answer comes once nothing runs.
    r = requests.post(f"{url}/pause", params={"wait_for_inflight_requests": "true"},
                      headers=BEARER, timeout=60)
    assert r.status_code == 200 and r.json() == {"status": "paused"}
    t.join(timeout=30)  # its last message may still be on its way
    assert not t.is_alive() and len(done["ids"]) == 100  # it finished, not aborted
    assert requests.post(f"{url}/resume", headers=BEARER, timeout=30).status_code == 200
    for params in ({"mode": "later"}, {"clear_cache": "maybe"}):
        r = requests.post(f"{url}/pause", params=params, headers=BEARER, timeout=30)
        assert r.status_code == 400 and "error" in r.json(), r.text
    assert requests.get(f"{url}/is_paused", headers=BEARER, timeout=10).json() == {
        "is_paused": False}


def test_x_api_key_and_model_info(served):
    _, url = served
    r = requests.get(f"{url}/model_info", headers={"X-API-Key": W.TOKEN}, timeout=10)
    assert r.status_code == 200
    info = r.json()
    assert info["weight_version"] == "0" and info["is_generation"] is True
    assert info["model_path"] == harness.STORIES
    assert requests.get(f"{url}/model_info", headers={"X-API-Key": "wrong"},
                        timeout=10).status_code == 403


def test_abort_all_requests_with_the_update(served, models):
    c, url = served
    # A long request runs while the update aborts it (SGLang's abort_all_requests).
    done = {}

    def long_request():
        done["completion"] = c.stub.Generate(request(token_ids=PROMPT, max_tokens=200),
                                             timeout=harness.RPC_TIMEOUT_S).completions[0]

    t = threading.Thread(target=long_request)
    t.start()
    r = requests.post(f"{url}/update_weights_from_disk",
                      json={"model_path": models["new"], "abort_all_requests": True},
                      headers=BEARER, timeout=120)
    t.join(timeout=60)
    assert r.status_code == 200 and r.json()["success"] is True, r.text
    assert r.json()["num_paused_requests"] in (0, 1)
    # Generation serves on afterwards, on the new weights.
    assert greedy(c) == offline(models["new"])


def test_the_routes_need_a_token_file(tmp_path):
    # Refused as a usage error before any worker is dialed (this one does not exist).
    r = subprocess.run([harness.SCHEDULER_BIN, "--workers", "127.0.0.1:1", "--listen",
                        "127.0.0.1:0", "--admin-http-listen", "127.0.0.1:0"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "--admin-http-listen needs --admin-token-file" in r.stderr
