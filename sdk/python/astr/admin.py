"""Clients of astr.v1.Admin, the trainer / operator control plane (admin.proto): AdminClient
(blocking) and AsyncAdminClient (asyncio).

The scheduler serves Admin on its own port (--admin-listen) and refuses every call whose metadata
lacks `authorization: Bearer <token>` matching its --admin-token-file (UNAUTHENTICATED without a
token, PERMISSION_DENIED for a wrong one). Both clients send that header on every call.

    admin = astr.AdminClient("127.0.0.1:50053", token_file="/run/astr/admin-token")
    admin.pause("keep")
    reply = astr.WeightSync(admin).push(model.state_dict().items(), label="step-100")
    admin.resume()
"""

from __future__ import annotations

from typing import AsyncIterable, Iterable, Literal, Optional, Sequence, Tuple, Type, TypeVar, Union

import grpc

from .client import ChannelOptions, call_unary, call_unary_async, open_aio_channel, open_channel
from .inputs import enum_value
from .v1 import admin_pb2 as apb
from .v1 import admin_pb2_grpc as apb_grpc

# How Pause treats running requests (admin.proto PauseMode): "abort" ends them now, "drain" waits
# for them to finish, "keep" freezes them until Resume.
PauseModeName = Literal["abort", "drain", "keep"]

_SERVICE = "/astr.v1.Admin/"
R = TypeVar("R")
_PAUSE_MODES = {
    "abort": apb.PAUSE_MODE_ABORT,
    "drain": apb.PAUSE_MODE_DRAIN,
    "keep": apb.PAUSE_MODE_KEEP,
}
# gRPC's default receive limit is 4 MiB; a checksum reply for a large model can exceed it. The
# client limits neither direction: the server's own limits apply (a weight bucket is one message of
# WeightSync.bucket_bytes, which the server must accept).
_ADMIN_CHANNEL_OPTIONS = (
    ("grpc.max_send_message_length", -1),
    ("grpc.max_receive_message_length", -1),
)


def bearer_metadata(token: Optional[str], token_file: Optional[str]) -> Tuple[Tuple[str, str], ...]:
    """The `authorization: Bearer <token>` metadata of `token`, or of the first line of
    `token_file` (surrounding whitespace removed). Neither: no metadata (the server will answer
    UNAUTHENTICATED)."""
    if token is not None and token_file is not None:
        raise ValueError("give token or token_file, not both")
    if token_file is not None:
        with open(token_file, encoding="utf-8") as f:
            token = f.read().strip()
        if not token:
            raise ValueError(f"token_file {token_file!r} is empty")
    if token is None:
        return ()
    if not token or any(c.isspace() for c in token):
        raise ValueError("token must be non-empty and contain no whitespace")
    return (("authorization", f"Bearer {token}"),)


def _pause_request(mode: Union[PauseModeName, int]) -> apb.PauseRequest:
    return apb.PauseRequest(mode=apb.PauseMode.Name(enum_value("mode", mode, _PAUSE_MODES)))


def _distributed_request(
    group_name: str, manifest: apb.WeightManifest, bucket_bytes: int
) -> apb.UpdateWeightsFromDistributedRequest:
    return apb.UpdateWeightsFromDistributedRequest(
        group_name=group_name, manifest=manifest, bucket_bytes=bucket_bytes
    )


class AdminClient:
    """Blocking client of astr.v1.Admin; safe to share between threads.

    Args:
        address: host:port of the scheduler's admin port (--admin-listen).
        token: the admin token, sent as `authorization: Bearer <token>` on every call.
        token_file: a file holding the token instead (read once, here).
        timeout: default deadline of every call in seconds; None = no deadline. Each method's
            `timeout` overrides it for that call.
        credentials: TLS credentials; None = plaintext.
        options: further gRPC channel arguments.
    """

    def __init__(
        self,
        address: str,
        token: Optional[str] = None,
        token_file: Optional[str] = None,
        *,
        timeout: Optional[float] = None,
        credentials: Optional[grpc.ChannelCredentials] = None,
        options: ChannelOptions = (),
    ) -> None:
        self.address = address
        self.timeout = timeout
        self._metadata = bearer_metadata(token, token_file)
        self._channel = open_channel(address, credentials, _ADMIN_CHANNEL_OPTIONS + tuple(options))
        self._stub = apb_grpc.AdminStub(self._channel)  # type: ignore[no-untyped-call]

    def close(self) -> None:
        """Closes the channel; calls in progress are cancelled."""
        self._channel.close()

    def __enter__(self) -> "AdminClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, name: str, request: object, reply: Type[R], timeout: Optional[float]) -> R:
        rpc = getattr(self._stub, name)
        deadline = self.timeout if timeout is None else timeout
        return call_unary(rpc, _SERVICE + name, request, reply, deadline, self._metadata)

    def update_weights(
        self, requests: Iterable[apb.UpdateWeightsRequest], *, timeout: Optional[float] = None
    ) -> apb.UpdateWeightsResponse:
        """Streams an update: the manifest first, then buckets of chunks (WeightSync builds them
        from tensors). Returns when every worker serves the new version."""
        return self._call("UpdateWeights", iter(requests), apb.UpdateWeightsResponse, timeout)

    def begin_direct_update(
        self, timeout_ms: int = 0, *, timeout: Optional[float] = None
    ) -> apb.BeginDirectUpdateResponse:
        """Reserves an update over the direct route (WeightSync(transport="direct") does it all):
        returns the update id and the workers, each of which must stage it (Worker.StageWeights)
        before commit_direct_update. `timeout_ms`: how long the reservation holds (0 = 600 s)."""
        request = apb.BeginDirectUpdateRequest(timeout_ms=timeout_ms)
        return self._call("BeginDirectUpdate", request, apb.BeginDirectUpdateResponse, timeout)

    def update_weights_from_tensor(
        self, request: apb.UpdateWeightsFromTensorRequest, *, timeout: Optional[float] = None
    ) -> apb.UpdateWeightsResponse:
        """CUDA IPC: the manifest and the IPC handles of the buffers holding its tensors' bytes
        (WeightSync(transport="ipc") builds them); returns once every worker serves them."""
        return self._call("UpdateWeightsFromTensor", request, apb.UpdateWeightsResponse, timeout)

    def commit_direct_update(
        self, request: apb.CommitDirectUpdateRequest, *, timeout: Optional[float] = None
    ) -> apb.UpdateWeightsResponse:
        """Commits (or, with request.discard, drops) the stages of a direct update."""
        return self._call("CommitDirectUpdate", request, apb.UpdateWeightsResponse, timeout)

    def update_weights_from_disk(
        self, path: str, label: str = "", *, timeout: Optional[float] = None
    ) -> apb.UpdateWeightsResponse:
        """Every worker loads `path` (a .gguf file or a Hugging Face folder it can see), then all
        switch to it together."""
        request = apb.UpdateWeightsFromDiskRequest(path=path, label=label)
        return self._call("UpdateWeightsFromDisk", request, apb.UpdateWeightsResponse, timeout)

    def get_weight_version(
        self, *, timeout: Optional[float] = None
    ) -> apb.GetWeightVersionResponse:
        """The version being served, its label, when it started and whether generation is
        paused."""
        request = apb.GetWeightVersionRequest()
        return self._call("GetWeightVersion", request, apb.GetWeightVersionResponse, timeout)

    def get_weights_checksum(
        self, names: Optional[Sequence[str]] = None, *, timeout: Optional[float] = None
    ) -> apb.GetWeightsChecksumResponse:
        """XXH64 of the named tensors (None: every tensor) as every worker holds them."""
        request = apb.GetWeightsChecksumRequest(names=list(names or ()))
        return self._call("GetWeightsChecksum", request, apb.GetWeightsChecksumResponse, timeout)

    def pause(
        self, mode: Union[PauseModeName, int], *, timeout: Optional[float] = None
    ) -> apb.PauseResponse:
        """Pauses generation: "abort" ends running requests now, "drain" returns once they have
        finished, "keep" freezes them until resume(). New requests queue meanwhile."""
        return self._call("Pause", _pause_request(mode), apb.PauseResponse, timeout)

    def resume(self, *, timeout: Optional[float] = None) -> apb.ResumeResponse:
        """Resumes generation after pause() (a no-op when not paused)."""
        return self._call("Resume", apb.ResumeRequest(), apb.ResumeResponse, timeout)

    def flush_cache(self, *, timeout: Optional[float] = None) -> apb.FlushCacheResponse:
        """Drops cached KV; refused while requests run unless generation is paused."""
        request = apb.FlushCacheRequest()
        return self._call("FlushCache", request, apb.FlushCacheResponse, timeout)

    def drain_worker(
        self, address: str, *, drain_timeout_s: int = 0, timeout: Optional[float] = None
    ) -> apb.DrainWorkerResponse:
        """Drains one worker (no new sequences; running ones finish there for up to
        drain_timeout_s, 0 = the scheduler's --worker-drain-timeout-s, then move) and returns
        once it has left the pool."""
        request = apb.DrainWorkerRequest(address=address, timeout_s=drain_timeout_s)
        return self._call("DrainWorker", request, apb.DrainWorkerResponse, timeout)

    def init_weight_update_group(
        self,
        nccl_unique_id: bytes,
        world_size: int = 0,
        group_name: str = "",
        *,
        group_timeout_ms: int = 0,
        validate_only: bool = False,
        timeout: Optional[float] = None,
    ) -> apb.InitWeightUpdateGroupResponse:
        """Joins the workers to the trainer's NCCL group (the trainer is rank 0; world_size 0 =
        1 + the number of workers). The reply gives each worker's rank. The call returns once
        every rank joined, so the trainer's own ncclCommInitRank runs meanwhile (WeightSync with
        transport="nccl" does both). `validate_only` checks and answers the ranks without
        contacting the workers; `group_timeout_ms` bounds joining and each broadcast (0 = 300 s)."""
        request = apb.InitWeightUpdateGroupRequest(
            nccl_unique_id=nccl_unique_id, world_size=world_size, group_name=group_name,
            timeout_ms=group_timeout_ms, validate_only=validate_only,
        )
        return self._call(
            "InitWeightUpdateGroup", request, apb.InitWeightUpdateGroupResponse, timeout
        )

    def update_weights_from_distributed(
        self,
        group_name: str,
        manifest: apb.WeightManifest,
        bucket_bytes: int = 0,
        *,
        timeout: Optional[float] = None,
    ) -> apb.UpdateWeightsResponse:
        """The workers receive the manifest's tensors by NCCL broadcast from rank 0, in manifest
        order, in buckets of `bucket_bytes` (0 = the server's default), then commit. The trainer
        broadcasts while this call runs (WeightSync.manifest builds the manifest)."""
        request = _distributed_request(group_name, manifest, bucket_bytes)
        return self._call(
            "UpdateWeightsFromDistributed", request, apb.UpdateWeightsResponse, timeout
        )

    def destroy_weight_update_group(
        self, group_name: str, *, timeout: Optional[float] = None
    ) -> apb.DestroyWeightUpdateGroupResponse:
        """Tears the NCCL group down."""
        request = apb.DestroyWeightUpdateGroupRequest(group_name=group_name)
        return self._call(
            "DestroyWeightUpdateGroup", request, apb.DestroyWeightUpdateGroupResponse, timeout
        )

    def release_memory(
        self,
        tags: Optional[Sequence[str]] = None,
        *,
        keep_weights_on_host: bool = False,
        timeout: Optional[float] = None,
    ) -> apb.ReleaseMemoryResponse:
        """Frees device memory by tag ("kv_cache", "weights"; None = all) while generation is
        paused. Weights are discarded unless `keep_weights_on_host` (then resume_memory restores
        them); discarded weights must be updated before generation resumes."""
        request = apb.ReleaseMemoryRequest(
            tags=list(tags or ()), keep_weights_on_host=keep_weights_on_host)
        return self._call("ReleaseMemory", request, apb.ReleaseMemoryResponse, timeout)

    def resume_memory(
        self, tags: Optional[Sequence[str]] = None, *, timeout: Optional[float] = None
    ) -> apb.ResumeMemoryResponse:
        """Takes back what release_memory freed (None = all tags)."""
        request = apb.ResumeMemoryRequest(tags=list(tags or ()))
        return self._call("ResumeMemory", request, apb.ResumeMemoryResponse, timeout)


class AsyncAdminClient:
    """asyncio client of astr.v1.Admin (grpc.aio): AdminClient's methods, awaitable. Create it
    inside the event loop that uses it."""

    def __init__(
        self,
        address: str,
        token: Optional[str] = None,
        token_file: Optional[str] = None,
        *,
        timeout: Optional[float] = None,
        credentials: Optional[grpc.ChannelCredentials] = None,
        options: ChannelOptions = (),
    ) -> None:
        self.address = address
        self.timeout = timeout
        self._metadata = bearer_metadata(token, token_file)
        self._channel = open_aio_channel(
            address, credentials, _ADMIN_CHANNEL_OPTIONS + tuple(options)
        )
        self._stub = apb_grpc.AdminStub(self._channel)  # type: ignore[no-untyped-call]

    async def close(self) -> None:
        """Closes the channel; calls in progress are cancelled."""
        await self._channel.close(grace=None)

    async def __aenter__(self) -> "AsyncAdminClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _call(
        self, name: str, request: object, reply: Type[R], timeout: Optional[float]
    ) -> R:
        rpc = getattr(self._stub, name)
        deadline = self.timeout if timeout is None else timeout
        return await call_unary_async(rpc, _SERVICE + name, request, reply, deadline,
                                      self._metadata)

    async def update_weights(
        self,
        requests: Union[
            Iterable[apb.UpdateWeightsRequest], AsyncIterable[apb.UpdateWeightsRequest]
        ],
        *,
        timeout: Optional[float] = None,
    ) -> apb.UpdateWeightsResponse:
        """See AdminClient.update_weights; `requests` may be an async iterable."""
        return await self._call("UpdateWeights", requests, apb.UpdateWeightsResponse, timeout)

    async def update_weights_from_disk(
        self, path: str, label: str = "", *, timeout: Optional[float] = None
    ) -> apb.UpdateWeightsResponse:
        """See AdminClient.update_weights_from_disk."""
        request = apb.UpdateWeightsFromDiskRequest(path=path, label=label)
        return await self._call(
            "UpdateWeightsFromDisk", request, apb.UpdateWeightsResponse, timeout
        )

    async def get_weight_version(
        self, *, timeout: Optional[float] = None
    ) -> apb.GetWeightVersionResponse:
        """See AdminClient.get_weight_version."""
        request = apb.GetWeightVersionRequest()
        return await self._call("GetWeightVersion", request, apb.GetWeightVersionResponse, timeout)

    async def get_weights_checksum(
        self, names: Optional[Sequence[str]] = None, *, timeout: Optional[float] = None
    ) -> apb.GetWeightsChecksumResponse:
        """See AdminClient.get_weights_checksum."""
        request = apb.GetWeightsChecksumRequest(names=list(names or ()))
        return await self._call(
            "GetWeightsChecksum", request, apb.GetWeightsChecksumResponse, timeout
        )

    async def pause(
        self, mode: Union[PauseModeName, int], *, timeout: Optional[float] = None
    ) -> apb.PauseResponse:
        """See AdminClient.pause."""
        return await self._call("Pause", _pause_request(mode), apb.PauseResponse, timeout)

    async def resume(self, *, timeout: Optional[float] = None) -> apb.ResumeResponse:
        """See AdminClient.resume."""
        return await self._call("Resume", apb.ResumeRequest(), apb.ResumeResponse, timeout)

    async def flush_cache(self, *, timeout: Optional[float] = None) -> apb.FlushCacheResponse:
        """See AdminClient.flush_cache."""
        request = apb.FlushCacheRequest()
        return await self._call("FlushCache", request, apb.FlushCacheResponse, timeout)

    async def drain_worker(
        self, address: str, *, drain_timeout_s: int = 0, timeout: Optional[float] = None
    ) -> apb.DrainWorkerResponse:
        """See AdminClient.drain_worker."""
        request = apb.DrainWorkerRequest(address=address, timeout_s=drain_timeout_s)
        return await self._call("DrainWorker", request, apb.DrainWorkerResponse, timeout)

    async def init_weight_update_group(
        self,
        nccl_unique_id: bytes,
        world_size: int = 0,
        group_name: str = "",
        *,
        group_timeout_ms: int = 0,
        validate_only: bool = False,
        timeout: Optional[float] = None,
    ) -> apb.InitWeightUpdateGroupResponse:
        """See AdminClient.init_weight_update_group."""
        request = apb.InitWeightUpdateGroupRequest(
            nccl_unique_id=nccl_unique_id, world_size=world_size, group_name=group_name,
            timeout_ms=group_timeout_ms, validate_only=validate_only,
        )
        return await self._call(
            "InitWeightUpdateGroup", request, apb.InitWeightUpdateGroupResponse, timeout
        )

    async def update_weights_from_distributed(
        self,
        group_name: str,
        manifest: apb.WeightManifest,
        bucket_bytes: int = 0,
        *,
        timeout: Optional[float] = None,
    ) -> apb.UpdateWeightsResponse:
        """See AdminClient.update_weights_from_distributed."""
        request = _distributed_request(group_name, manifest, bucket_bytes)
        return await self._call(
            "UpdateWeightsFromDistributed", request, apb.UpdateWeightsResponse, timeout
        )

    async def destroy_weight_update_group(
        self, group_name: str, *, timeout: Optional[float] = None
    ) -> apb.DestroyWeightUpdateGroupResponse:
        """See AdminClient.destroy_weight_update_group."""
        request = apb.DestroyWeightUpdateGroupRequest(group_name=group_name)
        return await self._call(
            "DestroyWeightUpdateGroup", request, apb.DestroyWeightUpdateGroupResponse, timeout
        )

    async def release_memory(
        self,
        tags: Optional[Sequence[str]] = None,
        *,
        keep_weights_on_host: bool = False,
        timeout: Optional[float] = None,
    ) -> apb.ReleaseMemoryResponse:
        """See AdminClient.release_memory."""
        request = apb.ReleaseMemoryRequest(
            tags=list(tags or ()), keep_weights_on_host=keep_weights_on_host)
        return await self._call("ReleaseMemory", request, apb.ReleaseMemoryResponse, timeout)

    async def resume_memory(
        self, tags: Optional[Sequence[str]] = None, *, timeout: Optional[float] = None
    ) -> apb.ResumeMemoryResponse:
        """See AdminClient.resume_memory."""
        request = apb.ResumeMemoryRequest(tags=list(tags or ()))
        return await self._call("ResumeMemory", request, apb.ResumeMemoryResponse, timeout)
