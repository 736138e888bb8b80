"""astr.WeightSync against a real gRPC server with a recording fake Admin: the manifest, the
buckets and chunks, bf16 conversion, laziness, errors. Expected bytes and checksums are computed
here with numpy and xxhash from the arrays themselves; the bf16 reference rounds with float64
arithmetic on decoded values, not with the SDK's bit trick."""

import asyncio
import tracemalloc

import grpc
import numpy as np
import pytest
import xxhash

from sdk_testing import FakeAdmin, apb, astr, serve

import astr.weights as weights_module

TOKEN = "secret-token"
# Proto dtype strings (admin.proto TensorSpec.dtype) of numpy dtypes sent as they are.
WIRE = {np.dtype(np.float32): "f32", np.dtype(np.float16): "f16"}


@pytest.fixture
def admin_server():
    fake = FakeAdmin(TOKEN)
    with serve(admin=fake) as address:
        yield fake, address


def push(address, tensors, label="", **options):
    with astr.AdminClient(address, token=TOKEN, timeout=30) as admin:
        return astr.WeightSync(admin, **options).push(tensors, label=label)


def reassemble(requests, bucket_bytes, chunk_bytes):
    """Checks the stream's shape (manifest first and alone; chunks in order per tensor, none
    empty or over chunk_bytes; buckets full but the last) and returns each tensor's bytes."""
    assert requests[0].HasField("manifest") and not requests[0].chunks
    manifest = requests[0].manifest
    data = {i: bytearray() for i in range(len(manifest.tensors))}
    totals = []
    for request in requests[1:]:
        assert not request.HasField("manifest")
        assert request.chunks, "a bucket without chunks"
        for chunk in request.chunks:
            assert 0 < len(chunk.data) <= chunk_bytes
            assert chunk.offset == len(data[chunk.tensor]), "chunk out of order"
            data[chunk.tensor] += chunk.data
        totals.append(sum(len(c.data) for c in request.chunks))
    # Every bucket but the last is full (as the C++ client's PlanWeightBuckets packs them).
    assert all(total == bucket_bytes for total in totals[:-1])
    assert all(0 < total <= bucket_bytes for total in totals)
    return manifest, {i: bytes(b) for i, b in data.items()}


def le_bytes(array, dtype):
    """The row-major little-endian bytes of `array` as `dtype`, with numpy's own conversion."""
    return np.ascontiguousarray(array).astype(np.dtype(dtype).newbyteorder("<")).tobytes()


def test_manifest_and_bytes_of_native_dtypes(admin_server):
    fake, address = admin_server
    rng = np.random.default_rng(0)
    base = rng.standard_normal((48, 40)).astype(np.float32)
    tensors = [
        ("model.embed_tokens.weight", rng.standard_normal((64, 33)).astype(np.float32)),
        ("model.layers.0.mlp.up_proj.weight", rng.standard_normal((5, 7, 11)).astype(np.float16)),
        ("model.layers.0.self_attn.q_proj.weight", base.T),  # not contiguous
        ("model.norm.weight", rng.standard_normal(17).astype(">f4")),  # big-endian
        ("model.scalar", np.array(1.5, dtype=np.float32)),
        ("model.empty", np.zeros((0, 4), dtype=np.float16)),
    ]
    reply = push(address, tensors, label="step-1", bucket_bytes=1000, chunk_bytes=256)

    (requests,) = fake.record.only("UpdateWeights")
    manifest, data = reassemble(requests, 1000, 256)
    assert manifest.label == "step-1"
    assert [s.name for s in manifest.tensors] == [name for name, _ in tensors]
    for i, (name, array) in enumerate(tensors):
        spec = manifest.tensors[i]
        native = np.dtype(array.dtype.newbyteorder("="))
        expected = le_bytes(array, native)
        assert spec.dtype == WIRE[native], name
        assert list(spec.shape) == list(array.shape), name
        assert spec.HasField("xxh64")
        assert spec.xxh64 == xxhash.xxh64_intdigest(expected, seed=0), name
        assert data[i] == expected, name
    assert reply.version == 7 and reply.tensors == len(tensors)
    assert reply.bytes == sum(a.size * a.dtype.itemsize for _, a in tensors)


def test_tensor_larger_than_a_bucket_spans_messages(admin_server):
    fake, address = admin_server
    big = np.arange(10_000, dtype=np.float32)  # 40000 bytes, buckets of 4099 (odd)
    small = np.arange(3, dtype=np.float16)
    push(address, {"a.weight": small, "b.weight": big, "c.weight": small},
         bucket_bytes=4099, chunk_bytes=1000)
    (requests,) = fake.record.only("UpdateWeights")
    manifest, data = reassemble(requests, 4099, 1000)
    assert data == {0: small.tobytes(), 1: big.tobytes(), 2: small.tobytes()}
    spans = [{c.tensor for c in r.chunks} for r in requests[1:]]
    assert sum(1 in s for s in spans) >= 40000 // 4099  # b's chunks are spread over messages


def bf16_value(bits):
    """The float64 value of bf16 bits, decoded field by field; exponent 255 with mantissa 0 is
    taken as 2**128 (the value one step past the largest finite bf16), so that rounding up to it
    means overflow to infinity."""
    sign = -1.0 if bits & 0x8000 else 1.0
    exponent = (bits >> 7) & 0xFF
    mantissa = bits & 0x7F
    if exponent == 0:
        return sign * (mantissa / 128.0) * 2.0 ** -126
    return sign * (1.0 + mantissa / 128.0) * 2.0 ** (exponent - 127)


def reference_bf16(f32_bits):
    """bf16 bits of one finite float32 (given as its bits), rounded to nearest, ties to even:
    choose the nearer of the two bf16 neighbours, comparing exact float64 distances."""
    x = float(np.array([f32_bits], dtype=np.uint32).view(np.float32)[0])
    low = f32_bits >> 16          # same sign, magnitude truncated
    high = low + 1                # next magnitude away from zero
    d_low, d_high = abs(x - bf16_value(low)), abs(x - bf16_value(high))
    if d_low != d_high:
        return low if d_low < d_high else high
    return low if low % 2 == 0 else high


def test_bf16_conversion_rounds_to_nearest_even(admin_server):
    fake, address = admin_server
    specials = [
        0x00000000, 0x80000000, 0x3F800000,   # 0, -0, 1
        0x3F808000, 0x3F818000,               # ties: low even stays, low odd rounds up
        0x3F808001, 0x3F807FFF,               # just above / below a tie
        0x7F7FFFFF, 0x7F7F7FFF, 0x7F7F8000,   # largest float: overflows; just below; tie up
        0xFF7FFFFF,                           # most negative float: -inf
        0x00000001, 0x00008000, 0x00018000,   # subnormals: to 0, tie to 0, tie up to 2
        0x7F800000, 0xFF800000,               # +-inf
    ]
    rng = np.random.default_rng(1)
    random_bits = rng.integers(0, 2**32, size=6000, dtype=np.uint64).astype(np.uint32)
    finite = random_bits[(random_bits & 0x7F800000) != 0x7F800000]
    normals = rng.standard_normal(2000).astype(np.float32).view(np.uint32)
    bits = np.concatenate([np.array(specials, dtype=np.uint32), finite, normals])
    nans = np.array([0x7FC00000, 0x7F800001, 0xFF800001, 0x7FFFFFFF], dtype=np.uint32)
    values = np.concatenate([bits, nans]).view(np.float32)
    as_f16 = rng.standard_normal(300).astype(np.float16)

    push(address, [("w", values), ("h", as_f16)], dtype="bf16", bucket_bytes=4096,
         chunk_bytes=512)
    (requests,) = fake.record.only("UpdateWeights")
    manifest, data = reassemble(requests, 4096, 512)
    assert [s.dtype for s in manifest.tensors] == ["bf16", "bf16"]
    sent = np.frombuffer(data[0], dtype="<u2")
    assert manifest.tensors[0].xxh64 == xxhash.xxh64_intdigest(data[0])

    expected = [reference_bf16(int(b)) for b in bits]
    assert sent[: len(bits)].tolist() == expected
    for nan_in, nan_out in zip(nans.tolist(), sent[len(bits):].tolist()):
        assert (nan_out >> 7) & 0xFF == 0xFF and nan_out & 0x7F, f"{nan_in:#x} -> {nan_out:#x}"
        assert nan_out >> 15 == nan_in >> 31
    # float16 converts exactly to float32, then rounds like float32.
    f16_bits = as_f16.astype(np.float32).view(np.uint32)
    assert np.frombuffer(data[1], dtype="<u2").tolist() == [reference_bf16(int(b))
                                                            for b in f16_bits]


def test_bf16_bits_as_uint16_and_other_conversions(admin_server):
    fake, address = admin_server
    rng = np.random.default_rng(2)
    raw = rng.integers(0, 0x7F80, size=(9, 13), dtype=np.uint16)  # finite positive bf16 bits
    f64 = rng.standard_normal(50)
    push(address, [("raw", raw), ("wide", f64)], dtype="bf16")
    push(address, [("as_f16", f64), ("raw_f32", rng.standard_normal(8).astype(np.float32))],
         dtype="f16")
    as_f16 = rng.standard_normal(8).astype(np.float16)
    push(address, [("as_f32", as_f16)], dtype="f32")
    first, second, third = fake.record.only("UpdateWeights")

    m, data = reassemble(first, astr.weights.DEFAULT_BUCKET_BYTES, astr.weights.DEFAULT_CHUNK_BYTES)
    assert [(s.dtype, list(s.shape)) for s in m.tensors] == [("bf16", [9, 13]), ("bf16", [50])]
    assert data[0] == raw.astype("<u2").tobytes()  # raw bits pass through unchanged
    f32_bits = f64.astype(np.float32).view(np.uint32)  # float64 is rounded to float32 first
    assert np.frombuffer(data[1], "<u2").tolist() == [reference_bf16(int(b)) for b in f32_bits]

    m, data = reassemble(second, astr.weights.DEFAULT_BUCKET_BYTES,
                         astr.weights.DEFAULT_CHUNK_BYTES)
    assert [s.dtype for s in m.tensors] == ["f16", "f16"]
    assert data[0] == le_bytes(f64, np.float16)
    assert m.tensors[0].xxh64 == xxhash.xxh64_intdigest(le_bytes(f64, np.float16))

    m, data = reassemble(third, astr.weights.DEFAULT_BUCKET_BYTES,
                         astr.weights.DEFAULT_CHUNK_BYTES)
    assert m.tensors[0].dtype == "f32" and data[0] == le_bytes(as_f16, np.float32)


def test_checksums_off_leaves_xxh64_unset(admin_server):
    fake, address = admin_server
    push(address, {"w": np.ones(4, dtype=np.float32)}, checksums=False)
    (requests,) = fake.record.only("UpdateWeights")
    assert not requests[0].manifest.tensors[0].HasField("xxh64")


def test_stream_is_lazy_and_bounded(monkeypatch):
    """The second pass converts a tensor only as its bucket is taken, and Python-side memory
    stays within a few buckets while 32 MiB of float32 become bf16."""
    converted = []
    real_convert = weights_module._convert

    def counting_convert(block, source, wire):
        out = real_convert(block, source, wire)
        converted.append(out.nbytes)
        return out

    monkeypatch.setattr(weights_module, "_convert", counting_convert)
    bucket, chunk = 1 << 20, 256 << 10
    rng = np.random.default_rng(3)
    tensors = [(f"layer.{i}", rng.standard_normal(1 << 20).astype(np.float32)) for i in range(8)]
    sent_bytes = 8 * (1 << 20) * 2

    sync = astr.WeightSync(None, bucket_bytes=bucket, chunk_bytes=chunk, dtype="bf16")
    tracemalloc.start()
    try:
        stream = sync.requests(tensors)
        first = next(stream)
        assert sum(converted) == sent_bytes  # the checksum pass read everything once
        assert len(first.manifest.tensors) == 8
        converted.clear()
        tracemalloc.reset_peak()
        taken = 0
        for request in stream:
            taken += sum(len(c.data) for c in request.chunks)
            # Converted so far: what was taken plus at most the piece being cut.
            assert sum(converted) <= taken + chunk
            del request
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert taken == sent_bytes
    assert peak < 4 * bucket, f"peak {peak} bytes while streaming buckets of {bucket}"


def test_bad_tensors_fail_before_any_rpc(admin_server):
    fake, address = admin_server
    with astr.AdminClient(address, token=TOKEN) as admin:
        sync = astr.WeightSync(admin)
        cases = [
            ({"ids": np.arange(3, dtype=np.int32)}, TypeError, "int32"),
            ({"bits": np.zeros(3, dtype=np.uint16)}, TypeError, "dtype='bf16'"),
            ({"wide": np.zeros(3)}, TypeError, "float64"),
            ([("w", np.zeros(2, np.float32)), ("w", np.zeros(2, np.float32))], ValueError,
             "twice"),
            ([("", np.zeros(2, np.float32))], TypeError, "name"),
        ]
        for tensors, error, words in cases:
            with pytest.raises(error, match=words):
                sync.push(tensors)
    assert fake.record.calls == []
    for options in ({"bucket_bytes": 2}, {"bucket_bytes": 2 << 30},
                    {"bucket_bytes": 100, "chunk_bytes": 200}, {"dtype": "int8"}):
        with pytest.raises(ValueError):
            astr.WeightSync(None, **options)


def test_server_errors_surface_with_code_and_message(admin_server):
    fake, address = admin_server
    fake.errors["UpdateWeights"] = (grpc.StatusCode.INVALID_ARGUMENT,
                                    "tensor model.norm.weight: shape [17] != served [64]")
    with pytest.raises(astr.AstrError) as info:
        push(address, {"model.norm.weight": np.zeros(17, np.float32)})
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.message == "tensor model.norm.weight: shape [17] != served [64]"
    assert info.value.method == "/astr.v1.Admin/UpdateWeights"

    with astr.AdminClient(address, token="not-the-token") as admin:
        with pytest.raises(astr.AstrError) as info:
            astr.WeightSync(admin).push({"w": np.zeros(2, np.float32)})
    assert info.value.code == grpc.StatusCode.PERMISSION_DENIED


def test_push_async(admin_server):
    fake, address = admin_server
    rng = np.random.default_rng(4)
    tensors = {"a": rng.standard_normal((30, 30)).astype(np.float32),
               "b": rng.standard_normal(999).astype(np.float16)}

    async def main():
        async with astr.AsyncAdminClient(address, token=TOKEN) as admin:
            sync = astr.WeightSync(admin, bucket_bytes=1024, chunk_bytes=300)
            with pytest.raises(TypeError):
                sync.push(tensors)
            return await sync.push_async(tensors, label="async")

    reply = asyncio.run(main())
    assert reply.label == "async"
    (requests,) = fake.record.only("UpdateWeights")
    manifest, data = reassemble(requests, 1024, 300)
    assert data == {0: tensors["a"].tobytes(), 1: tensors["b"].tobytes()}
    assert [s.xxh64 for s in manifest.tensors] == [
        xxhash.xxh64_intdigest(tensors[name].tobytes()) for name in ("a", "b")]
    assert fake.record.metadata("UpdateWeights")[0]["authorization"] == [f"Bearer {TOKEN}"]


def test_torch_tensors(admin_server):
    torch = pytest.importorskip("torch")
    fake, address = admin_server
    w = torch.randn(6, 10, requires_grad=True)
    half = torch.randn(4, 4).to(torch.bfloat16)
    push(address, [("w", w), ("half", half), ("t", w.detach().t())])
    (requests,) = fake.record.only("UpdateWeights")
    manifest, data = reassemble(requests, astr.weights.DEFAULT_BUCKET_BYTES,
                                astr.weights.DEFAULT_CHUNK_BYTES)
    assert [s.dtype for s in manifest.tensors] == ["f32", "bf16", "f32"]
    assert data[0] == w.detach().numpy().tobytes()
    assert data[1] == half.view(torch.int16).numpy().tobytes()
    assert data[2] == w.detach().t().contiguous().numpy().tobytes()
    assert list(manifest.tensors[2].shape) == [10, 6]


def test_ml_dtypes_bfloat16_arrays(admin_server):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    fake, address = admin_server
    array = np.random.default_rng(5).standard_normal((3, 5)).astype(ml_dtypes.bfloat16)
    push(address, {"w": array})
    (requests,) = fake.record.only("UpdateWeights")
    manifest, data = reassemble(requests, astr.weights.DEFAULT_BUCKET_BYTES,
                                astr.weights.DEFAULT_CHUNK_BYTES)
    assert (manifest.tensors[0].dtype, list(manifest.tensors[0].shape)) == ("bf16", [3, 5])
    assert data[0] == array.view(np.uint16).astype("<u2").tobytes()
