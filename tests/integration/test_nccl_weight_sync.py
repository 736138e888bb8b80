"""NCCL weight sync end to end on the emulated device (docs/rl.md "NCCL broadcast"; ctest label
nccl-emu): this test process is the trainer (rank 0, the Python SDK's WeightSync(transport="nccl")
over ctypes on lib/libastr_nccl_emu.so), the scheduler assigns ranks, and two astr-worker processes
on the emulated CUDA backend receive the broadcasts (their plugin loads the emulated NCCL beside
it). After an update the served greedy tokens equal the offline engine's (`astr run`, same
backend) on the new weights; a refused manifest or checksum changes nothing and leaves the group
usable; a trainer that dies mid-broadcast leaves every worker on the served version; SGLang's one
broadcast per tensor works too."""

import base64
import os
import re
import subprocess
import sys
import threading
import time

import grpc
import numpy as np
import pytest
import requests
import xxhash

import astr
import astr.nccl
import harness
import weights as W
from astr.nccl import FLOAT32, Nccl
from harness import apb, request

pytestmark = pytest.mark.skipif(bool(harness.missing_binaries()), reason="binaries not built")

LIB = os.path.join(os.path.dirname(harness.WORKER_BIN), "..", "lib")
PLUGIN = os.path.join(LIB, "libastr_backend_cuda_emu.so")
NCCL = os.path.join(LIB, "libastr_nccl_emu.so")
PROMPTS = [[1, 403, 407, 261, 378], [1, 298, 315, 421], [1, 432, 383, 286, 261, 376, 298]]
MAX_TOKENS = 16


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    for path in (PLUGIN, NCCL):
        if not os.path.exists(path):
            pytest.fail(f"{path} was not built")
    root = tmp_path_factory.mktemp("nccl")
    return W.old_and_new(root, seed=7, scale=0.05)


@pytest.fixture(autouse=True)
def emu_env(monkeypatch):
    # Workers and `astr run` inherit these; the workers find the emulated NCCL beside the plugin.
    monkeypatch.setenv("ASTR_CUDA_PLUGIN", PLUGIN)
    monkeypatch.setenv("ASTR_NCCL_EMU_TIMEOUT_S", "60")
    monkeypatch.delenv("ASTR_NCCL_LIBRARY", raising=False)


def start(make_cluster, models, workers=2):
    c = make_cluster(model=models["old"], num_workers=workers,
                     worker_flags={"backend": "cuda", "num_pages": 128, "page_size": 16,
                                   "max_batch": 8},
                     scheduler_flags={"admin_token_file": models["token"],
                                      "admin_http_listen": "127.0.0.1:0",
                                      "tokenizer": harness.STORIES})
    admin = astr.AdminClient(c.scheduler.admin_address, token=W.TOKEN, timeout=120)
    return c, admin


def greedy(c, prompt):
    return list(c.stub.Generate(request(token_ids=prompt, max_tokens=MAX_TOKENS),
                                timeout=harness.RPC_TIMEOUT_S).completions[0].token_ids)


def offline(model, prompt):
    return harness.offline_run(model, prompt_ids=prompt, max_tokens=MAX_TOKENS,
                               extra=("--backend", "cuda"))["token_ids"]


def assert_serves(c, model):
    for p in PROMPTS:
        assert greedy(c, p) == offline(model, p)


def sync_for(admin, **kw):
    kw.setdefault("bucket_bytes", 64 << 10)  # stories260K in f32 is ~1 MB: several broadcasts
    return astr.WeightSync(admin, transport="nccl", nccl_library=NCCL, group_timeout_s=60, **kw)


def test_nccl_push_serves_the_new_weights(make_cluster, models):
    c, admin = start(make_cluster, models)
    assert offline(models["new"], PROMPTS[0]) != offline(models["old"], PROMPTS[0])
    assert_serves(c, models["old"])
    sync = sync_for(admin)
    group = sync.init_group()
    assert group.world_size == 3 and group.group_name == "default"
    assert [r.rank for r in group.ranks] == [1, 2]
    assert "emulated NCCL" in group.nccl, group.nccl
    r = sync.push(models["new_t"], label="step-1")
    total = sum(a.nbytes for a in models["new_t"].values())
    assert (r.version, r.label, r.workers, r.tensors, r.bytes) == \
        (1, "step-1", 2, len(models["new_t"]), total)
    assert_serves(c, models["new"])
    # Both workers hold exactly the broadcast bytes.
    names = sorted(models["new_t"])[:4]
    sums = admin.get_weights_checksum(names)
    for t in sums.tensors:
        want = xxhash.xxh64(np.ascontiguousarray(models["new_t"][t.name]).tobytes()).intdigest()
        assert (t.source, t.consistent, t.xxh64) == ("pushed", True, want), t
    # The group stays: a second push (the old weights back) goes through it.
    r = sync.push(models["old_t"], label="step-2")
    assert r.version == 2
    assert_serves(c, models["old"])
    for w in c.workers:
        log = w.proc.log_text()
        assert "joined NCCL group 'default' as rank" in log and "emulated NCCL" in log, log[-2000:]
    sync.close()
    with pytest.raises(astr.AstrError) as e:
        admin.destroy_weight_update_group("default")
    assert e.value.code == grpc.StatusCode.NOT_FOUND


def test_refused_updates_leave_the_weights_and_the_group(make_cluster, models):
    c, admin = start(make_cluster, models)
    sync = sync_for(admin)
    # A shape the model does not have: every worker still receives every bucket, then refuses.
    bad = dict(models["new_t"])
    name = "model.layers.0.mlp.up_proj.weight"
    bad[name] = np.zeros((bad[name].shape[0] + 1, bad[name].shape[1]), np.float32)
    with pytest.raises(astr.AstrError) as e:
        sync.push(bad)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT, e.value
    assert name in e.value.message and "version 0 still serving" in e.value.message
    # A checksum that does not match the bytes.
    real = sync._checksum
    sync._checksum = lambda t: real(t) ^ 1 if t.name == name else real(t)
    with pytest.raises(astr.AstrError) as e:
        sync.push(models["new_t"])
    assert e.value.code == grpc.StatusCode.DATA_LOSS and name in e.value.message, e.value
    sync._checksum = real
    assert admin.get_weight_version().version == 0
    assert_serves(c, models["old"])
    # The same group (never re-made) then carries a good update.
    r = sync.push(models["new_t"], label="good")
    assert (r.version, r.workers) == (1, 2)
    assert_serves(c, models["new"])
    sync.close()


TRAINER = r"""
import os, sys, threading, time
import numpy as np
import astr
from astr.nccl import NcclTransport, UINT8
from astr.v1 import admin_pb2 as apb
address, token, lib = sys.argv[1:4]
admin = astr.AdminClient(address, token=token, timeout=120)
t = NcclTransport(admin, group_name="default", library=lib, group_timeout_s=60)
t.init_group()
manifest = apb.WeightManifest(tensors=[apb.TensorSpec(name="model.embed_tokens.weight",
                                                       dtype="f32", shape=[512, 64])])
threading.Thread(target=admin._call, daemon=True, args=(
    "UpdateWeightsFromDistributed",
    apb.UpdateWeightsFromDistributedRequest(group_name="default", manifest=manifest,
                                            bucket_bytes=4096),
    apb.UpdateWeightsResponse, 120)).start()
# The broadcasts land in socket buffers whether or not the workers receive yet: give the update
# call time to reach them, so that they are receiving when this process dies.
time.sleep(3)
buf = np.zeros(4096, np.uint8)
for _ in range(3):  # 3 of the 32 buckets, then the trainer dies
    t.nccl.broadcast(t.comm, int(buf.ctypes.data), 4096, UINT8)
print("dying", flush=True)
os._exit(3)
"""


def test_a_trainer_that_dies_mid_broadcast_changes_nothing(make_cluster, models, tmp_path):
    c, admin = start(make_cluster, models)
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run([sys.executable, str(script), c.scheduler.admin_address, W.TOKEN, NCCL],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 3 and "dying" in r.stdout, r.stderr
    # Destroying the group waits on each worker for the failed update to end.
    admin.destroy_weight_update_group("default")
    assert admin.get_weight_version().version == 0
    assert_serves(c, models["old"])
    for w in c.workers:
        log = w.proc.log_text()
        assert "failed, the group is aborted" in log and "from rank 0" in log, log[-3000:]
    # A new trainer makes a new group and updates.
    sync = sync_for(admin)
    assert sync.push(models["new_t"]).version == 1
    assert_serves(c, models["new"])
    sync.close()


def test_one_broadcast_per_tensor(make_cluster, models):
    """bucket_bytes = -1: each tensor its own broadcast in its dtype, as SGLang's trainers send."""
    c, admin = start(make_cluster, models)
    sync = sync_for(admin)
    sync.init_group()
    transport = sync._nccl
    tensors = {k: np.ascontiguousarray(v) for k, v in models["new_t"].items()}
    manifest = W.manifest(tensors, label="per-tensor")
    reply = {}

    def call():
        reply["r"] = admin.update_weights_from_distributed("default", manifest, -1)

    t = threading.Thread(target=call)
    t.start()
    for spec in manifest.tensors:
        a = tensors[spec.name]
        transport.nccl.broadcast(transport.comm, int(a.ctypes.data), a.size, FLOAT32)
    t.join(timeout=120)
    assert reply["r"].version == 1 and reply["r"].label == "per-tensor"
    assert_serves(c, models["new"])
    sync.close()


def test_group_errors_name_the_field(make_cluster, models):
    c, admin = start(make_cluster, models)
    with pytest.raises(astr.AstrError) as e:
        admin.init_weight_update_group(b"short", 0, "g")
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and "nccl_unique_id" in e.value.message
    with pytest.raises(astr.AstrError) as e:
        admin.init_weight_update_group(b"", 5, "g", validate_only=True)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and "world_size" in e.value.message
    with pytest.raises(astr.AstrError) as e:
        admin.update_weights_from_distributed("nope", W.manifest(models["new_t"]))
    assert e.value.code == grpc.StatusCode.NOT_FOUND and "nope" in e.value.message
    plan = admin.init_weight_update_group(b"", 0, "g", validate_only=True)
    assert plan.world_size == 3 and not plan.nccl
    # A unique id that no trainer listens behind: the workers give up after the group timeout.
    start_t = time.monotonic()
    with pytest.raises(astr.AstrError) as e:
        admin.init_weight_update_group(Nccl(NCCL).unique_id(), 0, "g", group_timeout_ms=2000)
    assert e.value.code == grpc.StatusCode.UNAVAILABLE, e.value
    assert time.monotonic() - start_t < 100
    assert_serves(c, models["old"])


def test_a_worker_lost_before_a_push_changes_nothing(make_cluster, models):
    c, admin = start(make_cluster, models)
    sync = sync_for(admin)
    sync.init_group()
    c.workers[1].proc.kill()
    # Either the scheduler already dropped the worker (the group's ranks no longer match the
    # pool) or the trainer's broadcast to it fails, and the SDK aborts the group at once: the
    # worker left waits for no bucket.
    start_t = time.monotonic()
    with pytest.raises((astr.AstrError, astr.nccl.NcclError)) as e:
        sync.push(models["new_t"])
    assert time.monotonic() - start_t < 30, e.value
    assert admin.get_weight_version().version == 0
    assert greedy(c, PROMPTS[0]) == offline(models["old"], PROMPTS[0])
    # The next push makes a new group with the worker that is left, once the scheduler dropped
    # the dead one.
    deadline = time.monotonic() + 60
    while True:
        try:
            r = sync.push(models["new_t"])
            break
        except (astr.AstrError, astr.nccl.NcclError) as err:
            assert time.monotonic() < deadline, err
            time.sleep(0.5)
    assert (r.version, r.workers) == (1, 1)
    assert_serves(c, models["new"])
    sync.close()


def test_sglang_routes_with_a_unique_id(make_cluster, models):
    """SGLang's /init_weights_update_group, /update_weights_from_distributed (its body: names,
    dtypes, shapes; one broadcast per tensor, as its trainers send) and
    /destroy_weights_update_group, the group joined by astr's nccl_unique_id."""
    c, admin = start(make_cluster, models)
    url = "http://" + c.scheduler.proc.wait_log(re.compile(r"admin http on (\S+):(\d+)"))
    bearer = {"Authorization": f"Bearer {W.TOKEN}"}
    # SGLang's own body names a torch.distributed rendezvous astr does not speak.
    r = requests.post(f"{url}/init_weights_update_group", headers=bearer, timeout=30, json={
        "master_address": "127.0.0.1", "master_port": 29500, "rank_offset": 1, "world_size": 3,
        "group_name": "weight_update_group", "backend": "nccl"})
    assert r.status_code == 400 and "nccl_unique_id" in r.json()["message"], r.text
    nccl = Nccl(NCCL)
    uid = nccl.unique_id()
    got = {}
    init = threading.Thread(target=lambda: got.update(init=requests.post(
        f"{url}/init_weights_update_group", headers=bearer, timeout=120,
        json={"nccl_unique_id": base64.b64encode(uid).decode(), "world_size": 3,
              "group_name": "weight_update_group"})))
    init.start()
    comm = nccl.init_rank(3, uid, 0)
    init.join(timeout=120)
    assert got["init"].status_code == 200 and got["init"].json()["success"], got["init"].text
    tensors = {k: np.ascontiguousarray(v) for k, v in models["new_t"].items()}
    names = list(tensors)
    update = threading.Thread(target=lambda: got.update(update=requests.post(
        f"{url}/update_weights_from_distributed", headers=bearer, timeout=120,
        json={"names": names, "dtypes": ["float32"] * len(names),
              "shapes": [list(tensors[n].shape) for n in names],
              "group_name": "weight_update_group", "weight_version": "sglang-1"})))
    update.start()
    for n in names:
        nccl.broadcast(comm, int(tensors[n].ctypes.data), tensors[n].size, FLOAT32)
    update.join(timeout=120)
    assert got["update"].status_code == 200 and got["update"].json()["success"], \
        got["update"].text
    assert admin.get_weight_version().label == "sglang-1"
    assert_serves(c, models["new"])
    r = requests.post(f"{url}/destroy_weights_update_group", headers=bearer, timeout=30,
                      json={"group_name": "weight_update_group"})
    assert r.status_code == 200, r.text
    nccl.destroy(comm)
    assert requests.post(f"{url}/init_weights_update_group", timeout=30, json={}).status_code == 401
