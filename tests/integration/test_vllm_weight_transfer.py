"""vLLM's weight-transfer routes end to end on the emulated device (docs/rl.md "vLLM's
weight-transfer routes"; ctest label nccl-emu): this test process plays a trainer written against
vLLM (its examples/rl/rlhf_http_nccl.py and HTTPVLLMWeightSyncClient): it hosts the TCPStore of
vLLM's StatelessProcessGroup (torch_store.py, or torch's own with ASTR_TEST_TORCH_STORE=1),
publishes its unique id there as vLLM pickles it, makes its NCCL communicator with the warmup
all-reduce PyNcclCommunicator makes, and broadcasts the tensors as vLLM's NCCL engine does (packed
or one per tensor), over the emulated NCCL; the bodies are the ones vLLM's clients send (with the
admin token). After an update the served greedy tokens equal the offline engine's on the new
weights."""

import os
import re
import threading

import numpy as np
import pytest
import requests

import astr
import harness
import torch_store
import weights as W
from astr.nccl import FLOAT32, UINT8, Nccl
from harness import request

pytestmark = pytest.mark.skipif(bool(harness.missing_binaries()), reason="binaries not built")

LIB = os.path.join(os.path.dirname(harness.WORKER_BIN), "..", "lib")
PLUGIN = os.path.join(LIB, "libastr_backend_cuda_emu.so")
NCCL = os.path.join(LIB, "libastr_nccl_emu.so")
PROMPTS = [[1, 403, 407, 261, 378], [1, 298, 315, 421]]
MAX_TOKENS = 16
TIMEOUT = 120


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    for path in (PLUGIN, NCCL):
        if not os.path.exists(path):
            pytest.fail(f"{path} was not built")
    root = tmp_path_factory.mktemp("vllm")
    return W.old_and_new(root, seed=11, scale=0.05)


@pytest.fixture(autouse=True)
def emu_env(monkeypatch):
    monkeypatch.setenv("ASTR_CUDA_PLUGIN", PLUGIN)
    monkeypatch.setenv("ASTR_NCCL_EMU_TIMEOUT_S", "60")
    monkeypatch.delenv("ASTR_NCCL_LIBRARY", raising=False)


class Cluster:
    def __init__(self, make_cluster, models):
        self.c = make_cluster(model=models["old"], num_workers=2,
                              worker_flags={"backend": "cuda", "num_pages": 128,
                                            "page_size": 16, "max_batch": 8},
                              scheduler_flags={"admin_token_file": models["token"],
                                               "admin_http_listen": "127.0.0.1:0",
                                               "tokenizer": harness.STORIES})
        self.url = "http://" + self.c.scheduler.proc.wait_log(
            re.compile(r"admin http on (\S+):(\d+)"))
        self.admin = astr.AdminClient(self.c.scheduler.admin_address, token=W.TOKEN,
                                      timeout=TIMEOUT)

    # What vLLM's clients send, with astr's admin token.
    def post(self, path, json=None, **kw):
        return requests.post(f"{self.url}/{path}", json=json, timeout=TIMEOUT,
                             headers={"Authorization": f"Bearer {W.TOKEN}"}, **kw)

    def get(self, path):
        return requests.get(f"{self.url}/{path}", timeout=TIMEOUT,
                            headers={"Authorization": f"Bearer {W.TOKEN}"})

    def greedy(self, prompt):
        return list(self.c.stub.Generate(request(token_ids=prompt, max_tokens=MAX_TOKENS),
                                         timeout=harness.RPC_TIMEOUT_S).completions[0].token_ids)

    def serves(self, model):
        for p in PROMPTS:
            want = harness.offline_run(model, prompt_ids=p, max_tokens=MAX_TOKENS,
                                       extra=("--backend", "cuda"))["token_ids"]
            if self.greedy(p) != want:
                return False
        return True


class VllmTrainer:
    """NCCLWeightTransferEngine.trainer_init and trainer_send_weights, over the emulated NCCL."""

    def __init__(self, world_size):
        self.world_size = world_size
        self.store = torch_store.TrainerStore(world_size)
        self.nccl = Nccl(NCCL)
        self.comm = None

    def init_info(self):
        return {"master_address": "127.0.0.1", "master_port": self.store.port,
                "rank_offset": 1, "world_size": self.world_size}

    def trainer_init(self):
        # StatelessProcessGroup.create(rank 0), then PyNcclCommunicator: the unique id through
        # the store, ncclCommInitRank, one all-reduce of a float32 zero.
        self.store.join()
        uid = self.nccl.unique_id()
        self.store.broadcast_unique_id(uid)
        self.comm = self.nccl.init_rank(self.world_size, uid, 0)
        warm = np.zeros(1, np.float32)
        self.nccl.all_reduce(self.comm, int(warm.ctypes.data), 1, FLOAT32)
        assert warm[0] == 0.0

    def send_weights(self, tensors, packed, buffer_size=None):
        buffer_size = buffer_size or 1 << 30  # vLLM's DEFAULT_PACKED_BUFFER_SIZE_BYTES
        if not packed:
            for t in tensors.values():
                self.nccl.broadcast(self.comm, int(t.ctypes.data), t.size, FLOAT32)
            return
        # packed_nccl_broadcast_producer: tensors as bytes, concatenated until the total passes
        # the buffer size, each such pack one uint8 broadcast.
        pack, total = [], 0
        for t in tensors.values():
            pack.append(t.reshape(-1).view(np.uint8))
            total += t.nbytes
            if total > buffer_size:
                self._broadcast(np.concatenate(pack))
                pack, total = [], 0
        if pack:
            self._broadcast(np.concatenate(pack))

    def _broadcast(self, flat):
        self.nccl.broadcast(self.comm, int(flat.ctypes.data), flat.size, UINT8)

    def close(self):
        if self.comm is not None:
            self.nccl.destroy(self.comm)
        self.store.close()


def update_info(tensors, packed, buffer_size=None):
    info = {"names": list(tensors), "dtype_names": ["float32"] * len(tensors),
            "shapes": [list(t.shape) for t in tensors.values()], "packed": packed}
    if buffer_size is not None:
        info["packed_buffer_size_bytes"] = buffer_size
    return info


def run_update(cluster, trainer, tensors, packed, buffer_size=None):
    """/update_weights on a thread while the trainer broadcasts, as vLLM's example does."""
    got = {}
    body = {"update_info": update_info(tensors, packed, buffer_size)}
    thread = threading.Thread(target=lambda: got.update(r=cluster.post("update_weights", body)))
    thread.start()
    trainer.send_weights(tensors, packed, buffer_size)
    thread.join(timeout=TIMEOUT)
    return got["r"]


def init_weight_transfer(cluster, trainer):
    """/init_weight_transfer_engine on a thread while the trainer makes its side, as vLLM's
    example does; the route's answer."""
    got = {}
    init = threading.Thread(target=lambda: got.update(r=cluster.post(
        "init_weight_transfer_engine", {"init_info": trainer.init_info()})))
    init.start()
    trainer.trainer_init()
    init.join(timeout=TIMEOUT)
    return got["r"]


def f32(tensors):
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in tensors.items()}


def test_vllm_rlhf_http_nccl_flow(make_cluster, models):
    cluster = Cluster(make_cluster, models)
    r = cluster.get("get_world_size")
    assert r.status_code == 200 and r.json() == {"world_size": 2}, r.text
    trainer = VllmTrainer(world_size=r.json()["world_size"] + 1)
    try:
        init = init_weight_transfer(cluster, trainer)
        assert init.status_code == 200, init.text
        assert init.json() == {"message": "Weight transfer initialized"}
        for w in cluster.c.workers:
            log = w.proc.log_text()
            assert "joined NCCL group 'vllm-weight-transfer' as rank" in log, log[-2000:]

        # rlhf_http_nccl.py: pause, start, update (packed) with the broadcast, finish, resume.
        assert cluster.post("pause").json() == {"status": "paused"}
        r = cluster.post("start_weight_update", {"is_checkpoint_format": True})
        assert r.status_code == 200 and r.json() == {"message": "Weight update started"}, r.text
        new = f32(models["new_t"])
        r = run_update(cluster, trainer, new, packed=True, buffer_size=200_000)
        assert r.status_code == 200 and r.json()["message"] == "Weights updated", r.text
        # Staged, not served: the version moves at /finish_weight_update.
        assert cluster.admin.get_weight_version().version == 0
        r = cluster.post("finish_weight_update", {"weight_version": "step-1"})
        assert r.status_code == 200 and r.json()["version"] == 1, r.text
        assert cluster.post("resume").json() == {"status": "resumed"}
        v = cluster.admin.get_weight_version()
        assert (v.version, v.label) == (1, "step-1")
        assert cluster.serves(models["new"])

        # The old weights back, one broadcast per tensor, without a pause: nothing changes until
        # /finish_weight_update (HTTPVLLMWeightSyncClient sends it without a body).
        assert cluster.post("start_weight_update").status_code == 200
        r = run_update(cluster, trainer, f32(models["old_t"]), packed=False)
        assert r.status_code == 200, r.text
        assert cluster.serves(models["new"])
        r = cluster.post("finish_weight_update")
        assert r.status_code == 200 and r.json()["version"] == 2, r.text
        assert cluster.serves(models["old"])

        # vLLM's two-phase use (no start / finish): the update commits when it is received.
        r = run_update(cluster, trainer, new, packed=True)  # the default 1 GiB: one broadcast
        assert r.status_code == 200 and r.json()["version"] == 3, r.text
        assert cluster.serves(models["new"])
    finally:
        trainer.close()


def test_vllm_routes_refuse_what_they_cannot_serve(make_cluster, models):
    cluster = Cluster(make_cluster, models)
    new = f32(models["new_t"])
    # Before any group.
    r = cluster.post("update_weights", {"update_info": update_info(new, packed=False)})
    assert r.status_code == 400 and "vllm-weight-transfer" in r.json()["error"], r.text
    r = cluster.post("init_weight_transfer_engine", {})
    assert r.status_code == 400 and "init_info" in r.json()["error"], r.text
    r = cluster.post("init_weight_transfer_engine", {"init_info": {
        "master_address": "127.0.0.1", "master_port": 1, "rank_offset": 1, "world_size": 5}})
    assert r.status_code == 400 and "world_size 3" in r.json()["error"], r.text
    r = cluster.post("init_weight_transfer_engine", {"init_info": {
        "master_address": "127.0.0.1", "master_port": "x", "rank_offset": 1, "world_size": 3}})
    assert r.status_code == 400 and "init_info.master_port" in r.json()["error"], r.text
    r = cluster.post("start_weight_update", {"is_checkpoint_format": False})
    assert r.status_code == 400 and "is_checkpoint_format" in r.json()["error"], r.text
    # Without the admin token.
    assert requests.get(f"{cluster.url}/get_world_size", timeout=30).status_code == 401

    trainer = VllmTrainer(world_size=3)
    try:
        init = init_weight_transfer(cluster, trainer)
        assert init.status_code == 200, init.text
        body = {"update_info": dict(update_info(new, packed=False), ipc_handles_pickled="x")}
        r = cluster.post("update_weights", body)
        assert r.status_code == 400 and "IPC" in r.json()["error"], r.text
        bad = dict(update_info(new, packed=False))
        bad["dtype_names"] = ["int64"] * len(new)
        r = cluster.post("update_weights", {"update_info": bad})
        assert r.status_code == 400 and "dtype_names[0]" in r.json()["error"], r.text
        # A name the model does not have: the workers take every broadcast, then refuse.
        wrong = dict(new)
        wrong["model.layers.0.mlp.not_a_weight"] = wrong.pop("model.layers.0.mlp.up_proj.weight")
        assert cluster.post("start_weight_update").status_code == 200
        r = run_update(cluster, trainer, wrong, packed=True, buffer_size=300_000)
        assert r.status_code == 400 and "not_a_weight" in r.json()["error"], r.text
        assert "version 0 still serving" in r.json()["error"], r.text
        r = cluster.post("finish_weight_update")
        assert r.status_code == 200 and "version" not in r.json(), r.text
        assert cluster.admin.get_weight_version().version == 0
        # The group is still good.
        assert cluster.post("start_weight_update").status_code == 200
        assert run_update(cluster, trainer, new, packed=True, buffer_size=300_000).status_code \
            == 200
        r = cluster.post("finish_weight_update", {"weight_version": "ok"})
        assert r.status_code == 200 and r.json()["version"] == 1, r.text
        assert cluster.serves(models["new"])
    finally:
        trainer.close()
