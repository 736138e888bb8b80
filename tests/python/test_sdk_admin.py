"""astr.AdminClient / AsyncAdminClient against a real gRPC server with a recording fake Admin:
the bearer token on every call, each method's request, errors with their code and message."""

import asyncio

import grpc
import numpy as np
import pytest

from sdk_testing import FakeAdmin, apb, astr, serve

TOKEN = "tok-3f9a"


@pytest.fixture
def admin_server():
    fake = FakeAdmin(TOKEN)
    with serve(admin=fake) as address:
        yield fake, address


def every_call(admin):
    """Calls every unary Admin method once; returns the replies by RPC name (coroutines, to be
    awaited in order, for an AsyncAdminClient)."""
    manifest = apb.WeightManifest(tensors=[apb.TensorSpec(name="w", dtype="bf16", shape=[2, 3])],
                                  label="nccl")
    return {
        "UpdateWeightsFromDisk": admin.update_weights_from_disk("/ckpt/step-9", label="step-9"),
        "GetWeightVersion": admin.get_weight_version(),
        "GetWeightsChecksum": admin.get_weights_checksum(["a.weight", "b.weight"]),
        "Pause": admin.pause("drain"),
        "Resume": admin.resume(),
        "FlushCache": admin.flush_cache(),
        "DrainWorker": admin.drain_worker("10.0.0.7:50052", drain_timeout_s=30),
        "InitWeightUpdateGroup": admin.init_weight_update_group(b"\x01" * 128, 3, "g"),
        "UpdateWeightsFromDistributed": admin.update_weights_from_distributed(
            "g", manifest, bucket_bytes=1 << 20),
        "DestroyWeightUpdateGroup": admin.destroy_weight_update_group("g"),
        "ReleaseMemory": admin.release_memory(["kv_cache"]),
        "ResumeMemory": admin.resume_memory(),
    }


def check_requests(fake):
    """What the server received for every_call, against the values every_call passed."""
    (disk,) = fake.record.only("UpdateWeightsFromDisk")
    assert (disk.path, disk.label) == ("/ckpt/step-9", "step-9")
    (checksum,) = fake.record.only("GetWeightsChecksum")
    assert list(checksum.names) == ["a.weight", "b.weight"]
    (pause,) = fake.record.only("Pause")
    assert pause.mode == apb.PAUSE_MODE_DRAIN
    (group,) = fake.record.only("InitWeightUpdateGroup")
    assert (group.nccl_unique_id, group.world_size, group.group_name) == (b"\x01" * 128, 3, "g")
    (dist,) = fake.record.only("UpdateWeightsFromDistributed")
    assert (dist.group_name, dist.bucket_bytes, dist.manifest.label) == ("g", 1 << 20, "nccl")
    assert [(t.name, t.dtype, list(t.shape)) for t in dist.manifest.tensors] == [
        ("w", "bf16", [2, 3])]
    (destroy,) = fake.record.only("DestroyWeightUpdateGroup")
    assert destroy.group_name == "g"
    (drain,) = fake.record.only("DrainWorker")
    assert (drain.address, drain.timeout_s) == ("10.0.0.7:50052", 30)
    (release,) = fake.record.only("ReleaseMemory")
    assert list(release.tags) == ["kv_cache"]
    (resume_memory,) = fake.record.only("ResumeMemory")
    assert list(resume_memory.tags) == []
    for method, metadata, _ in fake.record.calls:
        assert metadata["authorization"] == [f"Bearer {TOKEN}"], method


def test_every_method_sends_its_request_and_the_token(admin_server):
    fake, address = admin_server
    with astr.AdminClient(address, token=TOKEN, timeout=30) as admin:
        replies = every_call(admin)
    check_requests(fake)
    assert len(fake.record.calls) == len(replies) == 12
    version = replies["GetWeightVersion"]
    assert (version.version, version.label, version.paused) == (5, "step-5", apb.PAUSE_MODE_KEEP)
    assert [(t.name, t.xxh64) for t in replies["GetWeightsChecksum"].tensors] == [
        ("a.weight", 1), ("b.weight", 2)]
    assert [(r.address, r.rank) for r in replies["InitWeightUpdateGroup"].ranks] == [
        ("w0", 1), ("w1", 2)]
    assert replies["FlushCache"].pages_freed == 9
    assert (replies["DrainWorker"].address, replies["DrainWorker"].finished,
            replies["DrainWorker"].moved) == ("10.0.0.7:50052", 3, 1)


def test_token_file(admin_server, tmp_path):
    fake, address = admin_server
    path = tmp_path / "admin-token"
    path.write_text(TOKEN + "\n")  # as `echo TOKEN > file` writes it
    with astr.AdminClient(address, token_file=str(path)) as admin:
        assert admin.get_weight_version().version == 5
    (metadata,) = fake.record.metadata("GetWeightVersion")
    assert metadata["authorization"] == [f"Bearer {TOKEN}"]


def test_token_arguments_are_checked(tmp_path):
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="not both"):
        astr.AdminClient("127.0.0.1:1", token="a", token_file=str(empty))
    with pytest.raises(ValueError, match="empty"):
        astr.AdminClient("127.0.0.1:1", token_file=str(empty))
    with pytest.raises(ValueError, match="whitespace"):
        astr.AdminClient("127.0.0.1:1", token="two words")


def test_missing_and_wrong_token(admin_server):
    fake, address = admin_server
    with astr.AdminClient(address) as admin:
        with pytest.raises(astr.AstrError) as info:
            admin.resume()
    assert info.value.code == grpc.StatusCode.UNAUTHENTICATED
    assert info.value.message == "missing authorization metadata"
    assert "authorization" not in fake.record.metadata("Resume")[0]
    with astr.AdminClient(address, token="wrong") as admin:
        with pytest.raises(astr.AstrError) as info:
            admin.pause("keep")
    assert info.value.code == grpc.StatusCode.PERMISSION_DENIED
    assert fake.record.metadata("Pause")[0]["authorization"] == ["Bearer wrong"]


def test_server_error_keeps_code_message_and_cause(admin_server):
    fake, address = admin_server
    message = "path: /nope is neither a .gguf file nor a Hugging Face folder"
    fake.errors["UpdateWeightsFromDisk"] = (grpc.StatusCode.INVALID_ARGUMENT, message)
    with astr.AdminClient(address, token=TOKEN) as admin:
        with pytest.raises(astr.AstrError) as info:
            admin.update_weights_from_disk("/nope")
    error = info.value
    assert (error.code, error.message) == (grpc.StatusCode.INVALID_ARGUMENT, message)
    assert error.method == "/astr.v1.Admin/UpdateWeightsFromDisk"
    assert isinstance(error.__cause__, grpc.RpcError)
    assert "INVALID_ARGUMENT" in str(error) and message in str(error)


def test_pause_modes_and_bad_mode(admin_server):
    fake, address = admin_server
    with astr.AdminClient(address, token=TOKEN) as admin:
        for mode in ("abort", "DRAIN", "keep", apb.PAUSE_MODE_KEEP):
            admin.pause(mode)
        for bad in ("wait", 0, 7):
            with pytest.raises(ValueError, match="mode="):
                admin.pause(bad)
    assert [r.mode for r in fake.record.only("Pause")] == [
        apb.PAUSE_MODE_ABORT, apb.PAUSE_MODE_DRAIN, apb.PAUSE_MODE_KEEP, apb.PAUSE_MODE_KEEP]


def test_update_weights_takes_any_request_iterable(admin_server):
    fake, address = admin_server
    stream = [
        apb.UpdateWeightsRequest(manifest=apb.WeightManifest(
            tensors=[apb.TensorSpec(name="w", dtype="f32", shape=[2])], label="hand")),
        apb.UpdateWeightsRequest(chunks=[apb.WeightChunk(tensor=0, offset=0, data=b"\0" * 8)]),
    ]
    with astr.AdminClient(address, token=TOKEN) as admin:
        reply = admin.update_weights(stream)
    assert (reply.version, reply.label, reply.bytes) == (7, "hand", 8)
    assert fake.record.only("UpdateWeights") == [stream]


def test_async_admin_client(admin_server, tmp_path):
    fake, address = admin_server
    path = tmp_path / "token"
    path.write_text(TOKEN)

    async def main():
        async with astr.AsyncAdminClient(address, token_file=str(path), timeout=30) as admin:
            replies = {}
            for name, call in every_call(admin).items():
                replies[name] = await call
            sync = astr.WeightSync(admin, bucket_bytes=64, chunk_bytes=16)
            replies["UpdateWeights"] = await sync.push_async(
                {"w": np.arange(20, dtype=np.float32)}, label="a")
            return replies

    replies = asyncio.run(main())
    check_requests(fake)
    assert replies["UpdateWeights"].bytes == 80
    assert replies["GetWeightVersion"].label == "step-5"

    async def anonymous():
        async with astr.AsyncAdminClient(address) as admin:
            with pytest.raises(astr.AstrError) as info:
                await admin.flush_cache()
            return info.value

    error = asyncio.run(anonymous())
    assert error.code == grpc.StatusCode.UNAUTHENTICATED
    assert error.message == "missing authorization metadata"
