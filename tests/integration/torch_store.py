"""A trainer's side of vLLM's NCCL rendezvous, without torch (tests play a vLLM trainer with it).

vLLM's trainer (NCCLWeightTransferEngine.trainer_init) makes a StatelessProcessGroup as rank 0: a
torch.distributed TCPStore server at master_address:master_port that waits until world_size ranks
checked in on its "init/" counter, then publishes its ncclUniqueId with broadcast_obj, i.e.
pickle.dumps of vLLM's ctypes structure under "/broadcast_from/0/0".

TcpStoreServer speaks torch's TCPStore wire protocol (torch/csrc/distributed/c10d/TCPStore.cpp):
a query byte, then strings and byte strings as a little-endian uint64 length and the bytes.
tools/check_torch_rendezvous.sh checks it against torch (torch's client against this server) and
runs test_vllm_weight_transfer.py with torch's own TCPStore in its place (ASTR_TEST_TORCH_STORE=1).
"""

from __future__ import annotations

import ctypes
import os
import pickle
import select
import socket
import struct
import threading
import time
from typing import Dict, List

VALIDATE, SET, COMPARE_SET, GET, ADD, CHECK, WAIT, GETNUMKEYS, DELETE_KEY = range(9)
CANCEL_WAIT, PING = 12, 13
MAGIC = 0x3C85F7CE
STOP_WAITING, WAIT_CANCELED = 0, 1


class ncclUniqueId(ctypes.Structure):  # noqa: N801 - vLLM's name, which the pickle carries
    """vLLM's pynccl_wrapper.ncclUniqueId: what its broadcast_obj pickles."""
    _fields_ = [("internal", ctypes.c_byte * 128)]


def pickled_unique_id(raw: bytes) -> bytes:
    """broadcast_obj's value for a unique id: pickle.dumps of the ctypes structure."""
    uid = ncclUniqueId()
    ctypes.memmove(uid.internal, raw, 128)
    return pickle.dumps(uid)


class _Conn:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def exact(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            part = self.sock.recv(n - len(out))
            if not part:
                raise ConnectionError("closed")
            out += part
        return out

    def u64(self) -> int:
        return struct.unpack("<Q", self.exact(8))[0]

    def string(self) -> bytes:
        return self.exact(self.u64())


class TcpStoreServer:
    """torch's TCPStore server: SET, GET, ADD, CHECK, WAIT (with CANCEL_WAIT), DELETE_KEY,
    GETNUMKEYS, COMPARE_SET, VALIDATE and PING; values are bytes, ADD keeps decimal text."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._listener = socket.create_server((host, port))
        self.port = self._listener.getsockname()[1]
        self._data: Dict[bytes, bytes] = {}
        self._cv = threading.Condition()
        self._closed = False
        self._conns: List[socket.socket] = []
        self.requests: List[int] = []  # query bytes in arrival order (for the tests)
        threading.Thread(target=self._accept, daemon=True).start()

    # The server's own side (the trainer's process, as torch's master store).
    def set(self, key: str, value: bytes) -> None:
        with self._cv:
            self._data[key.encode()] = value
            self._cv.notify_all()

    def get(self, key: str) -> bytes:
        with self._cv:
            return self._data[key.encode()]

    def add(self, key: str, delta: int) -> int:
        with self._cv:
            value = int(self._data.get(key.encode(), b"0")) + delta
            self._data[key.encode()] = str(value).encode()
            self._cv.notify_all()
            return value

    def wait_for_workers(self, world_size: int, timeout_s: float) -> None:
        """As torch's master TCPStore: checks itself in, then waits for world_size check-ins."""
        self.add("init/", 1)
        deadline = time.monotonic() + timeout_s
        with self._cv:
            while int(self._data.get(b"init/", b"0")) < world_size:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{self._data.get(b'init/')} of {world_size} checked in")
                self._cv.wait(left)

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        for c in list(self._conns):
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            self._conns.append(sock)
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        conn = _Conn(sock)
        try:
            while True:
                query = conn.exact(1)[0]
                self.requests.append(query)
                if query == VALIDATE:
                    if struct.unpack("<I", conn.exact(4))[0] != MAGIC:
                        return
                elif query == PING:
                    sock.sendall(conn.exact(4))
                elif query == SET:
                    key, value = conn.string(), conn.string()
                    with self._cv:
                        self._data[key] = value
                        self._cv.notify_all()
                elif query == COMPARE_SET:
                    key, expected, desired = conn.string(), conn.string(), conn.string()
                    with self._cv:
                        current = self._data.get(key)
                        if current is None and expected == b"" or current == expected:
                            self._data[key] = desired
                            self._cv.notify_all()
                            current = desired
                        elif current is None:
                            current = expected
                    sock.sendall(struct.pack("<Q", len(current)) + current)
                elif query == GET:
                    key = conn.string()
                    with self._cv:
                        value = self._data.get(key, b"")
                    sock.sendall(struct.pack("<Q", len(value)) + value)
                elif query == ADD:
                    key = conn.string()
                    delta = struct.unpack("<q", conn.exact(8))[0]
                    sock.sendall(struct.pack("<q", self.add(key.decode(), delta)))
                elif query == CHECK:
                    keys = [conn.string() for _ in range(conn.u64())]
                    with self._cv:
                        ready = all(k in self._data for k in keys)
                    sock.sendall(bytes([0 if ready else 1]))
                elif query == WAIT:
                    keys = [conn.string() for _ in range(conn.u64())]
                    self._wait(sock, conn, keys)
                elif query == GETNUMKEYS:
                    with self._cv:
                        sock.sendall(struct.pack("<q", len(self._data)))
                elif query == DELETE_KEY:
                    key = conn.string()
                    with self._cv:
                        gone = self._data.pop(key, None) is not None
                    sock.sendall(struct.pack("<q", 1 if gone else 0))
                elif query == CANCEL_WAIT:
                    sock.sendall(bytes([WAIT_CANCELED]))
                else:
                    return  # torch's server drops a client that sends what it does not know
        except (ConnectionError, OSError):
            return
        finally:
            sock.close()

    def _wait(self, sock: socket.socket, conn: _Conn, keys: List[bytes]) -> None:
        while True:
            with self._cv:
                if all(k in self._data for k in keys):
                    sock.sendall(bytes([STOP_WAITING]))
                    return
                self._cv.wait(0.05)
            readable, _, _ = select.select([sock], [], [], 0)
            if readable:
                query = conn.exact(1)[0]
                self.requests.append(query)
                if query == CANCEL_WAIT:
                    sock.sendall(bytes([WAIT_CANCELED]))
                    return
                raise ConnectionError(f"query {query} during a wait")


class TrainerStore:
    """vLLM's StatelessProcessGroup.create(rank=0) + broadcast_obj of the unique id: this
    module's server, or torch's own TCPStore when ASTR_TEST_TORCH_STORE is 1 (its classic
    server, as vLLM makes it) or libuv (torch's default server); torch must be installed."""

    def __init__(self, world_size: int, host: str = "127.0.0.1", timeout_s: float = 60) -> None:
        self.world_size = world_size
        self.timeout_s = timeout_s
        self.torch = os.environ.get("ASTR_TEST_TORCH_STORE", "") in ("1", "libuv")
        self._server = None if self.torch else TcpStoreServer(host)
        if self.torch:
            s = socket.socket()
            s.bind((host, 0))
            self.port = s.getsockname()[1]
            s.close()
        else:
            self.port = self._server.port
        self.host = host
        self._store = None

    def join(self) -> None:
        """Blocks until every worker rank checked in (torch's master constructor does)."""
        if self.torch:
            from datetime import timedelta

            import torch.distributed as dist
            libuv = os.environ["ASTR_TEST_TORCH_STORE"] == "libuv"
            self._store = dist.TCPStore(self.host, self.port, self.world_size, True,
                                        timedelta(seconds=self.timeout_s), use_libuv=libuv)
        else:
            self._server.wait_for_workers(self.world_size, self.timeout_s)

    def broadcast_unique_id(self, raw: bytes) -> None:
        value = pickled_unique_id(raw)
        if self.torch:
            self._store.set("broadcast_from/0/0", value)  # torch adds the "/" prefix
        else:
            self._server.set("/broadcast_from/0/0", value)

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
        self._store = None
