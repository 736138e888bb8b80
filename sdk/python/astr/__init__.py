"""Python SDK of the astr inference server.

- Client / AsyncClient: astr.v1.Generate (generate, generate_stream, tokenize, detokenize,
  model_info, server_stats).
- AdminClient / AsyncAdminClient: astr.v1.Admin (weight updates, versions, pause / resume, cache,
  memory), with the bearer token on every call.
- AstrError: what every failed RPC raises (gRPC code and message).
- astr.v1: the generated protobuf / gRPC modules (generate_pb2, admin_pb2, ...).
"""

from . import v1
from .admin import AdminClient, AsyncAdminClient, PauseModeName
from .client import AsyncClient, AsyncResponseStream, Client, ResponseStream
from .errors import AstrError
from .inputs import GenerateOptions, Prompt, SamplingOptions, generate_request, tokenize_request

__version__ = "0.1.0"

__all__ = [
    "AdminClient",
    "AstrError",
    "AsyncAdminClient",
    "AsyncClient",
    "AsyncResponseStream",
    "Client",
    "GenerateOptions",
    "PauseModeName",
    "Prompt",
    "ResponseStream",
    "SamplingOptions",
    "generate_request",
    "tokenize_request",
    "v1",
]

