"""Releasing and taking back GPU memory on the emulated CUDA backend (docs/rl.md "Releasing GPU
memory"): Admin.ReleaseMemory / ResumeMemory over gRPC, SGLang's /release_memory_occupation and
/resume_memory_occupation and vLLM's /sleep, /wake_up and /is_sleeping over the admin HTTP routes.
The emulated device's free memory (its profile, cudaMemGetInfo) grows by what is released; while
released, generation does not resume; afterwards the served greedy tokens are the offline
engine's again (the captured CUDA graphs replay at the same addresses), or, when the weights were
discarded, those of the weights pushed after resuming."""

import os
import re
import threading

import grpc
import pytest
import requests

import astr
import harness
import weights as W
from harness import request

pytestmark = pytest.mark.skipif(bool(harness.missing_binaries()), reason="binaries not built")

PLUGIN = os.path.join(os.path.dirname(harness.WORKER_BIN), "..", "lib", "libastr_backend_cuda_emu.so")
PROMPTS = [[1, 403, 407, 261, 378], [1, 298, 315, 421]]
MAX_TOKENS = 12
_ADMIN_HTTP_RE = re.compile(r"admin http on (\S+):(\d+)")
BEARER = {"Authorization": f"Bearer {W.TOKEN}"}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    if not os.path.exists(PLUGIN):
        pytest.fail(f"{PLUGIN} was not built")
    root = tmp_path_factory.mktemp("gpu-memory")
    old = W.convert_stories(str(root / "old"))
    new_t = W.perturbed(W.load(old), seed=5, scale=0.05)
    return {"old": old, "new_t": new_t, "new": W.write_folder(old, new_t, str(root / "new")),
            "token": W.token_file(str(root))}


@pytest.fixture(autouse=True)
def emu_env(monkeypatch):
    monkeypatch.setenv("ASTR_CUDA_PLUGIN", PLUGIN)


@pytest.fixture
def served(make_cluster, models):
    c = make_cluster(model=models["old"], num_workers=1,
                     worker_flags={"backend": "cuda", "num_pages": 256, "page_size": 16,
                                   "max_batch": 4},
                     scheduler_flags={"admin_token_file": models["token"],
                                      "admin_http_listen": "127.0.0.1:0",
                                      "tokenizer": harness.STORIES})
    url = "http://" + c.scheduler.proc.wait_log(_ADMIN_HTTP_RE)
    admin = astr.AdminClient(c.scheduler.admin_address, token=W.TOKEN, timeout=120)
    return c, admin, url


def greedy(c, prompt, timeout=harness.RPC_TIMEOUT_S):
    return list(c.stub.Generate(request(token_ids=prompt, max_tokens=MAX_TOKENS),
                                timeout=timeout).completions[0].token_ids)


def offline(model, prompt):
    return harness.offline_run(model, prompt_ids=prompt, max_tokens=MAX_TOKENS,
                               extra=("--backend", "cuda"))["token_ids"]


def assert_serves(c, model):
    for p in PROMPTS:
        assert greedy(c, p) == offline(model, p)


def code_of(call):
    with pytest.raises(astr.AstrError) as e:
        call()
    return e.value.code, e.value.message


def test_release_and_resume_over_grpc(served, models):
    c, admin, _ = served
    assert_serves(c, models["old"])
    code, msg = code_of(lambda: admin.release_memory())
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "pause" in msg
    admin.pause("abort")
    code, msg = code_of(lambda: admin.release_memory(["disk"]))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "tags[0]" in msg and "disk" in msg
    # Weights kept on the host (vLLM's level 1), the KV pool dropped.
    released = admin.release_memory(keep_weights_on_host=True)
    restored_free_before = released.device_free_bytes
    assert released.bytes_released > 0
    code, msg = code_of(lambda: admin.resume())
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "ResumeMemory" in msg
    back = admin.resume_memory()
    assert back.bytes_restored == released.bytes_released
    # The device's free memory fell back by what was released (the emulated profile counts it).
    assert restored_free_before - back.device_free_bytes == released.bytes_released
    admin.resume()
    assert_serves(c, models["old"])
    log = c.workers[0].proc.log_text()
    assert "weights kept on the host" in log and "took back" in log, log[-2000:]


def test_discarded_weights_must_be_updated_before_serving(served, models):
    c, admin, _ = served
    admin.pause("abort")
    r = admin.release_memory(["weights", "kv_cache"])  # discard the weights (SGLang, level 2)
    assert r.bytes_released > 0
    # No update lands in released memory.
    with pytest.raises(grpc.RpcError) as e:
        W.push(c.scheduler.admin_stub(), models["new_t"])
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION, e.value
    assert "ResumeMemory" in e.value.details()
    admin.resume_memory(["weights"])
    code, msg = code_of(lambda: admin.resume())
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "KV cache" in msg
    admin.resume_memory(["kv_cache"])
    code, msg = code_of(lambda: admin.resume())
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "update them" in msg
    reply = astr.WeightSync(admin).push(models["new_t"], label="after-release")
    assert reply.version == 1
    admin.resume()
    assert_serves(c, models["new"])


def test_sglang_and_vllm_routes(served, models):
    c, admin, url = served
    # What verl's SGLang client posts: no pause first; running requests finish, then it releases.
    r = requests.post(f"{url}/release_memory_occupation", json={"tags": ["kv_cache", "weights"]},
                      headers=BEARER, timeout=120)
    assert r.status_code == 200 and r.json()["success"] is True and r.json()["bytes"] > 0, r.text
    assert requests.get(f"{url}/is_sleeping", headers=BEARER, timeout=30).json() == \
        {"is_sleeping": True}
    # A request that arrives meanwhile waits, and is served once the memory is back.
    got = {}
    waiting = threading.Thread(target=lambda: got.update(ids=greedy(c, PROMPTS[0], timeout=300)))
    waiting.start()
    r = requests.post(f"{url}/resume_memory_occupation", json={"tags": ["weights"]},
                      headers=BEARER, timeout=120)
    assert r.status_code == 200, r.text
    assert "ids" not in got  # the KV cache is still released
    r = requests.post(f"{url}/resume_memory_occupation", json={}, headers=BEARER, timeout=120)
    assert r.status_code == 200, r.text
    # Discarded weights came back as garbage: the request must not run on them; generation stays
    # paused until an update replaces them.
    waiting.join(timeout=2)
    assert "ids" not in got
    assert requests.get(f"{url}/is_sleeping", headers=BEARER, timeout=30).json() == \
        {"is_sleeping": True}
    r = requests.post(f"{url}/update_weights_from_disk", json={"model_path": models["new"]},
                      headers=BEARER, timeout=300)
    assert r.status_code == 200, r.text
    waiting.join(timeout=300)
    assert got["ids"] == offline(models["new"], PROMPTS[0])
    # vLLM: level 1 keeps the weights on the host; wake_up takes everything back.
    r = requests.post(f"{url}/sleep?level=1", headers=BEARER, timeout=120)
    assert r.status_code == 200, r.text
    r = requests.post(f"{url}/sleep?level=3", headers=BEARER, timeout=120)
    assert r.status_code == 400 and "level" in r.text
    r = requests.post(f"{url}/wake_up?tags=weights,kv_cache", headers=BEARER, timeout=120)
    assert r.status_code == 200, r.text
    assert requests.get(f"{url}/is_sleeping", headers=BEARER, timeout=30).json() == \
        {"is_sleeping": False}
    assert_serves(c, models["new"])
    # Without the token nothing is released.
    assert requests.post(f"{url}/sleep", timeout=30).status_code == 401
