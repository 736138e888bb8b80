"""Python SDK of the astr inference server.

- astr.v1: the generated protobuf / gRPC modules (generate_pb2, admin_pb2, ...), built from
  protos/astr/v1 when the package is built.
"""

from . import v1

__version__ = "0.1.0"

__all__ = ["v1"]
