"""NCCL weight sync from the trainer's side (docs/rl.md "NCCL broadcast"), over ctypes on libnccl:
no torch.distributed group is needed, only the library (like vLLM's PyNccl).

    sync = astr.WeightSync(admin, transport="nccl", dtype="bf16")
    sync.push(model.state_dict().items(), label=f"step-{step}")   # makes the group on first use
    ...
    sync.close()                                                  # destroys the group

The trainer is rank 0 and makes the unique id; the scheduler gives the workers ranks 1.. and
answers them. Each push sends the manifest (names, dtypes, shapes, XXH64) over gRPC and the bytes by
ncclBroadcast: the tensors' bytes in manifest order, concatenated and cut every `bucket_bytes`
(UpdateWeightsFromDistributedRequest), each bucket one ncclUint8 broadcast from one reused buffer.
Torch CUDA tensors are packed on their device (converted there when `dtype` changes them) and
broadcast on the current stream; numpy arrays and CPU tensors are packed in host memory, which only
the emulated NCCL accepts (real NCCL needs device memory: move the tensors to the GPU first).

The library: `library`, else ASTR_NCCL_LIBRARY, else libnccl.so.2 (torch's wheels ship one under
nvidia/nccl/lib).
"""

from __future__ import annotations

import ctypes
import os
import threading
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, List, Optional

import numpy as np

from .v1 import admin_pb2 as apb

UNIQUE_ID_BYTES = 128
# ncclDataType_t values (nccl.h).
UINT8, FLOAT16, FLOAT32, BFLOAT16 = 1, 6, 7, 9
_SUCCESS = 0
_SUM = 0  # ncclRedOp_t ncclSum
# How long a push waits for its broadcasts to end after the scheduler answered with an error.
_SENDER_GRACE_S = 5.0


class NcclError(RuntimeError):
    """An NCCL call failed: its result code and NCCL's message."""

    def __init__(self, call: str, result: int, message: str) -> None:
        self.call = call
        self.result = result
        super().__init__(f"{call}: {message} ({result})")


class _UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_ubyte * UNIQUE_ID_BYTES)]


class Nccl:
    """The subset of libnccl the weight sync uses, loaded with ctypes (calls release the GIL)."""

    def __init__(self, library: Optional[str] = None) -> None:
        self.path = library or os.environ.get("ASTR_NCCL_LIBRARY") or "libnccl.so.2"
        try:
            lib = ctypes.CDLL(self.path)
        except OSError as e:
            raise OSError(f"cannot load NCCL from {self.path} ({e}); pass library= or set "
                          "ASTR_NCCL_LIBRARY") from e
        vp, c_int, size_t = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
        lib.ncclGetVersion.argtypes = [ctypes.POINTER(c_int)]
        lib.ncclGetUniqueId.argtypes = [ctypes.POINTER(_UniqueId)]
        lib.ncclCommInitRank.argtypes = [ctypes.POINTER(vp), c_int, _UniqueId, c_int]
        lib.ncclBroadcast.argtypes = [vp, vp, size_t, c_int, c_int, vp, vp]
        lib.ncclAllReduce.argtypes = [vp, vp, size_t, c_int, c_int, vp, vp]
        lib.ncclCommAbort.argtypes = [vp]
        lib.ncclCommDestroy.argtypes = [vp]
        lib.ncclGetErrorString.argtypes = [c_int]
        lib.ncclGetErrorString.restype = ctypes.c_char_p
        self._last_error = getattr(lib, "ncclGetLastError", None)
        if self._last_error is not None:
            self._last_error.argtypes = [vp]
            self._last_error.restype = ctypes.c_char_p
        for name in ("ncclGetVersion", "ncclGetUniqueId", "ncclCommInitRank", "ncclBroadcast",
                     "ncclAllReduce", "ncclCommAbort", "ncclCommDestroy"):
            getattr(lib, name).restype = c_int
        self._lib = lib
        self.emulated = hasattr(lib, "astr_nccl_emulated")

    def _check(self, call: str, result: int, comm: Optional[int] = None) -> None:
        if result == _SUCCESS:
            return
        message = (self._lib.ncclGetErrorString(result) or b"").decode(errors="replace")
        if self._last_error is not None:
            last = (self._last_error(comm) or b"").decode(errors="replace")
            if last:
                message += ": " + last
        raise NcclError(call, result, message)

    def version(self) -> str:
        v = ctypes.c_int()
        self._check("ncclGetVersion", self._lib.ncclGetVersion(ctypes.byref(v)))
        return f"{v.value // 10000}.{v.value // 100 % 100}.{v.value % 100}"

    def unique_id(self) -> bytes:
        uid = _UniqueId()
        self._check("ncclGetUniqueId", self._lib.ncclGetUniqueId(ctypes.byref(uid)))
        return bytes(uid.internal)

    def init_rank(self, nranks: int, unique_id: bytes, rank: int) -> int:
        """ncclCommInitRank; returns the communicator (blocks until every rank joined)."""
        if len(unique_id) != UNIQUE_ID_BYTES:
            raise ValueError(f"unique_id: {len(unique_id)} bytes, expected {UNIQUE_ID_BYTES}")
        uid = _UniqueId()
        ctypes.memmove(uid.internal, unique_id, UNIQUE_ID_BYTES)
        comm = ctypes.c_void_p()
        self._check("ncclCommInitRank",
                    self._lib.ncclCommInitRank(ctypes.byref(comm), nranks, uid, rank))
        return int(comm.value or 0)

    def broadcast(self, comm: int, pointer: int, count: int, datatype: int = UINT8,
                  root: int = 0, stream: int = 0) -> None:
        """In-place ncclBroadcast of `count` elements at `pointer` (device memory for real NCCL)."""
        self._check("ncclBroadcast",
                    self._lib.ncclBroadcast(pointer, pointer, count, datatype, root, comm, stream),
                    comm)

    def all_reduce(self, comm: int, pointer: int, count: int, datatype: int = FLOAT32,
                   stream: int = 0) -> None:
        """In-place ncclAllReduce (sum) of `count` elements at `pointer`."""
        self._check("ncclAllReduce",
                    self._lib.ncclAllReduce(pointer, pointer, count, datatype, _SUM, comm, stream),
                    comm)

    def abort(self, comm: int) -> None:
        self._lib.ncclCommAbort(comm)

    def destroy(self, comm: int) -> None:
        self._lib.ncclCommDestroy(comm)


def _torch_device(tensors: List[Any]) -> Any:
    """The CUDA device of the first torch CUDA tensor, or None (pack on the host)."""
    for t in tensors:
        value = t.value
        if type(value).__module__.split(".")[0] == "torch" and value.device.type == "cuda":
            return value.device
    return None


class _HostBuckets:
    """Packs the update's bytes into one reused host buffer, a bucket at a time."""

    def __init__(self, size: int) -> None:
        self.buffer = np.empty(size, dtype=np.uint8)
        self.fill = 0

    def pointer(self) -> int:
        return int(self.buffer.ctypes.data)

    def put(self, piece: memoryview, pos: int, take: int) -> None:
        self.buffer[self.fill:self.fill + take] = np.frombuffer(piece, np.uint8, take, pos)
        self.fill += take

    def stream(self) -> int:
        return 0

    def wait(self) -> None:
        pass


class _DeviceBuckets:
    """The same on a CUDA device (torch): pieces are copied there, the broadcast runs on the
    current stream, and the buffer is refilled only once it is done."""

    def __init__(self, size: int, device: Any) -> None:
        import torch

        self._torch = torch
        self.buffer = torch.empty(size, dtype=torch.uint8, device=device)
        self.fill = 0

    def pointer(self) -> int:
        return int(self.buffer.data_ptr())

    def put(self, piece: Any, pos: int, take: int) -> None:
        if isinstance(piece, memoryview):
            src = self._torch.frombuffer(piece, dtype=self._torch.uint8)[pos:pos + take]
            self.buffer[self.fill:self.fill + take].copy_(src, non_blocking=False)
        else:
            self.buffer[self.fill:self.fill + take].copy_(piece[pos:pos + take])
        self.fill += take

    def stream(self) -> int:
        return int(self._torch.cuda.current_stream(self.buffer.device).cuda_stream)

    def wait(self) -> None:
        self._torch.cuda.current_stream(self.buffer.device).synchronize()


_TORCH_WIRE = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}


def _device_pieces(tensor: Any, chunk_bytes: int) -> Any:
    """A torch CUDA tensor's bytes in the wire dtype, as uint8 tensors on its device."""
    import torch

    value = tensor.value.detach().reshape(-1)
    wire = getattr(torch, _TORCH_WIRE[tensor.dtype])
    if value.dtype != wire:
        value = value.to(wire)
    flat = value.contiguous().view(torch.uint8)
    for start in range(0, flat.numel(), chunk_bytes):
        yield flat[start:start + chunk_bytes]


def _in_thread(fn: Any, *args: Any) -> Future:
    """fn(*args) on a daemon thread of its own: a join that never completes (a worker could not
    join) must not hold a pool thread the next attempt needs, nor keep the process alive."""
    future: Future = Future()

    def run() -> None:
        try:
            future.set_result(fn(*args))
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            future.set_exception(e)

    threading.Thread(target=run, daemon=True, name="astr-nccl-join").start()
    return future


class NcclTransport:
    """The trainer's end of one NCCL group: made on first use, kept across pushes."""

    def __init__(self, admin: Any, *, group_name: str, library: Optional[str],
                 group_timeout_s: float) -> None:
        self.admin = admin
        self.group_name = group_name
        self.group_timeout_ms = int(group_timeout_s * 1000)
        self.nccl = Nccl(library)
        self.comm: Optional[int] = None
        self.ranks: Optional[apb.InitWeightUpdateGroupResponse] = None
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="astr-nccl")

    def init_group(self, timeout: Optional[float] = None) -> apb.InitWeightUpdateGroupResponse:
        """Makes the group: asks the scheduler for the world size (validate_only), then joins
        rank 0 while the workers join theirs. Raises AstrError (the scheduler's reason, e.g. a
        worker not on the cuda backend) or NcclError."""
        plan = self.admin.init_weight_update_group(
            b"", 0, self.group_name, validate_only=True, timeout=timeout)
        uid = self.nccl.unique_id()
        call: Future = self._pool.submit(
            self.admin.init_weight_update_group, uid, plan.world_size, self.group_name,
            group_timeout_ms=self.group_timeout_ms, timeout=timeout)
        # ncclCommInitRank returns once every worker joined; when the scheduler's call fails
        # first (a worker could not join), that failure is raised without waiting for it.
        join: Future = _in_thread(self.nccl.init_rank, plan.world_size, uid, 0)
        reply = call.result()  # raises the scheduler's error
        self.comm = join.result()
        self.ranks = reply
        return reply  # type: ignore[no-any-return]

    def push(self, tensors: List[Any], manifest: apb.WeightManifest, bucket_bytes: int,
             chunk_bytes: int, timeout: Optional[float]) -> apb.UpdateWeightsResponse:
        if self.comm is None:
            self.init_group(timeout)
        total = sum(t.nbytes for t in tensors)
        size = max(1, min(bucket_bytes, total))
        device = _torch_device(tensors)
        buckets = _DeviceBuckets(size, device) if device is not None else _HostBuckets(size)
        comm = self.comm
        assert comm is not None
        stop = threading.Event()

        def send(count: int) -> None:
            if stop.is_set():
                raise RuntimeError("the update was refused; broadcasts stopped")
            self.nccl.broadcast(comm, buckets.pointer(), count, UINT8, 0, buckets.stream())
            buckets.wait()
            buckets.fill = 0

        def broadcast_all() -> None:
            for tensor in tensors:
                if device is not None and tensor.value is not None and \
                        type(tensor.value).__module__.split(".")[0] == "torch" and \
                        tensor.value.device.type == "cuda":
                    pieces: Any = _device_pieces(tensor, chunk_bytes)
                else:
                    pieces = tensor.pieces(chunk_bytes)
                for piece in pieces:
                    length = piece.numel() if device is not None and not isinstance(
                        piece, memoryview) else len(piece)
                    pos = 0
                    while pos < length:
                        take = min(size - buckets.fill, length - pos)
                        buckets.put(piece, pos, take)
                        pos += take
                        if buckets.fill == size:
                            send(size)
            if buckets.fill:
                send(buckets.fill)

        request = apb.UpdateWeightsFromDistributedRequest(
            group_name=self.group_name, manifest=manifest, bucket_bytes=bucket_bytes)
        call: Future = self._pool.submit(
            self.admin._call, "UpdateWeightsFromDistributed", request, apb.UpdateWeightsResponse,
            timeout)
        sender: Future = self._pool.submit(broadcast_all)
        # A broadcast that fails here (a worker died, a socket broke) leaves the workers waiting
        # for the next bucket: aborting the communicator ends their wait at once, and the group
        # is made again on the next push.
        wait([call, sender], return_when=FIRST_EXCEPTION)
        if sender.done() and sender.exception() is not None and not call.done():
            self.nccl.abort(comm)
            self.comm = None
            try:
                call.result()
            except Exception:
                pass
            self._destroy_on_server()
            raise sender.exception()  # type: ignore[misc]
        try:
            reply = call.result()
        except BaseException:
            # The workers refused or failed. A worker that refuses the manifest or a checksum
            # still receives every bucket before it answers, so the broadcasts have ended and the
            # group stays usable; a worker that failed aborted its communicator, which ends them
            # with an error. Broadcasts still going on (the scheduler refused the call before any
            # worker received: no such group, the workers changed) would wait for nobody: the
            # communicator is aborted and the next push makes a new group.
            stop.set()
            aborted = broken = False
            try:
                sender.result(timeout=_SENDER_GRACE_S)
            except FutureTimeout:
                self.nccl.abort(comm)
                aborted = broken = True
            except Exception:
                broken = True
            if broken:
                if not aborted:
                    self.nccl.abort(comm)
                self.comm = None
                self._destroy_on_server()
            raise
        sender.result()
        return reply  # type: ignore[no-any-return]

    def _destroy_on_server(self) -> None:
        try:
            self.admin.destroy_weight_update_group(self.group_name)
        except Exception:
            pass

    def close(self) -> None:
        """Destroys the group on the server and here."""
        if self.comm is not None:
            self._destroy_on_server()
            self.nccl.destroy(self.comm)
            self.comm = None
        self._pool.shutdown(wait=False)
