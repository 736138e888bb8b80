"""Clients of astr.v1.Generate, the public API: Client (blocking) and AsyncClient (asyncio).

    with astr.Client("127.0.0.1:50051", timeout=60) as client:
        reply = client.generate("Once upon a time", max_tokens=32, temperature=0)
        print(reply.completions[0].text)
        for chunk in client.generate_stream([{"role": "user", "content": "Hi"}], max_tokens=32):
            print(chunk.text, end="")

Replies are the astr.v1 response messages themselves (generate.proto documents every field).
Failed RPCs raise AstrError.
"""

from __future__ import annotations

from typing import (
    TYPE_CHECKING,
    Any,
    Generic,
    Iterable,
    Optional,
    Sequence,
    Tuple,
    Type,
    TypeVar,
    cast,
)

import grpc
import grpc.aio

from .errors import AstrError
from .inputs import Prompt, TokenizeInput, generate_request, tokenize_request
from .v1 import generate_pb2 as pb
from .v1 import generate_pb2_grpc as pb_grpc

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .inputs import ChatOptions, GenerateOptions

T = TypeVar("T")
R = TypeVar("R")
# gRPC channel arguments, e.g. [("grpc.max_receive_message_length", 64 << 20)].
ChannelOptions = Sequence[Tuple[str, Any]]

_SERVICE = "/astr.v1.Generate/"


def open_channel(
    address: str, credentials: Optional[grpc.ChannelCredentials], options: ChannelOptions
) -> grpc.Channel:
    """A blocking channel to `address`: TLS with `credentials`, else plaintext."""
    if credentials is not None:
        return grpc.secure_channel(address, credentials, options=list(options))
    return grpc.insecure_channel(address, options=list(options))


def open_aio_channel(
    address: str, credentials: Optional[grpc.ChannelCredentials], options: ChannelOptions
) -> grpc.aio.Channel:
    """An asyncio channel to `address`: TLS with `credentials`, else plaintext."""
    if credentials is not None:
        return grpc.aio.secure_channel(address, credentials, options=list(options))
    return grpc.aio.insecure_channel(address, options=list(options))


class ResponseStream(Generic[T]):
    """The messages of a server-streaming call, in order; a failure raises AstrError.

    Iterating ends when the server closes the stream. `cancel()` (or leaving a `with` block)
    cancels the call: the server stops generating.
    """

    def __init__(self, call: Any, method: str) -> None:
        self._call = call
        self._method = method

    def __iter__(self) -> "ResponseStream[T]":
        return self

    def __next__(self) -> T:
        try:
            return next(self._call)  # type: ignore[no-any-return]
        except grpc.RpcError as e:
            raise AstrError.from_rpc(e, self._method) from e

    def cancel(self) -> None:
        """Cancels the call (a no-op once it has ended)."""
        self._call.cancel()

    def __enter__(self) -> "ResponseStream[T]":
        return self

    def __exit__(self, *exc: object) -> None:
        self.cancel()


class AsyncResponseStream(Generic[T]):
    """The messages of an asyncio server-streaming call, for `async for`; see ResponseStream."""

    def __init__(self, call: Any, method: str) -> None:
        self._call = call
        self._method = method

    def __aiter__(self) -> "AsyncResponseStream[T]":
        return self

    async def __anext__(self) -> T:
        try:
            message = await self._call.read()
        except grpc.RpcError as e:
            raise AstrError.from_rpc(e, self._method) from e
        if message is grpc.aio.EOF:  # type: ignore[attr-defined]
            raise StopAsyncIteration
        return message  # type: ignore[no-any-return]

    def cancel(self) -> None:
        """Cancels the call (a no-op once it has ended)."""
        self._call.cancel()

    async def __aenter__(self) -> "AsyncResponseStream[T]":
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.cancel()


def call_unary(
    rpc: Any,
    method: str,
    request: Any,
    reply: Type[R],
    timeout: Optional[float],
    metadata: Sequence[Tuple[str, str]] = (),
) -> R:
    """Runs one blocking unary (or stream-unary) call whose reply is a `reply`, raising AstrError
    on failure."""
    try:
        return cast(R, rpc(request, timeout=timeout, metadata=tuple(metadata)))
    except grpc.RpcError as e:
        raise AstrError.from_rpc(e, method) from e


async def call_unary_async(
    rpc: Any,
    method: str,
    request: Any,
    reply: Type[R],
    timeout: Optional[float],
    metadata: Sequence[Tuple[str, str]] = (),
) -> R:
    """Runs one asyncio unary (or stream-unary) call whose reply is a `reply`, raising AstrError
    on failure."""
    try:
        return cast(R, await rpc(request, timeout=timeout, metadata=tuple(metadata)))
    except grpc.RpcError as e:
        raise AstrError.from_rpc(e, method) from e


class Client:
    """Blocking client of astr.v1.Generate on one channel; safe to share between threads.

    Args:
        address: host:port of astr-scheduler's public port (or any gRPC target).
        timeout: default deadline of every call in seconds; None = no deadline. Each method's
            `timeout` overrides it for that call.
        credentials: TLS credentials; None = plaintext.
        options: gRPC channel arguments.
    """

    def __init__(
        self,
        address: str,
        *,
        timeout: Optional[float] = None,
        credentials: Optional[grpc.ChannelCredentials] = None,
        options: ChannelOptions = (),
    ) -> None:
        self.address = address
        self.timeout = timeout
        self._channel = open_channel(address, credentials, options)
        self._stub = pb_grpc.GenerateStub(self._channel)  # type: ignore[no-untyped-call]

    def close(self) -> None:
        """Closes the channel; calls in progress are cancelled."""
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _timeout(self, timeout: Optional[float]) -> Optional[float]:
        return self.timeout if timeout is None else timeout

    def generate(
        self, prompt: Prompt, *, timeout: Optional[float] = None, **options: Unpack[GenerateOptions]
    ) -> pb.GenerateResponse:
        """Generates every sample of `prompt` and returns them when all have finished.

        `prompt`: text, token ids, or chat messages ({"role": ..., "content": ...}). `options`:
        the SamplingParameters and GenerateRequest fields by name (temperature, top_p, top_k,
        max_tokens, seed, stop, return_logprobs, top_logprobs, logprobs_mode="raw"|"processed",
        return_sampling_mask, n, logprob_start, kv_on_weight_update="recompute"|"reuse", ...; see
        GenerateOptions). With return_sampling_mask=True each completion's `sampling_masks` holds
        one SamplingMask per token (sampling_mask_ids expands one).
        """
        request = generate_request(prompt, **options)
        return call_unary(self._stub.Generate, _SERVICE + "Generate", request,
                          pb.GenerateResponse, self._timeout(timeout))

    def generate_stream(
        self, prompt: Prompt, *, timeout: Optional[float] = None, **options: Unpack[GenerateOptions]
    ) -> ResponseStream[pb.GenerateStreamResponse]:
        """Starts generating and returns the stream of new output per sample (arguments as in
        generate). Each message carries one sample's `index`; a sample's last message has its
        finish_reason, the request's last one also usage and timings."""
        request = generate_request(prompt, **options)
        method = _SERVICE + "GenerateStream"
        try:
            call = self._stub.GenerateStream(request, timeout=self._timeout(timeout))
        except grpc.RpcError as e:
            raise AstrError.from_rpc(e, method) from e
        return ResponseStream(call, method)

    def tokenize(
        self,
        input: TokenizeInput,
        *,
        add_special_tokens: Optional[bool] = None,
        parse_special_tokens: Optional[bool] = None,
        timeout: Optional[float] = None,
        **chat: Unpack[ChatOptions],
    ) -> pb.TokenizeResponse:
        """Token ids (and their vocabulary strings) of text, or of chat messages rendered with the
        model's chat template (then `rendered_prompt` holds the rendered text)."""
        request = tokenize_request(
            input, add_special_tokens=add_special_tokens,
            parse_special_tokens=parse_special_tokens, **chat
        )
        return call_unary(self._stub.Tokenize, _SERVICE + "Tokenize", request,
                          pb.TokenizeResponse, self._timeout(timeout))

    def detokenize(
        self,
        token_ids: Iterable[int],
        *,
        skip_special_tokens: Optional[bool] = None,
        timeout: Optional[float] = None,
    ) -> str:
        """The text of `token_ids` (special tokens left out unless skip_special_tokens=False)."""
        request = _detokenize_request(token_ids, skip_special_tokens)
        reply = call_unary(self._stub.Detokenize, _SERVICE + "Detokenize", request,
                           pb.DetokenizeResponse, self._timeout(timeout))
        return reply.text

    def model_info(self, *, timeout: Optional[float] = None) -> pb.GetModelInfoResponse:
        """The served model, the scheduler's limits and its workers."""
        return call_unary(self._stub.GetModelInfo, _SERVICE + "GetModelInfo",
                          pb.GetModelInfoRequest(), pb.GetModelInfoResponse, self._timeout(timeout))

    def server_stats(self, *, timeout: Optional[float] = None) -> pb.GetServerStatsResponse:
        """Live counters of the scheduler and of every worker's KV pool."""
        return call_unary(self._stub.GetServerStats, _SERVICE + "GetServerStats",
                          pb.GetServerStatsRequest(), pb.GetServerStatsResponse,
                          self._timeout(timeout))


class AsyncClient:
    """asyncio client of astr.v1.Generate (grpc.aio); the same methods as Client, awaitable.

    Create it inside the event loop that uses it (grpc.aio channels belong to one loop).
    `generate_stream` is not awaited: it returns an AsyncResponseStream for `async for`.
    """

    def __init__(
        self,
        address: str,
        *,
        timeout: Optional[float] = None,
        credentials: Optional[grpc.ChannelCredentials] = None,
        options: ChannelOptions = (),
    ) -> None:
        self.address = address
        self.timeout = timeout
        self._channel = open_aio_channel(address, credentials, options)
        self._stub = pb_grpc.GenerateStub(self._channel)  # type: ignore[no-untyped-call]

    async def close(self) -> None:
        """Closes the channel; calls in progress are cancelled."""
        await self._channel.close(grace=None)

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _timeout(self, timeout: Optional[float]) -> Optional[float]:
        return self.timeout if timeout is None else timeout

    async def generate(
        self, prompt: Prompt, *, timeout: Optional[float] = None, **options: Unpack[GenerateOptions]
    ) -> pb.GenerateResponse:
        """See Client.generate."""
        request = generate_request(prompt, **options)
        return await call_unary_async(self._stub.Generate, _SERVICE + "Generate", request,
                                      pb.GenerateResponse, self._timeout(timeout))

    def generate_stream(
        self, prompt: Prompt, *, timeout: Optional[float] = None, **options: Unpack[GenerateOptions]
    ) -> AsyncResponseStream[pb.GenerateStreamResponse]:
        """See Client.generate_stream; iterate the result with `async for`."""
        request = generate_request(prompt, **options)
        call = self._stub.GenerateStream(request, timeout=self._timeout(timeout))
        return AsyncResponseStream(call, _SERVICE + "GenerateStream")

    async def tokenize(
        self,
        input: TokenizeInput,
        *,
        add_special_tokens: Optional[bool] = None,
        parse_special_tokens: Optional[bool] = None,
        timeout: Optional[float] = None,
        **chat: Unpack[ChatOptions],
    ) -> pb.TokenizeResponse:
        """See Client.tokenize."""
        request = tokenize_request(
            input, add_special_tokens=add_special_tokens,
            parse_special_tokens=parse_special_tokens, **chat
        )
        return await call_unary_async(self._stub.Tokenize, _SERVICE + "Tokenize", request,
                                      pb.TokenizeResponse, self._timeout(timeout))

    async def detokenize(
        self,
        token_ids: Iterable[int],
        *,
        skip_special_tokens: Optional[bool] = None,
        timeout: Optional[float] = None,
    ) -> str:
        """See Client.detokenize."""
        request = _detokenize_request(token_ids, skip_special_tokens)
        reply = await call_unary_async(self._stub.Detokenize, _SERVICE + "Detokenize", request,
                                       pb.DetokenizeResponse, self._timeout(timeout))
        return reply.text

    async def model_info(self, *, timeout: Optional[float] = None) -> pb.GetModelInfoResponse:
        """See Client.model_info."""
        return await call_unary_async(self._stub.GetModelInfo, _SERVICE + "GetModelInfo",
                                      pb.GetModelInfoRequest(), pb.GetModelInfoResponse,
                                      self._timeout(timeout))

    async def server_stats(self, *, timeout: Optional[float] = None) -> pb.GetServerStatsResponse:
        """See Client.server_stats."""
        return await call_unary_async(self._stub.GetServerStats, _SERVICE + "GetServerStats",
                                      pb.GetServerStatsRequest(), pb.GetServerStatsResponse,
                                      self._timeout(timeout))


def _detokenize_request(
    token_ids: Iterable[int], skip_special_tokens: Optional[bool]
) -> pb.DetokenizeRequest:
    request = pb.DetokenizeRequest(token_ids=[int(t) for t in token_ids])
    if skip_special_tokens is not None:
        request.skip_special_tokens = skip_special_tokens
    return request
