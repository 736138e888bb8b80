"""The one exception type of the SDK's RPCs: AstrError, carrying the server's gRPC status."""

from __future__ import annotations

from typing import Optional

import grpc


class AstrError(Exception):
    """An RPC failed: the server's (or gRPC's) status code and message, unchanged.

    Raised by every RPC method of the SDK's clients in place of grpc.RpcError, which stays
    available as `__cause__`. Invalid arguments that the SDK detects
    before sending raise ValueError or TypeError instead.

    Attributes:
        code: the gRPC status code, e.g. grpc.StatusCode.INVALID_ARGUMENT.
        message: the status message (astr's messages name the offending field and value).
        method: the RPC, e.g. "/astr.v1.Admin/Pause".
    """

    def __init__(self, code: grpc.StatusCode, message: str, method: str = "") -> None:
        self.code = code
        self.message = message
        self.method = method
        where = f" ({method})" if method else ""
        super().__init__(f"{code.name}: {message}{where}")

    @classmethod
    def from_rpc(cls, error: grpc.RpcError, method: str = "") -> "AstrError":
        """The AstrError of a grpc.RpcError raised by a call (sync or asyncio)."""
        code: Optional[grpc.StatusCode] = None
        message = ""
        if callable(getattr(error, "code", None)):
            code = error.code()
        if callable(getattr(error, "details", None)):
            message = error.details() or ""
        return cls(code or grpc.StatusCode.UNKNOWN, message or str(error), method)
