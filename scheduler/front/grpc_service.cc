#include "scheduler/front/grpc_service.h"

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/slice.h>
#include <grpcpp/impl/rpc_service_method.h>
#include <grpcpp/support/method_handler.h>

#include <memory>
#include <string_view>

#include "astr/v1/generate.grpc.pb.h"
#include "common/service/grpc_status.h"
#include "scheduler/front/utf8_check.h"

namespace astr::front {
namespace {

using grpc::internal::MethodHandler;
using grpc::internal::RpcMethod;
using grpc::internal::RpcServiceMethod;

// Wraps the handler of one method: checks the request's strings on the raw bytes, then lets the
// wrapped handler parse and run as usual.
template <typename Request>
class Utf8CheckedHandler final : public MethodHandler {
 public:
  explicit Utf8CheckedHandler(MethodHandler* inner) : inner_(inner) {}

  void RunHandler(const HandlerParameter& param) override { inner_->RunHandler(param); }

  void* Deserialize(grpc_call* call, grpc_byte_buffer* req, grpc::Status* status,
                    void** handler_data) override {
    if (req != nullptr) {
      Status bad = CheckWireUtf8(*Request::descriptor(), ReadAll(req));
      if (!bad.ok()) {
        grpc_byte_buffer_destroy(req);
        *status = ToGrpcStatus(bad);
        return nullptr;
      }
    }
    void* parsed = inner_->Deserialize(call, req, status, handler_data);
    if (!status->ok()) {
      *status = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                             "the request is not a valid " + Request::descriptor()->full_name() +
                                 " message (" + status->error_message() + ")");
    }
    return parsed;
  }

 private:
  // The request's bytes (decompressed); `req` itself is left untouched for the parser.
  static std::string ReadAll(grpc_byte_buffer* req) {
    grpc_byte_buffer_reader reader;
    if (!grpc_byte_buffer_reader_init(&reader, req)) return {};
    grpc_slice all = grpc_byte_buffer_reader_readall(&reader);
    std::string bytes(reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(all)),
                      GRPC_SLICE_LENGTH(all));
    grpc_slice_unref(all);
    grpc_byte_buffer_reader_destroy(&reader);
    return bytes;
  }

  std::unique_ptr<MethodHandler> inner_;
};

template <typename Request, typename Response>
MethodHandler* Unary(GenerateService* impl,
                     grpc::Status (GenerateService::*method)(grpc::ServerContext*, const Request*,
                                                             Response*)) {
  return new grpc::internal::RpcMethodHandler<
      GenerateService, Request, Response, grpc::protobuf::MessageLite, grpc::protobuf::MessageLite>(
      [method](GenerateService* s, grpc::ServerContext* c, const Request* req, Response* resp) {
        return (s->*method)(c, req, resp);
      },
      impl);
}

}  // namespace

const char* GenerateGrpcService::MethodPath(const std::string& method) {
  paths_.push_back("/" + std::string(v1::Generate::service_full_name()) + "/" + method);
  return paths_.back().c_str();
}

GenerateGrpcService::GenerateGrpcService(GenerateService* impl) {
  // Same names, kinds and order as the generated Generate::Service.
  AddMethod(new RpcServiceMethod(
      MethodPath("Generate"), RpcMethod::NORMAL_RPC,
      new Utf8CheckedHandler<v1::GenerateRequest>(Unary(impl, &GenerateService::Generate))));
  AddMethod(new RpcServiceMethod(
      MethodPath("GenerateStream"), RpcMethod::SERVER_STREAMING,
      new Utf8CheckedHandler<v1::GenerateRequest>(
          new grpc::internal::ServerStreamingHandler<GenerateService, v1::GenerateRequest,
                                                     v1::GenerateStreamResponse>(
              [](GenerateService* s, grpc::ServerContext* c, const v1::GenerateRequest* req,
                 grpc::ServerWriter<v1::GenerateStreamResponse>* writer) {
                return s->GenerateStream(c, req, writer);
              },
              impl))));
  AddMethod(new RpcServiceMethod(
      MethodPath("Tokenize"), RpcMethod::NORMAL_RPC,
      new Utf8CheckedHandler<v1::TokenizeRequest>(Unary(impl, &GenerateService::Tokenize))));
  AddMethod(new RpcServiceMethod(
      MethodPath("Detokenize"), RpcMethod::NORMAL_RPC,
      new Utf8CheckedHandler<v1::DetokenizeRequest>(Unary(impl, &GenerateService::Detokenize))));
  AddMethod(new RpcServiceMethod(MethodPath("GetModelInfo"), RpcMethod::NORMAL_RPC,
                                 new Utf8CheckedHandler<v1::GetModelInfoRequest>(
                                     Unary(impl, &GenerateService::GetModelInfo))));
  AddMethod(new RpcServiceMethod(MethodPath("GetServerStats"), RpcMethod::NORMAL_RPC,
                                 new Utf8CheckedHandler<v1::GetServerStatsRequest>(
                                     Unary(impl, &GenerateService::GetServerStats))));
}

}  // namespace astr::front
