"""CUDA IPC weight updates end to end on the emulated device (docs/rl.md "CUDA IPC"; ctest label
gpu-emu): this test process is the trainer, sharing device buffers through
lib/libastr_cuda_ipc_emu.so (the Python SDK's WeightSync(transport="ipc") over ctypes, as on
libcudart), and two astr-worker processes on the emulated CUDA backend open them by their IPC
handles. After an update the served greedy tokens equal the offline engine's (`astr run`, same
backend) on the new weights; a bad checksum, handle, size or a freed buffer changes nothing, and
CPU workers say why they cannot take it."""

import os

import grpc
import numpy as np
import pytest

import astr
import harness
import weights as W
from astr.cuda_ipc import CudaRuntime
from harness import apb, request

pytestmark = pytest.mark.skipif(bool(harness.missing_binaries()), reason="binaries not built")

LIB = os.path.join(os.path.dirname(harness.WORKER_BIN), "..", "lib")
PLUGIN = os.path.join(LIB, "libastr_backend_cuda_emu.so")
CUDART = os.path.join(LIB, "libastr_cuda_ipc_emu.so")
PROMPTS = [[1, 403, 407, 261, 378], [1, 298, 315, 421]]
MAX_TOKENS = 16


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    for path in (PLUGIN, CUDART):
        if not os.path.exists(path):
            pytest.fail(f"{path} was not built")
    root = tmp_path_factory.mktemp("ipc")
    return W.old_and_new(root, seed=11, scale=0.05)


@pytest.fixture(autouse=True)
def emu_env(monkeypatch):
    monkeypatch.setenv("ASTR_CUDA_PLUGIN", PLUGIN)
    monkeypatch.setenv("ASTR_CUDART_LIBRARY", CUDART)


@pytest.fixture(scope="module")
def offline(models):
    cache = {}

    def ids(which, prompt):
        key = (which, tuple(prompt))
        if key not in cache:  # called from tests, with emu_env's ASTR_CUDA_PLUGIN
            cache[key] = harness.offline_run(models[which], prompt_ids=prompt,
                                             max_tokens=MAX_TOKENS,
                                             extra=("--backend", "cuda"))["token_ids"]
        return cache[key]
    return ids


def start(make_cluster, models, backend="cuda", workers=2):
    flags = {"backend": backend, "num_pages": 128, "page_size": 16, "max_batch": 8}
    if backend == "cpu":
        flags = {"dtype": "f32"}
    c = make_cluster(model=models["old"], num_workers=workers, worker_flags=flags,
                     scheduler_flags={"admin_token_file": models["token"],
                                      "tokenizer": harness.STORIES})
    return c, astr.AdminClient(c.scheduler.admin_address, token=W.TOKEN, timeout=120)


def greedy(c, prompt):
    return list(c.stub.Generate(request(token_ids=prompt, max_tokens=MAX_TOKENS),
                                timeout=harness.RPC_TIMEOUT_S).completions[0].token_ids)


def serves(c, offline, which):
    return all(greedy(c, p) == offline(which, p) for p in PROMPTS)


def test_ipc_push_serves_the_new_weights(make_cluster, models, offline):
    c, admin = start(make_cluster, models)
    assert serves(c, offline, "old")
    # Small buffers: tensors straddle them, as a large model's do the default 512 MiB ones.
    sync = astr.WeightSync(admin, transport="ipc", bucket_bytes=1 << 16)
    reply = sync.push(models["new_t"], label="ipc-1")
    assert (reply.version, reply.label, reply.workers, reply.tensors) == \
        (1, "ipc-1", 2, len(models["new_t"]))
    assert reply.bytes == sum(a.nbytes for a in models["new_t"].values())
    assert offline("new", PROMPTS[0]) != offline("old", PROMPTS[0])  # the update matters
    assert serves(c, offline, "new")
    sums = admin.get_weights_checksum()
    want = {s.name: s.xxh64 for s in W.manifest(models["new_t"]).tensors}
    checked = [t for t in sums.tensors if t.name in want]
    assert len(checked) == len(want)
    assert all(t.consistent and t.xxh64 == want[t.name] for t in checked)
    # One buffer for the whole update (the default size), back to the old weights.
    assert astr.WeightSync(admin, transport="ipc").push(models["old_t"]).version == 2
    assert serves(c, offline, "old")
    admin.close()


def _request(tensors, buffers, spec=None):
    req = apb.UpdateWeightsFromTensorRequest(manifest=spec or W.manifest(tensors))
    for handle, size in buffers:
        req.buffers.add(handle=handle, bytes=size)
    return req


@pytest.mark.parametrize("case", ["checksum", "garbage_handle", "short_handle", "size",
                                  "freed_buffer"])
def test_bad_ipc_updates_leave_the_old_weights(make_cluster, models, offline, case):
    c, admin = start(make_cluster, models)
    t = models["new_t"]
    total = sum(a.nbytes for a in t.values())
    cuda = CudaRuntime(CUDART)
    ptr = cuda.malloc(total)
    try:
        pos = 0
        for a in t.values():
            b = np.ascontiguousarray(a)
            cuda.memcpy(ptr + pos, int(b.ctypes.data), b.nbytes, 1)
            pos += b.nbytes
        handle = cuda.ipc_handle(ptr)
        if case == "checksum":
            spec = W.manifest(t)
            spec.tensors[3].xxh64 ^= 1
            req = _request(t, [(handle, total)], spec)
            want = (grpc.StatusCode.DATA_LOSS, spec.tensors[3].name)
        elif case == "garbage_handle":
            req = _request(t, [(b"\x01" * 64, total)])
            want = (grpc.StatusCode.INVALID_ARGUMENT, "buffers[0].handle: cudaIpcOpenMemHandle")
        elif case == "short_handle":
            req = _request(t, [(handle[:3], total)])
            want = (grpc.StatusCode.INVALID_ARGUMENT, "buffers[0].handle: 3 bytes")
        elif case == "size":
            req = _request(t, [(handle, total - 4)])
            want = (grpc.StatusCode.INVALID_ARGUMENT, "bytes in all")
        else:
            req = _request(t, [(handle, total)])
            cuda.free(ptr)
            ptr = 0
            want = (grpc.StatusCode.INVALID_ARGUMENT, "buffers[0].handle")
        with pytest.raises(astr.AstrError) as e:
            admin.update_weights_from_tensor(req)
        assert e.value.code == want[0], e.value.message
        assert want[1] in e.value.message and "version 0 still serving" in e.value.message, \
            e.value.message
    finally:
        if ptr:
            cuda.free(ptr)
    assert admin.get_weight_version().version == 0
    assert serves(c, offline, "old")
    # The next update goes through.
    assert astr.WeightSync(admin, transport="ipc").push(t).version == 1
    assert serves(c, offline, "new")
    admin.close()


def test_cpu_workers_refuse_ipc(make_cluster, models):
    c, admin = start(make_cluster, models, backend="cpu", workers=1)
    with pytest.raises(astr.AstrError) as e:
        astr.WeightSync(admin, transport="ipc").push(models["new_t"])
    assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert "CUDA IPC" in e.value.message and "cuda" in e.value.message
    assert admin.get_weight_version().version == 0
    with pytest.raises(astr.cuda_ipc.CudaError, match="cannot load libcudart"):
        astr.WeightSync(admin, transport="ipc", cuda_library="/nonexistent/libcudart.so")
    admin.close()
