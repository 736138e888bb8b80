"""WeightSync: pushes a trainer's tensors to the served model over Admin.UpdateWeights.

    admin = astr.AdminClient("127.0.0.1:50053", token_file="admin-token")
    sync = astr.WeightSync(admin, dtype="bf16")
    reply = sync.push(model.state_dict().items(), label=f"step-{step}")
    print(reply.version)

The stream is the one admin.proto describes: a manifest (every tensor's Hugging Face name, dtype,
shape and XXH64 of the exact bytes sent) and then buckets, messages of WeightChunks totalling
`bucket_bytes` (all but the last exactly, as the C++ client packs them); a tensor's chunks come in
order, each at offset = the tensor's bytes sent before it, and a tensor larger than a bucket spans
several messages.

Memory: the SDK keeps references to the caller's tensors, never copies of them. The checksums take
one pass over every tensor before the first byte is sent, the bytes a second one; both read a
tensor `chunk_bytes` at a time (converting that much when a dtype changes, copying that much to the
host for a device tensor), so beyond the caller's tensors the push holds about two buckets: the
message being filled and the one gRPC is sending.

Tensors: numpy arrays of float32 / float16 (float64 only with `dtype`), bfloat16 as uint16 arrays
of raw bits with dtype="bf16" or as ml_dtypes.bfloat16 arrays, and torch tensors where torch is
installed (detached; bfloat16 sent as its raw bits; device tensors copied to the host a chunk at a
time). Any layout: non-contiguous arrays are read in C order.
"""

from __future__ import annotations

import asyncio
import importlib
import math
import sys
import threading
from typing import (
    TYPE_CHECKING,
    Any,
    AsyncIterator,
    Callable,
    Iterable,
    Iterator,
    List,
    Literal,
    Mapping,
    Optional,
    Tuple,
    Union,
)

import numpy as np

import grpc

from .admin import AdminClient, AsyncAdminClient
from .client import open_channel
from .errors import AstrError
from .v1 import admin_pb2 as apb
from .v1 import worker_pb2 as wpb
from .v1 import worker_pb2_grpc as wpb_grpc

if TYPE_CHECKING:
    # A tensor: a numpy array, anything np.asarray takes, or a torch.Tensor.
    TensorLike = Any

# Why 4 MiB: each UpdateWeights message is forwarded by the scheduler to every worker as it
# arrives, so smaller messages pipeline better (the scheduler forwards one while it receives the
# next, and each side allocates less per message): measured with astr-bench-refit on a 0.85B bf16
# model (docs/benchmarks.md), 4 MiB buckets pushed in about half the time of 64 MiB ones. The
# per-message cost stays small next to the bytes (a 7B model in bf16 is ~3,500 messages).
DEFAULT_BUCKET_BYTES = 4 << 20
# Most bytes in one WeightChunk, and how much of a tensor is read (converted, copied to the host)
# at a time: small enough that conversion temporaries stay small, large enough that per-chunk
# overhead is nil.
DEFAULT_CHUNK_BYTES = 4 << 20
# NCCL broadcasts: one per bucket from one reused buffer; larger is faster (no per-message cost).
DEFAULT_NCCL_BUCKET_BYTES = 512 << 20
# The direct route's channels to the workers (their own limit on a message is 256 MiB).
_WORKER_CHANNEL_OPTIONS = (("grpc.max_send_message_length", -1),)
# Protobuf refuses messages of 2 GiB and more; a bucket stays well below.
MAX_BUCKET_BYTES = 1 << 30

# dtypes on the wire (admin.proto TensorSpec.dtype), with the aliases the proto also accepts.
WireDtype = Literal["f32", "f16", "bf16"]
_WIRE_NAMES = {
    "f32": "f32", "float32": "f32",
    "f16": "f16", "float16": "f16",
    "bf16": "bf16", "bfloat16": "bf16",
}
_ITEMSIZE = {"f32": 4, "f16": 2, "bf16": 2}
# Source dtypes: the wire ones, float64 ("f64", only converted) and uint16 ("u16": bf16 bits).
_NUMPY_SOURCES = {"float32": "f32", "float16": "f16", "float64": "f64", "uint16": "u16"}
_TORCH_SOURCES = {
    "torch.float32": "f32",
    "torch.float16": "f16",
    "torch.bfloat16": "bf16",
    "torch.float64": "f64",
}

NamedTensors = Union[Mapping[str, Any], Iterable[Tuple[str, Any]]]
# Reads elements [start, stop) of a tensor in C order as a 1-D numpy array of its source dtype.
_Reader = Callable[[int, int], np.ndarray]


def to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """bfloat16 bits (uint16) of float32 values, rounded to nearest, ties to even. Overflow gives
    infinity, NaN stays NaN (quiet, same sign)."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    # Adding 0x7FFF plus the lowest kept bit, then truncating, rounds half to even. Only NaNs are
    # large enough to wrap, and they are replaced below.
    lowest_kept = (bits >> np.uint32(16)) & np.uint32(1)
    rounded = (bits + (np.uint32(0x7FFF) + lowest_kept)) >> np.uint32(16)
    out = rounded.astype(np.uint16)
    nan = (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    if nan.any():
        out[nan] = ((bits[nan] >> np.uint32(16)) | np.uint32(0x0040)).astype(np.uint16)
    return out


def _little_endian(block: np.ndarray) -> np.ndarray:
    order = block.dtype.byteorder
    if order == ">" or (order == "=" and sys.byteorder == "big"):
        return block.astype(block.dtype.newbyteorder("<"))
    return block


def _to_f32(block: np.ndarray, source: str) -> np.ndarray:
    if source == "bf16":
        return (block.astype(np.uint32) << np.uint32(16)).view(np.float32)
    return block.astype(np.float32)


def _convert(block: np.ndarray, source: str, wire: str) -> np.ndarray:
    """A contiguous little-endian array of `wire` dtype from a block of `source` dtype."""
    block = _little_endian(block)
    if source == wire:
        return np.ascontiguousarray(block)
    if wire == "f16" and source == "f64":
        return block.astype(np.float16)  # one rounding, not two through float32
    f32 = _to_f32(block, source)
    if wire == "f32":
        return f32
    if wire == "f16":
        return f32.astype(np.float16)
    return to_bf16_bits(f32)


class _Tensor:
    """One tensor of an update: its manifest entry and a reader of its elements."""

    __slots__ = ("name", "dtype", "shape", "numel", "source", "value", "_read")

    def __init__(
        self, name: str, dtype: str, shape: Tuple[int, ...], source: str, read: _Reader,
        value: Any = None,
    ) -> None:
        self.name = name
        self.value = value  # the caller's tensor (the NCCL transport packs CUDA tensors on device)
        self.dtype = dtype
        self.shape = shape
        self.numel = math.prod(shape)
        self.source = source
        self._read = read

    @property
    def itemsize(self) -> int:
        """Bytes per element on the wire."""
        return _ITEMSIZE[self.dtype]

    @property
    def nbytes(self) -> int:
        """Bytes on the wire."""
        return self.numel * self.itemsize

    def pieces(self, max_bytes: int) -> Iterator[memoryview]:
        """The bytes sent, in order, as pieces of at most `max_bytes` (whole elements each)."""
        per_piece = max(1, max_bytes // self.itemsize)
        for start in range(0, self.numel, per_piece):
            block = self._read(start, min(self.numel, start + per_piece))
            yield _convert(block, self.source, self.dtype).view(np.uint8).data


def _numpy_reader(array: np.ndarray) -> _Reader:
    if array.ndim == 0:
        array = array.reshape(1)
    if array.flags.c_contiguous:
        flat = array.reshape(-1)  # a view
        return lambda start, stop: flat[start:stop]
    # flat[a:b] copies just those elements, in C order.
    return lambda start, stop: array.flat[start:stop]


def _is_torch(value: Any) -> bool:
    return type(value).__module__.split(".")[0] == "torch" and hasattr(value, "detach")


def _torch_numpy(tensor: Any) -> np.ndarray:
    """A numpy view of a CPU tensor (bfloat16 as its uint16 bits)."""
    if str(tensor.dtype) == "torch.bfloat16":
        torch = importlib.import_module("torch")  # present: `tensor` is one of its tensors
        return tensor.view(torch.int16).numpy().view(np.uint16)  # type: ignore[no-any-return]
    return tensor.numpy()  # type: ignore[no-any-return]


def _torch_source(name: str, value: Any) -> Tuple[str, Tuple[int, ...], _Reader]:
    tensor = value.detach()
    source = _TORCH_SOURCES.get(str(tensor.dtype))
    if source is None:
        raise TypeError(f"{name}: dtype {tensor.dtype} is not supported (float32, float16, "
                        "bfloat16; float64 with dtype=...)")
    shape = tuple(int(d) for d in tensor.shape)
    if tensor.device.type == "cpu":
        return source, shape, _numpy_reader(_torch_numpy(tensor))
    flat = tensor.reshape(-1)  # on the device; a copy there only if not contiguous
    return source, shape, lambda start, stop: _torch_numpy(flat[start:stop].cpu())


def _numpy_source(name: str, value: Any) -> Tuple[str, Tuple[int, ...], _Reader]:
    array = np.asarray(value)
    if array.dtype.name == "bfloat16":  # ml_dtypes
        return "bf16", array.shape, _numpy_reader(array.view(np.uint16))
    source = _NUMPY_SOURCES.get(array.dtype.name)
    if source is None:
        raise TypeError(f"{name}: dtype {array.dtype} is not supported (float32, float16, "
                        "bfloat16 bits as uint16 with dtype='bf16'; float64 with dtype=...)")
    return source, array.shape, _numpy_reader(array)


def _tensor(name: Any, value: Any, wire: Optional[str]) -> _Tensor:
    if not isinstance(name, str) or not name:
        raise TypeError(f"tensor name {name!r}: expected a non-empty string")
    if _is_torch(value):
        source, shape, read = _torch_source(name, value)
    else:
        source, shape, read = _numpy_source(name, value)
    if source == "u16":
        if wire != "bf16":
            raise TypeError(f"{name}: a uint16 array is sent as bfloat16 bits only with "
                            "dtype='bf16'")
        source = "bf16"
    if source == "f64" and wire is None:
        raise TypeError(f"{name}: float64 is not sent as is; pass dtype='f32', 'f16' or 'bf16'")
    return _Tensor(name, wire or source, tuple(int(d) for d in shape), source, read, value)


def _buckets(
    tensors: List[_Tensor], bucket_bytes: int, chunk_bytes: int
) -> Iterator[apb.UpdateWeightsRequest]:
    """The UpdateWeights messages after the manifest: every bucket but the last holds exactly
    bucket_bytes of data (the C++ client's PlanWeightBuckets packs the same way); a chunk may end
    inside an element, the next one continuing at its offset."""
    request = apb.UpdateWeightsRequest()
    size = 0
    for index, tensor in enumerate(tensors):
        offset = 0
        for piece in tensor.pieces(chunk_bytes):
            pos = 0
            while pos < len(piece):
                take = min(bucket_bytes - size, len(piece) - pos)
                if take == 0:  # the bucket is full
                    yield request
                    request = apb.UpdateWeightsRequest()
                    size = 0
                    continue
                request.chunks.add(tensor=index, offset=offset, data=bytes(piece[pos:pos + take]))
                pos += take
                offset += take
                size += take
        if offset != tensor.nbytes:
            raise RuntimeError(f"{tensor.name}: sent {offset} bytes, the manifest says "
                               f"{tensor.nbytes} (was the tensor changed during the push?)")
    if request.chunks:
        yield request


class WeightSync:
    """Builds and sends weight updates from (Hugging Face name, tensor) pairs.

    Args:
        admin: the AdminClient (push) or AsyncAdminClient (push_async) to send through; None
            to build manifests and request streams only.
        bucket_bytes: data bytes per UpdateWeights message (see DEFAULT_BUCKET_BYTES for why
            4 MiB); at most MAX_BUCKET_BYTES.
        chunk_bytes: most bytes per WeightChunk, and per read of a tensor; at most bucket_bytes.
        dtype: None sends every tensor in its own dtype; "f32", "f16" or "bf16" converts every
            tensor to it client-side (float32 -> bf16 rounds to nearest even and halves the bytes).
        checksums: put each tensor's XXH64 in the manifest, so every worker checks what it got
            (needs the xxhash package). Costs one extra pass over the tensors.
        transport: "grpc" streams the bytes through the scheduler (Admin.UpdateWeights);
            "ipc" lays them in device buffers of this process and sends their CUDA IPC handles
            (Admin.UpdateWeightsFromTensor, astr.cuda_ipc; workers on this machine's GPUs,
            bucket_bytes per buffer, default DEFAULT_NCCL_BUCKET_BYTES);
            "direct" streams them from this process straight to every worker (one stream and
            thread each; the scheduler reserves and commits the update: Admin.BeginDirectUpdate,
            docs/rl.md "The direct route"), which is faster where the trainer can reach the
            workers' addresses (`worker_credentials` for workers behind --worker-tls-*);
            "nccl" broadcasts them from this process (rank 0) to the workers' GPUs, the manifest
            going over gRPC (astr.nccl; the workers must run the cuda backend). With "nccl",
            bucket_bytes is the size of each broadcast (default DEFAULT_NCCL_BUCKET_BYTES) and
            push() makes the group on first use; close() destroys it.
        cuda_library: transport="ipc": the libcudart to load (None: ASTR_CUDART_LIBRARY, else
            libcudart.so).
        group_name, nccl_library, group_timeout_s: the NCCL group's name, the libnccl to load
            (None: ASTR_NCCL_LIBRARY, else libnccl.so.2) and how long joining and each broadcast
            may take before the workers abort it.
    """

    def __init__(
        self,
        admin: Union[AdminClient, AsyncAdminClient, None],
        *,
        bucket_bytes: Optional[int] = None,
        chunk_bytes: Optional[int] = None,
        dtype: Optional[str] = None,
        checksums: bool = True,
        transport: Literal["grpc", "direct", "nccl", "ipc"] = "grpc",
        group_name: str = "default",
        nccl_library: Optional[str] = None,
        group_timeout_s: float = 300.0,
        worker_credentials: Optional[grpc.ChannelCredentials] = None,
        cuda_library: Optional[str] = None,
    ) -> None:
        if transport not in ("grpc", "direct", "nccl", "ipc"):
            raise ValueError(f"transport={transport!r}: expected 'grpc', 'direct', 'nccl' or "
                             "'ipc'")
        if bucket_bytes is None:
            bucket_bytes = DEFAULT_NCCL_BUCKET_BYTES if transport in ("nccl", "ipc") else \
                DEFAULT_BUCKET_BYTES
        if chunk_bytes is None:
            chunk_bytes = min(DEFAULT_CHUNK_BYTES, bucket_bytes)
        if not 4 <= bucket_bytes <= MAX_BUCKET_BYTES:
            raise ValueError(f"bucket_bytes={bucket_bytes}: expected 4 .. {MAX_BUCKET_BYTES}")
        if not 4 <= chunk_bytes <= bucket_bytes:
            raise ValueError(f"chunk_bytes={chunk_bytes}: expected 4 .. bucket_bytes "
                             f"({bucket_bytes})")
        if dtype is not None and dtype not in _WIRE_NAMES:
            raise ValueError(f"dtype={dtype!r}: expected None, 'f32', 'f16' or 'bf16'")
        self.admin = admin
        self.bucket_bytes = bucket_bytes
        self.chunk_bytes = chunk_bytes
        self.dtype: Optional[str] = _WIRE_NAMES[dtype] if dtype is not None else None
        self.checksums = checksums
        self._xxh64: Any = None
        if checksums:
            try:
                xxhash = importlib.import_module("xxhash")
            except ImportError as e:
                raise ImportError("WeightSync(checksums=True) needs the xxhash package "
                                  "(pip install 'astr-sdk[weights]')") from e
            self._xxh64 = xxhash.xxh64
        self.transport = transport
        self._worker_credentials = worker_credentials
        if transport in ("direct", "ipc") and not isinstance(admin, AdminClient):
            raise TypeError(f"transport={transport!r} needs an AdminClient")
        self._ipc: Any = None
        if transport == "ipc":
            from .cuda_ipc import IpcTransport

            self._ipc = IpcTransport(admin, cuda_library)
        self._nccl: Any = None
        if transport == "nccl":
            if not isinstance(admin, AdminClient):
                raise TypeError("transport='nccl' needs an AdminClient")
            from .nccl import NcclTransport

            self._nccl = NcclTransport(admin, group_name=group_name, library=nccl_library,
                                       group_timeout_s=group_timeout_s)

    def init_group(self, *, timeout: Optional[float] = None) -> apb.InitWeightUpdateGroupResponse:
        """transport="nccl": makes the NCCL group now (push() does on first use); returns the
        ranks the scheduler gave the workers."""
        if self._nccl is None:
            raise TypeError("init_group needs transport='nccl'")
        return self._nccl.init_group(timeout)  # type: ignore[no-any-return]

    def close(self) -> None:
        """transport="nccl": destroys the NCCL group (on the workers and here)."""
        if self._nccl is not None:
            self._nccl.close()

    def _tensors(self, named_tensors: NamedTensors) -> List[_Tensor]:
        pairs = named_tensors.items() if isinstance(named_tensors, Mapping) else named_tensors
        tensors: List[_Tensor] = []
        seen = set()
        for pair in pairs:
            name, value = pair
            if name in seen:
                raise ValueError(f"tensor {name!r} given twice")
            seen.add(name)
            tensors.append(_tensor(name, value, self.dtype))
        return tensors

    def _checksum(self, tensor: _Tensor) -> int:
        digest = self._xxh64(seed=0)
        for piece in tensor.pieces(self.chunk_bytes):
            digest.update(piece)
        return digest.intdigest()  # type: ignore[no-any-return]

    def _manifest(self, tensors: List[_Tensor], label: str) -> apb.WeightManifest:
        manifest = apb.WeightManifest(label=label)
        for tensor in tensors:
            spec = manifest.tensors.add(name=tensor.name, dtype=tensor.dtype, shape=tensor.shape)
            if self.checksums:
                spec.xxh64 = self._checksum(tensor)
        return manifest

    def manifest(self, named_tensors: NamedTensors, label: str = "") -> apb.WeightManifest:
        """The manifest of an update of these tensors (also what
        AdminClient.update_weights_from_distributed takes)."""
        return self._manifest(self._tensors(named_tensors), label)

    def requests(
        self, named_tensors: NamedTensors, label: str = ""
    ) -> Iterator[apb.UpdateWeightsRequest]:
        """The UpdateWeights stream of these tensors, built lazily: the manifest, then buckets.

        The tensors are checked here (names, dtypes); checksums are computed when the first
        message is taken.
        """
        tensors = self._tensors(named_tensors)

        def stream() -> Iterator[apb.UpdateWeightsRequest]:
            yield apb.UpdateWeightsRequest(manifest=self._manifest(tensors, label))
            yield from _buckets(tensors, self.bucket_bytes, self.chunk_bytes)

        return stream()

    def push(
        self, named_tensors: NamedTensors, label: str = "", *, timeout: Optional[float] = None
    ) -> apb.UpdateWeightsResponse:
        """Sends the update through the AdminClient and returns the new version's reply.

        The manifest (and its checksums) is built before the call starts, so a bad tensor raises
        here; an error while streaming the bytes is raised as it is, not as the CANCELLED call it
        caused. Don't modify the tensors until push returns.
        """
        if not isinstance(self.admin, AdminClient):
            raise TypeError("push needs an AdminClient; use push_async with an AsyncAdminClient")
        tensors = self._tensors(named_tensors)
        manifest = self._manifest(tensors, label)
        if self._nccl is not None:
            return self._nccl.push(  # type: ignore[no-any-return]
                tensors, manifest, self.bucket_bytes, self.chunk_bytes, timeout)
        if self.transport == "direct":
            return self._push_direct(tensors, manifest, timeout)
        if self._ipc is not None:
            return self._ipc.push(  # type: ignore[no-any-return]
                tensors, manifest, self.bucket_bytes, self.chunk_bytes, timeout)
        failures: List[Exception] = []

        def stream() -> Iterator[apb.UpdateWeightsRequest]:
            try:
                yield apb.UpdateWeightsRequest(manifest=manifest)
                yield from _buckets(tensors, self.bucket_bytes, self.chunk_bytes)
            except Exception as e:
                failures.append(e)
                raise

        try:
            return self.admin.update_weights(stream(), timeout=timeout)
        except Exception:
            if failures:
                raise failures[0] from None
            raise

    def _push_direct(
        self, tensors: List[_Tensor], manifest: apb.WeightManifest, timeout: Optional[float]
    ) -> apb.UpdateWeightsResponse:
        """The direct route: reserve, stream to every worker at once, commit (or discard)."""
        admin = self.admin
        assert isinstance(admin, AdminClient)
        begin = admin.begin_direct_update(
            timeout_ms=0 if timeout is None else max(1, int(timeout * 1000)), timeout=timeout)
        workers = list(begin.workers)
        answers: List[Optional[wpb.StageWeightsResponse]] = [None] * len(workers)
        errors: List[Optional[Exception]] = [None] * len(workers)

        def stage(i: int) -> None:
            channel = open_channel(workers[i], self._worker_credentials, _WORKER_CHANNEL_OPTIONS)
            try:
                stub = wpb_grpc.WorkerStub(channel)  # type: ignore[no-untyped-call]

                def stream() -> Iterator[apb.UpdateWeightsRequest]:
                    try:
                        yield apb.UpdateWeightsRequest(manifest=manifest)
                        yield from _buckets(tensors, self.bucket_bytes, self.chunk_bytes)
                    except Exception as e:  # the tensors' own error, not the CANCELLED it causes
                        errors[i] = e
                        raise

                answers[i] = stub.StageWeights(stream(), timeout=timeout)
            except grpc.RpcError as e:
                if errors[i] is None:
                    error = AstrError.from_rpc(e, "/astr.v1.Worker/StageWeights")
                    errors[i] = AstrError(error.code, f"worker {workers[i]}: {error.message}",
                                          error.method)
            except Exception as e:
                if errors[i] is None:
                    errors[i] = e
            finally:
                channel.close()

        threads = [threading.Thread(target=stage, args=(i,), daemon=True)
                   for i in range(len(workers))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        failed = [e for e in errors if e is not None]
        commit = apb.CommitDirectUpdateRequest(update_id=begin.update_id, label=manifest.label,
                                               discard=bool(failed))
        for worker, answer in zip(workers, answers):
            if answer is not None:
                commit.stages.add(worker=worker, staged_id=answer.staged_id,
                                  tensors=answer.tensors, bytes=answer.bytes)
        try:
            reply = admin.commit_direct_update(commit, timeout=120.0)
        except AstrError:
            if failed:
                raise failed[0] from None
            raise
        if failed:
            raise failed[0]
        return reply

    async def push_async(
        self, named_tensors: NamedTensors, label: str = "", *, timeout: Optional[float] = None
    ) -> apb.UpdateWeightsResponse:
        """push() through an AsyncAdminClient. Checksums and buckets are built on the loop's
        default executor, so the event loop keeps running meanwhile."""
        if self._nccl is not None:
            raise TypeError("transport='nccl' pushes with push() (an AdminClient)")
        if not isinstance(self.admin, AsyncAdminClient):
            raise TypeError("push_async needs an AsyncAdminClient; use push with an AdminClient")
        loop = asyncio.get_running_loop()
        tensors = self._tensors(named_tensors)
        manifest = await loop.run_in_executor(None, self._manifest, tensors, label)
        failures: List[Exception] = []

        async def stream() -> AsyncIterator[apb.UpdateWeightsRequest]:
            try:
                yield apb.UpdateWeightsRequest(manifest=manifest)
                buckets = _buckets(tensors, self.bucket_bytes, self.chunk_bytes)
                while True:
                    request = await loop.run_in_executor(None, next, buckets, None)
                    if request is None:
                        return
                    yield request
            except Exception as e:
                failures.append(e)
                raise

        try:
            return await self.admin.update_weights(stream(), timeout=timeout)
        except Exception:
            if failures:
                raise failures[0] from None
            raise
