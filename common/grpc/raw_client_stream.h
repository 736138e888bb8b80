// Serving a client-streaming method of a generated sync service from the bytes gRPC received
// (grpc::ByteBuffer messages) instead of protobuf objects: the worker's StageWeights and the
// scheduler's UpdateWeights (raw_update_message.h). In the service's constructor:
//
//   MarkMethodStreamed(ClientStreamIndex("astr.v1.Worker", "StageWeights"),
//                      RawClientStreamHandler(this, &WorkerService::StageWeightsRaw));
//
// Marked "streamed", the server treats the method as a bidi stream, which differs from a client
// stream only on the client's side. The generated typed handler is then never called.
#pragma once

#include <google/protobuf/descriptor.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/method_handler.h>

#include "common/base/logging.h"

namespace astr::rpc {

// The index of client-streaming `method` of `service` ("astr.v1.Worker") among the generated
// service's methods: they are in the proto's order, which is the descriptor's.
inline int ClientStreamIndex(const char* service, const char* method) {
  const google::protobuf::ServiceDescriptor* s =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(service);
  CHECK(s != nullptr) << service;
  const google::protobuf::MethodDescriptor* m = s->FindMethodByName(method);
  CHECK(m != nullptr && m->client_streaming() && !m->server_streaming()) << method;
  return m->index();
}

// A handler calling `service->*fn` with the stream's messages as received bytes.
template <class Service, class Response>
grpc::internal::MethodHandler* RawClientStreamHandler(
    Service* service,
    grpc::Status (Service::*fn)(grpc::ServerContext*, grpc::ServerReader<grpc::ByteBuffer>*,
                                Response*)) {
  return new grpc::internal::ClientStreamingHandler<Service, grpc::ByteBuffer, Response>(
      [fn](Service* s, grpc::ServerContext* ctx, grpc::ServerReader<grpc::ByteBuffer>* reader,
           Response* response) { return (s->*fn)(ctx, reader, response); },
      service);
}

}  // namespace astr::rpc
