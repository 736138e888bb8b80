"""Generated gRPC and protobuf modules of the astr.v1 protos (admin_pb2, generate_pb2, worker_pb2
and their _pb2_grpc services). They are generated from protos/astr/v1 when the package is built and
are not in the source tree; see sdk/python/README.md."""
