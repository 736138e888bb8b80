"""Python SDK of the astr inference server.

- Client / AsyncClient: astr.v1.Generate (generate, generate_stream, tokenize, detokenize,
  model_info, server_stats).
- AdminClient / AsyncAdminClient: astr.v1.Admin (weight updates, versions, pause / resume, cache,
  memory), with the bearer token on every call.
- WeightSync: streams a trainer's tensors as one versioned weight update (needs numpy; xxhash for
  checksums).
- AstrError: what every failed RPC raises (gRPC code and message).
- sampling_mask_ids: the token ids of a SamplingMask (return_sampling_mask; docs/rl.md).
- astr.v1: the generated protobuf / gRPC modules (generate_pb2, admin_pb2, ...).
"""

from typing import TYPE_CHECKING, Any

from . import v1
from .admin import AdminClient, AsyncAdminClient, PauseModeName
from .client import AsyncClient, AsyncResponseStream, Client, ResponseStream
from .errors import AstrError
from .inputs import GenerateOptions, Prompt, SamplingOptions, generate_request, tokenize_request
from .outputs import sampling_mask_ids

if TYPE_CHECKING:
    from .weights import WeightSync

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
    "WeightSync",
    "generate_request",
    "sampling_mask_ids",
    "tokenize_request",
    "v1",
]


def __getattr__(name: str) -> Any:
    # WeightSync needs numpy, which the clients do not: import it on first use only.
    if name == "WeightSync":
        from .weights import WeightSync

        return WeightSync
    raise AttributeError(f"module 'astr' has no attribute {name!r}")
