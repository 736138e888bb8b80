"""CUDA IPC weight updates, the trainer's side (docs/rl.md "CUDA IPC"), over ctypes on libcudart.

`WeightSync(admin, transport="ipc")` lays the update's tensors back to back in device buffers of
`bucket_bytes` each (flattened buckets, as slime does), shares each buffer with
cudaIpcGetMemHandle and sends the handles with the manifest (Admin.UpdateWeightsFromTensor). Every
worker, on this machine and the cuda backend, opens the buffers, copies the bytes out and stages
them; the call returns once the update is committed, and the buffers are freed then. Meanwhile
this process holds one device copy of the update beside the tensors.

libcudart is loaded from `cuda_library=`, else ASTR_CUDART_LIBRARY, else libcudart.so. The
emulated device's (lib/libastr_cuda_ipc_emu.so of a build) runs the same path without a GPU.
Torch CUDA tensors are copied device to device (converted on their device when `dtype` changes
them); numpy arrays and host tensors are copied from the host.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any, List, Optional

import numpy as np

from .nccl import _device_pieces, _torch_device
from .v1 import admin_pb2 as apb

# cudaMemcpyKind
_HOST_TO_DEVICE = 1
_DEVICE_TO_DEVICE = 3
# sizeof(cudaIpcMemHandle_t)
IPC_HANDLE_BYTES = 64


class CudaError(RuntimeError):
    """A libcudart call failed (its error string and code), or libcudart could not be loaded."""


class CudaRuntime:
    """The few libcudart calls the IPC transport makes."""

    def __init__(self, library: Optional[str] = None) -> None:
        path = library or os.environ.get("ASTR_CUDART_LIBRARY") or "libcudart.so"
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            raise CudaError(f"cannot load libcudart from {path!r} ({e}); set cuda_library= or "
                            "ASTR_CUDART_LIBRARY") from e
        self.path = path
        self._lib = lib
        lib.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
        lib.cudaFree.argtypes = [ctypes.c_void_p]
        lib.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        lib.cudaIpcGetMemHandle.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        lib.cudaGetErrorString.argtypes = [ctypes.c_int]
        lib.cudaGetErrorString.restype = ctypes.c_char_p
        for fn in (lib.cudaMalloc, lib.cudaFree, lib.cudaMemcpy, lib.cudaIpcGetMemHandle,
                   lib.cudaDeviceSynchronize):
            fn.restype = ctypes.c_int

    def _check(self, code: int, what: str) -> None:
        if code != 0:
            text = (self._lib.cudaGetErrorString(code) or b"").decode("utf-8", "replace")
            raise CudaError(f"{what}: {text} (cudaError {code})")

    def malloc(self, size: int) -> int:
        ptr = ctypes.c_void_p()
        self._check(self._lib.cudaMalloc(ctypes.byref(ptr), size), f"cudaMalloc({size})")
        return int(ptr.value or 0)

    def free(self, ptr: int) -> None:
        self._check(self._lib.cudaFree(ctypes.c_void_p(ptr)), "cudaFree")

    def memcpy(self, dst: int, src: int, size: int, kind: int) -> None:
        self._check(self._lib.cudaMemcpy(ctypes.c_void_p(dst), ctypes.c_void_p(src), size, kind),
                    "cudaMemcpy")

    def synchronize(self) -> None:
        self._check(self._lib.cudaDeviceSynchronize(), "cudaDeviceSynchronize")

    def ipc_handle(self, ptr: int) -> bytes:
        handle = ctypes.create_string_buffer(IPC_HANDLE_BYTES)
        self._check(self._lib.cudaIpcGetMemHandle(handle, ctypes.c_void_p(ptr)),
                    "cudaIpcGetMemHandle")
        return handle.raw


def _is_torch_cuda(value: Any) -> bool:
    return value is not None and type(value).__module__.split(".")[0] == "torch" and \
        value.device.type == "cuda"


class IpcTransport:
    """Pushes updates through the trainer's device buffers."""

    def __init__(self, admin: Any, library: Optional[str]) -> None:
        self.admin = admin
        self.cuda = CudaRuntime(library)

    def push(self, tensors: List[Any], manifest: apb.WeightManifest, bucket_bytes: int,
             chunk_bytes: int, timeout: Optional[float]) -> apb.UpdateWeightsResponse:
        total = sum(t.nbytes for t in tensors)
        if _torch_device(tensors) is not None:
            import torch

            torch.cuda.set_device(_torch_device(tensors))
        buffers: List[List[int]] = []  # [pointer, size, bytes used]
        allocated = 0
        try:
            for tensor in tensors:
                on_device = _is_torch_cuda(tensor.value)
                pieces: Any = _device_pieces(tensor, chunk_bytes) if on_device else \
                    tensor.pieces(chunk_bytes)
                for piece in pieces:
                    if on_device:
                        src, length, kind, keep = piece.data_ptr(), piece.numel(), \
                            _DEVICE_TO_DEVICE, piece
                    else:
                        keep = np.frombuffer(piece, np.uint8)
                        src, length, kind = int(keep.ctypes.data), len(piece), _HOST_TO_DEVICE
                    pos = 0
                    while pos < length:
                        if not buffers or buffers[-1][2] == buffers[-1][1]:
                            size = min(bucket_bytes, total - allocated)
                            buffers.append([self.cuda.malloc(size), size, 0])
                            allocated += size
                        ptr, size, used = buffers[-1]
                        take = min(length - pos, size - used)
                        self.cuda.memcpy(ptr + used, src + pos, take, kind)
                        buffers[-1][2] += take
                        pos += take
                    del keep
            self.cuda.synchronize()
            request = apb.UpdateWeightsFromTensorRequest(manifest=manifest)
            for ptr, _, used in buffers:
                request.buffers.add(handle=self.cuda.ipc_handle(ptr), bytes=used)
            return self.admin.update_weights_from_tensor(  # type: ignore[no-any-return]
                request, timeout=timeout)
        finally:
            for ptr, _, _ in buffers:
                self.cuda.free(ptr)
