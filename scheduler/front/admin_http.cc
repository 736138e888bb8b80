#include "scheduler/front/admin_http.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <nlohmann/json.hpp>
#include <string_view>
#include <utility>

#include "common/base/logging.h"
#include "scheduler/admin_controller.h"
#include "scheduler/front/torch_rendezvous.h"

namespace astr::front {
namespace {

using json = nlohmann::json;

AdminHttp::Reply JsonReply(int status, const json& body) {
  return {.status = status, .body = body.dump()};
}

// SGLang's failure shape: {"success": false, "message": ...}.
AdminHttp::Reply Failure(int status, const std::string& message) {
  return JsonReply(status, {{"success", false}, {"message", message}});
}

int HttpStatusOf(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::NOT_FOUND:
      return 400;
    case grpc::StatusCode::UNAUTHENTICATED:
      return 401;
    case grpc::StatusCode::PERMISSION_DENIED:
      return 403;
    case grpc::StatusCode::ABORTED:
      return 409;
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return 429;
    case grpc::StatusCode::UNAVAILABLE:
      return 503;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return 504;
    default:
      return 500;
  }
}

// The JSON object of a request body; an empty body is {}.
StatusOr<json> BodyObject(const http::Request& r) {
  if (r.body.empty()) return json::object();
  json body = json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return InvalidArgumentError("the body is not valid JSON");
  if (!body.is_object()) return InvalidArgumentError("the body must be a JSON object");
  return body;
}

// Field `name` of `body` as a string (absent: `fallback`); the error names the field.
StatusOr<std::string> StringField(const json& body, const char* name, std::string fallback) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return fallback;
  if (!it->is_string()) return InvalidArgumentError(std::string(name) + ": must be a string");
  return it->get<std::string>();
}

// Standard base64 (with padding) to bytes; the error names `field`.
StatusOr<std::string> Base64Field(const std::string& text, const char* field) {
  if (text.empty() || text.size() % 4 != 0) {
    return InvalidArgumentError(std::string(field) + ": not base64 (length " +
                                std::to_string(text.size()) + ")");
  }
  std::string out(text.size() / 4 * 3, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(text.data()),
                                static_cast<int>(text.size()));
  if (n < 0) return InvalidArgumentError(std::string(field) + ": not base64");
  size_t pad = 0;
  while (pad < 2 && text[text.size() - 1 - pad] == '=') ++pad;
  out.resize(static_cast<size_t>(n) - pad);
  return out;
}

// The query's parameters, percent-decoded ('+' is a space).
std::map<std::string, std::string> QueryParams(const std::string& query) {
  auto decode = [](std::string_view in) {
    std::string out;
    for (size_t i = 0; i < in.size(); ++i) {
      if (in[i] == '+') {
        out += ' ';
      } else if (in[i] == '%' && i + 2 < in.size() &&
                 std::isxdigit(static_cast<unsigned char>(in[i + 1])) &&
                 std::isxdigit(static_cast<unsigned char>(in[i + 2]))) {
        out += static_cast<char>(std::stoi(std::string(in.substr(i + 1, 2)), nullptr, 16));
        i += 2;
      } else {
        out += in[i];
      }
    }
    return out;
  };
  std::map<std::string, std::string> params;
  std::string_view rest = query;
  while (!rest.empty()) {
    const size_t amp = rest.find('&');
    const std::string_view pair = rest.substr(0, amp);
    rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
    if (pair.empty()) continue;
    const size_t eq = pair.find('=');
    params[decode(pair.substr(0, eq))] =
        eq == std::string_view::npos ? "" : decode(pair.substr(eq + 1));
  }
  return params;
}

// A boolean query parameter as FastAPI reads one (true/false, 1/0, yes/no, on/off).
StatusOr<bool> QueryBool(const std::map<std::string, std::string>& params, const char* name,
                         bool fallback) {
  auto it = params.find(name);
  if (it == params.end()) return fallback;
  std::string v = it->second;
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  if (v == "true" || v == "1" || v == "yes" || v == "on") return true;
  if (v == "false" || v == "0" || v == "no" || v == "off") return false;
  return InvalidArgumentError(std::string(name) + ": expected a boolean, got '" + it->second + "'");
}

// vLLM's failure shape: {"error": ...}.
AdminHttp::Reply VllmError(int status, const std::string& message) {
  return JsonReply(status, {{"error", message}});
}

StatusOr<bool> BoolField(const json& body, const char* name, bool fallback) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return InvalidArgumentError(std::string(name) + ": must be true or false");
  return it->get<bool>();
}

}  // namespace

AdminHttp::AdminHttp(AdminService* admin, sched::Scheduler* scheduler, http::ServerOptions options)
    : admin_(admin), scheduler_(scheduler), options_(std::move(options)) {}

AdminHttp::~AdminHttp() { Stop(); }

Status AdminHttp::Start() {
  pool_ = std::make_unique<TaskPool>(2);
  auto server = http::Server::Start(
      options_, [this](std::shared_ptr<http::Exchange> ex) { Handle(std::move(ex)); });
  if (!server.ok()) return server.status();
  server_ = std::move(*server);
  return OkStatus();
}

int AdminHttp::port() const { return server_ ? server_->port() : 0; }

Status AdminHttp::ReloadTls() { return server_ ? server_->ReloadTls() : OkStatus(); }

void AdminHttp::Stop() {
  if (server_ != nullptr) server_->Stop(std::chrono::milliseconds(2000));
  pool_.reset();  // runs what is queued, joins
}

void AdminHttp::Handle(std::shared_ptr<http::Exchange> exchange) {
  // The token as `Authorization: Bearer <token>`, or (as SGLang also takes it) `X-API-Key`.
  const http::Request& req = exchange->request();
  const std::string* authorization = req.Header("authorization");
  std::string from_api_key;
  if (authorization == nullptr) {
    if (const std::string* key = req.Header("x-api-key"); key != nullptr) {
      from_api_key = "Bearer " + *key;
      authorization = &from_api_key;
    }
  }
  const grpc::Status auth = admin_->AuthorizeValue(authorization);
  if (!auth.ok()) {
    const Reply r = Failure(HttpStatusOf(auth.error_code()), auth.error_message());
    http::Response response{.status = r.status, .body = r.body};
    if (r.status == 401) response.headers.push_back({"WWW-Authenticate", "Bearer"});
    exchange->Respond(std::move(response));
    return;
  }
  pool_->Post([this, exchange] {
    Reply r = Route(exchange->request());
    exchange->Respond({.status = r.status, .content_type = r.content_type, .body = r.body});
  });
}

AdminHttp::Reply AdminHttp::Route(const http::Request& request) {
  const std::string& path = request.path;
  const bool post = request.method == "POST";
  auto body = BodyObject(request);
  if (!body.ok()) return Failure(400, std::string(body.status().message()));

  if (path == "/update_weights_from_disk") {
    if (!post) return Failure(405, "use POST");
    auto model_path = StringField(*body, "model_path", "");
    if (!model_path.ok()) return Failure(400, std::string(model_path.status().message()));
    if (model_path->empty()) return Failure(400, "model_path: required");
    auto label = StringField(*body, "weight_version", "");
    if (!label.ok()) return Failure(400, std::string(label.status().message()));
    auto abort_all = BoolField(*body, "abort_all_requests", false);
    if (!abort_all.ok()) return Failure(400, std::string(abort_all.status().message()));
    int32_t aborted = 0;
    // SGLang aborts what runs and serves on afterwards: a pause in abort mode, resumed below
    // unless generation was paused before (then it stays paused, now in abort mode).
    const bool was_paused = scheduler_->weight_version().paused != sched::PauseMode::kNone;
    if (*abort_all) {
      auto paused = scheduler_->Pause(sched::PauseMode::kAbort, sched::Clock::time_point::max());
      if (!paused.ok()) return Failure(500, std::string(paused.status().message()));
      aborted = paused->aborted;
    }
    v1::UpdateWeightsFromDiskRequest r;
    r.set_path(*model_path);
    r.set_label(*label);
    v1::UpdateWeightsResponse response;
    const grpc::Status s = admin_->UpdateFromDisk(r, &response);
    if (*abort_all && !was_paused) scheduler_->Resume();
    if (!s.ok()) {
      return JsonReply(
          HttpStatusOf(s.error_code()),
          {{"success", false}, {"message", s.error_message()}, {"num_paused_requests", aborted}});
    }
    LOG(INFO) << "admin http: weights from " << *model_path << " serve as version "
              << response.version();
    return JsonReply(200, {{"success", true},
                           {"message", "Succeeded to update model weights (version " +
                                           std::to_string(response.version()) + ")."},
                           {"num_paused_requests", aborted}});
  }
  if (path == "/model_info" || path == "/get_model_info") {
    const sched::WeightVersionInfo v = scheduler_->weight_version();
    const std::vector<v1::InfoResponse> infos = scheduler_->WorkerInfos();
    const std::string model = infos.empty() ? "" : infos[0].model_path();
    return JsonReply(200,
                     {{"model_path", model},
                      {"tokenizer_path", model},
                      {"is_generation", true},
                      {"weight_version", v.label.empty() ? std::to_string(v.version) : v.label}});
  }
  if (path == "/get_weight_version") {
    const sched::WeightVersionInfo v = scheduler_->weight_version();
    // SGLang's weight_version is a string a trainer sets with each update; astr's is the label
    // of the update when it had one, else the version number.
    return JsonReply(200,
                     {{"weight_version", v.label.empty() ? std::to_string(v.version) : v.label}});
  }
  if (path == "/pause_generation") {
    if (!post) return Failure(405, "use POST");
    auto mode_name = StringField(*body, "mode", "abort");
    if (!mode_name.ok()) return Failure(400, std::string(mode_name.status().message()));
    sched::PauseMode mode;
    if (*mode_name == "abort") {
      mode = sched::PauseMode::kAbort;
    } else if (*mode_name == "retract" || *mode_name == "in_place") {
      // Both keep running requests and continue them on /continue_generation with identical
      // tokens; astr keeps their KV in either case (a retract would recompute it exactly).
      mode = sched::PauseMode::kKeep;
    } else {
      return Failure(
          400, "mode: expected \"abort\", \"retract\" or \"in_place\", got \"" + *mode_name + "\"");
    }
    auto paused = scheduler_->Pause(mode, sched::Clock::time_point::max());
    if (!paused.ok()) return Failure(500, std::string(paused.status().message()));
    return JsonReply(200, {{"message", "Generation paused successfully."},
                           {"status", "ok"},
                           {"mode", *mode_name},
                           {"aborted", paused->aborted},
                           {"frozen", paused->frozen}});
  }
  if (path == "/continue_generation") {
    if (!post) return Failure(405, "use POST");
    if (grpc::Status allowed = admin_->ResumeAllowed(); !allowed.ok()) {
      return Failure(HttpStatusOf(allowed.error_code()), allowed.error_message());
    }
    const sched::ResumeResult r = scheduler_->Resume();
    return JsonReply(200, {{"message", "Generation continued successfully."},
                           {"status", "ok"},
                           {"was_paused", r.was_paused}});
  }
  if (path == "/abort_request") {
    if (!post) return Failure(405, "use POST");
    auto all = BoolField(*body, "abort_all", false);
    if (!all.ok()) return Failure(400, std::string(all.status().message()));
    // rid: one request id, or a list of them (SGLang's BaseReq).
    std::vector<std::string> ids;
    if (auto it = body->find("rid"); it != body->end() && !it->is_null()) {
      if (it->is_string()) {
        ids.push_back(it->get<std::string>());
      } else if (it->is_array()) {
        for (const json& id : *it) {
          if (!id.is_string()) return Failure(400, "rid: must be a string or a list of strings");
          ids.push_back(id.get<std::string>());
        }
      } else {
        return Failure(400, "rid: must be a string or a list of strings");
      }
    }
    if (!*all && ids.empty()) return Failure(400, "rid: required unless abort_all is true");
    int32_t aborted = 0;
    for (size_t i = 0; i < (*all ? 1 : ids.size()); ++i) {
      auto op = std::make_shared<sched::AbortRequestsOp>();
      op->all = *all;
      if (!*all) op->request_id = ids[i];
      scheduler_->RunAdmin(op);
      aborted += op->aborted;
    }
    LOG(INFO) << "admin http: aborted " << aborted << " requests";
    // SGLang answers 200 with an empty body.
    return {.status = 200, .body = ""};
  }
  // vLLM's pause / resume (its RL API): mode abort | wait | keep as query parameters.
  if (path == "/pause") {
    if (!post) return VllmError(405, "use POST");
    const std::map<std::string, std::string> params = QueryParams(request.query);
    auto wait = QueryBool(params, "wait_for_inflight_requests", false);
    if (!wait.ok()) return VllmError(400, std::string(wait.status().message()));
    auto clear = QueryBool(params, "clear_cache", true);
    if (!clear.ok()) return VllmError(400, std::string(clear.status().message()));
    std::string mode_name = params.count("mode") ? params.at("mode") : "abort";
    if (*wait) mode_name = "wait";  // the deprecated knob, as vLLM honors it
    sched::PauseMode mode;
    if (mode_name == "abort") {
      mode = sched::PauseMode::kAbort;
    } else if (mode_name == "wait") {
      mode = sched::PauseMode::kDrain;
    } else if (mode_name == "keep") {
      mode = sched::PauseMode::kKeep;
    } else {
      return VllmError(400, "Invalid pause mode: '" + mode_name +
                                "'. Must be one of ['abort', 'wait', 'keep'].");
    }
    auto paused = scheduler_->Pause(mode, sched::Clock::time_point::max());
    if (!paused.ok()) return VllmError(500, std::string(paused.status().message()));
    // The cache goes after the running requests are gone (not for keep, whose requests stay).
    if (*clear && mode != sched::PauseMode::kKeep) scheduler_->FlushCache();
    return JsonReply(200, {{"status", "paused"}});
  }
  if (path == "/resume") {
    if (!post) return VllmError(405, "use POST");
    if (grpc::Status allowed = admin_->ResumeAllowed(); !allowed.ok()) {
      return VllmError(HttpStatusOf(allowed.error_code()), allowed.error_message());
    }
    scheduler_->Resume();
    return JsonReply(200, {{"status", "resumed"}});
  }
  if (path == "/is_paused") {
    return JsonReply(
        200, {{"is_paused", scheduler_->weight_version().paused != sched::PauseMode::kNone}});
  }
  // SGLang's NCCL routes. The group is joined by NCCL unique id (astr's field nccl_unique_id,
  // base64), not by SGLang's torch.distributed rendezvous (master_address / master_port); the
  // update takes SGLang's body and its trainers' broadcasts: one per tensor, in order.
  if (path == "/init_weights_update_group") {
    if (!post) return Failure(405, "use POST");
    auto group = StringField(*body, "group_name", "weight_update_group");
    auto id = StringField(*body, "nccl_unique_id", "");
    if (!group.ok()) return Failure(400, std::string(group.status().message()));
    if (!id.ok()) return Failure(400, std::string(id.status().message()));
    if (id->empty()) {
      return JsonReply(400, {{"success", false},
                             {"message",
                              "nccl_unique_id: required. astr's workers join an NCCL group by "
                              "the unique id of the trainer (rank 0), base64, not through "
                              "torch.distributed's master_address / master_port rendezvous "
                              "(docs/rl.md \"NCCL broadcast\")"}});
    }
    auto raw = Base64Field(*id, "nccl_unique_id");
    if (!raw.ok()) return Failure(400, std::string(raw.status().message()));
    v1::InitWeightUpdateGroupRequest r;
    r.set_nccl_unique_id(*raw);
    r.set_group_name(*group);
    if (body->contains("world_size") && (*body)["world_size"].is_number_integer()) {
      r.set_world_size((*body)["world_size"].get<int32_t>());
    }
    if (body->contains("timeout_ms") && (*body)["timeout_ms"].is_number_integer()) {
      r.set_timeout_ms((*body)["timeout_ms"].get<int64_t>());
    }
    v1::InitWeightUpdateGroupResponse answer;
    const grpc::Status s = admin_->InitGroupNow(r, &answer);
    if (!s.ok()) {
      return JsonReply(HttpStatusOf(s.error_code()),
                       {{"success", false}, {"message", s.error_message()}});
    }
    json ranks = json::array();
    for (const auto& w : answer.ranks())
      ranks.push_back({{"address", w.address()}, {"rank", w.rank()}});
    return JsonReply(200, {{"success", true},
                           {"message", "Succeeded to initialize custom process group."},
                           {"world_size", answer.world_size()},
                           {"ranks", ranks}});
  }
  if (path == "/update_weights_from_distributed") {
    if (!post) return Failure(405, "use POST");
    auto group = StringField(*body, "group_name", "weight_update_group");
    auto label = StringField(*body, "weight_version", "");
    if (!group.ok()) return Failure(400, std::string(group.status().message()));
    if (!label.ok()) return Failure(400, std::string(label.status().message()));
    const auto list = [&](const char* name) -> const json* {
      auto it = body->find(name);
      return it != body->end() && it->is_array() ? &*it : nullptr;
    };
    const json* names = list("names");
    const json* dtypes = list("dtypes");
    const json* shapes = list("shapes");
    if (names == nullptr || dtypes == nullptr || shapes == nullptr ||
        names->size() != dtypes->size() || names->size() != shapes->size() || names->empty()) {
      return Failure(400, "names, dtypes, shapes: three lists of the same non-zero length");
    }
    v1::UpdateWeightsFromDistributedRequest r;
    r.set_group_name(*group);
    r.set_bucket_bytes(-1);  // SGLang's trainers broadcast each tensor on its own
    r.mutable_manifest()->set_label(*label);
    for (size_t i = 0; i < names->size(); ++i) {
      const json& n = (*names)[i];
      const json& d = (*dtypes)[i];
      const json& sh = (*shapes)[i];
      if (!n.is_string() || !d.is_string() || !sh.is_array()) {
        return Failure(400, "names[" + std::to_string(i) + "], dtypes[" + std::to_string(i) +
                                "], shapes[" + std::to_string(i) +
                                "]: a string, a string and a list of integers");
      }
      v1::TensorSpec* t = r.mutable_manifest()->add_tensors();
      t->set_name(n.get<std::string>());
      std::string dtype = d.get<std::string>();
      if (dtype.rfind("torch.", 0) == 0) dtype = dtype.substr(6);
      t->set_dtype(dtype);
      for (const json& dim : sh) {
        if (!dim.is_number_integer()) {
          return Failure(400, "shapes[" + std::to_string(i) + "]: integers expected");
        }
        t->add_shape(dim.get<int64_t>());
      }
    }
    v1::UpdateWeightsResponse answer;
    const grpc::Status s = admin_->UpdateFromDistributedNow(r, &answer);
    if (!s.ok()) {
      return JsonReply(HttpStatusOf(s.error_code()),
                       {{"success", false}, {"message", s.error_message()}});
    }
    return JsonReply(200, {{"success", true},
                           {"message", "Succeeded to update parameter online."},
                           {"version", answer.version()}});
  }
  if (path == "/destroy_weights_update_group") {
    if (!post) return Failure(405, "use POST");
    auto group = StringField(*body, "group_name", "weight_update_group");
    if (!group.ok()) return Failure(400, std::string(group.status().message()));
    v1::DestroyWeightUpdateGroupRequest r;
    r.set_group_name(*group);
    const grpc::Status s = admin_->DestroyGroupNow(r);
    if (!s.ok()) {
      return JsonReply(HttpStatusOf(s.error_code()),
                       {{"success", false}, {"message", s.error_message()}});
    }
    return JsonReply(200, {{"success", true}, {"message", "Succeeded to destroy the group."}});
  }
  // vLLM's weight-transfer routes (its NCCL engine): the group is made through the trainer's
  // TCPStore, and an update opened by /start_weight_update commits at /finish_weight_update.
  if (path == "/get_world_size") {
    // The workers that would join (every worker that is up, on the cuda backend).
    v1::InitWeightUpdateGroupRequest probe;
    probe.set_validate_only(true);
    probe.set_group_name(kVllmGroup);
    v1::InitWeightUpdateGroupResponse answer;
    const grpc::Status s = admin_->InitGroupNow(probe, &answer);
    if (s.ok()) return JsonReply(200, {{"world_size", answer.world_size() - 1}});
    if (s.error_code() != grpc::StatusCode::ALREADY_EXISTS) {
      return VllmError(HttpStatusOf(s.error_code()), s.error_message());
    }
    std::lock_guard<std::mutex> lock(vllm_mu_);
    return JsonReply(200, {{"world_size", vllm_workers_}});
  }
  if (path == "/init_weight_transfer_engine") {
    if (!post) return VllmError(405, "use POST");
    return InitWeightTransfer(*body);
  }
  if (path == "/start_weight_update") {
    if (!post) return VllmError(405, "use POST");
    auto checkpoint = BoolField(*body, "is_checkpoint_format", true);
    if (!checkpoint.ok()) return VllmError(400, std::string(checkpoint.status().message()));
    if (!*checkpoint) {
      return VllmError(400,
                       "is_checkpoint_format: false is not served: astr takes the checkpoint's "
                       "tensors (Hugging Face names and layouts) and builds its own from them");
    }
    std::lock_guard<std::mutex> lock(vllm_mu_);
    if (vllm_pending_ != nullptr) {
      LOG(WARNING) << "admin http: /start_weight_update drops the update staged before it";
      admin_->DiscardPending(vllm_pending_.get());
      vllm_pending_.reset();
    }
    vllm_started_ = true;
    return JsonReply(200, {{"message", "Weight update started"}});
  }
  if (path == "/update_weights") {
    if (!post) return VllmError(405, "use POST");
    return UpdateWeightsVllm(*body);
  }
  if (path == "/finish_weight_update") {
    if (!post) return VllmError(405, "use POST");
    auto label = StringField(*body, "weight_version", "");
    if (!label.ok()) return VllmError(400, std::string(label.status().message()));
    std::lock_guard<std::mutex> lock(vllm_mu_);
    vllm_started_ = false;
    if (vllm_pending_ == nullptr) return JsonReply(200, {{"message", "Weight update finished"}});
    std::unique_ptr<AdminService::PendingUpdate> pending = std::move(vllm_pending_);
    v1::UpdateWeightsResponse answer;
    const grpc::Status s = admin_->CommitPendingNow(pending.get(), *label, &answer);
    if (!s.ok()) return VllmError(HttpStatusOf(s.error_code()), s.error_message());
    LOG(INFO) << "admin http: vLLM weight update committed as version " << answer.version();
    return JsonReply(200, {{"message", "Weight update finished"}, {"version", answer.version()}});
  }
  // SGLang's memory routes: body {"tags": [...]} (absent or null = all).
  if (path == "/release_memory_occupation" || path == "/resume_memory_occupation") {
    const bool release = path == "/release_memory_occupation";
    std::vector<std::string> tags;
    if (body->contains("tags") && !(*body)["tags"].is_null()) {
      if (!(*body)["tags"].is_array()) return Failure(400, "tags: expected a list of strings");
      for (const auto& t : (*body)["tags"]) {
        if (!t.is_string()) return Failure(400, "tags: expected a list of strings");
        tags.push_back(t.get<std::string>());
      }
    }
    grpc::Status s;
    int64_t bytes = 0;
    if (release) {
      v1::ReleaseMemoryRequest r;
      for (const auto& t : tags) r.add_tags(t);
      v1::ReleaseMemoryResponse answer;
      s = admin_->ReleaseMemoryNow(r, &answer, /*pause_if_running=*/true);
      bytes = answer.bytes_released();
    } else {
      v1::ResumeMemoryRequest r;
      for (const auto& t : tags) r.add_tags(t);
      v1::ResumeMemoryResponse answer;
      s = admin_->ResumeMemoryNow(r, &answer);
      bytes = answer.bytes_restored();
    }
    if (!s.ok()) {
      return JsonReply(HttpStatusOf(s.error_code()),
                       {{"success", false}, {"message", s.error_message()}});
    }
    return JsonReply(200, {{"success", true}, {"message", "ok"}, {"bytes", bytes}});
  }
  // vLLM's sleep mode: /sleep?level=1 (weights to the host, KV dropped) or 2 (both dropped),
  // /wake_up?tags=weights,kv_cache (absent = all), /is_sleeping.
  if (path == "/sleep") {
    if (!post) return VllmError(405, "use POST");
    const std::map<std::string, std::string> params = QueryParams(request.query);
    const std::string level = params.count("level") ? params.at("level") : "1";
    if (level != "1" && level != "2") {
      return VllmError(400, "level: expected 1 or 2, got '" + level + "'");
    }
    v1::ReleaseMemoryRequest r;
    r.set_keep_weights_on_host(level == "1");
    v1::ReleaseMemoryResponse answer;
    const grpc::Status s = admin_->ReleaseMemoryNow(r, &answer, /*pause_if_running=*/true);
    if (!s.ok()) return VllmError(HttpStatusOf(s.error_code()), s.error_message());
    return {.status = 200, .body = "", .content_type = "text/plain"};
  }
  if (path == "/wake_up") {
    if (!post) return VllmError(405, "use POST");
    const std::map<std::string, std::string> params = QueryParams(request.query);
    v1::ResumeMemoryRequest r;
    if (params.count("tags")) {
      std::string list = params.at("tags");
      size_t start = 0;
      while (start <= list.size()) {
        const size_t comma = list.find(',', start);
        const std::string tag =
            list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        if (!tag.empty()) r.add_tags(tag);
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    }
    v1::ResumeMemoryResponse answer;
    const grpc::Status s = admin_->ResumeMemoryNow(r, &answer);
    if (!s.ok()) return VllmError(HttpStatusOf(s.error_code()), s.error_message());
    return {.status = 200, .body = "", .content_type = "text/plain"};
  }
  if (path == "/is_sleeping") {
    return JsonReply(200, {{"is_sleeping", !admin_->ResumeAllowed().ok()}});
  }
  if (path == "/flush_cache") {
    const int64_t freed = scheduler_->FlushCache();
    return {.status = 200,
            .body = "Cache flushed.\n" + std::to_string(freed) + " pages freed.\n",
            .content_type = "text/plain"};
  }
  return Failure(404, "no admin route " + path);
}

namespace {

// An integer field of `obj`, named `where` in errors.
StatusOr<int64_t> IntField(const json& obj, const char* name, const std::string& where) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return InvalidArgumentError(where + name + ": required");
  if (!it->is_number_integer()) {
    return InvalidArgumentError(where + name + ": must be an integer");
  }
  return it->get<int64_t>();
}

// vLLM's packed broadcasts: tensors in order, a broadcast ending after the tensor that takes the
// running total past `buffer` bytes (vllm/distributed/weight_transfer/packed_tensor.py).
std::vector<int64_t> VllmPackedPieces(const std::vector<int64_t>& sizes, int64_t buffer) {
  std::vector<int64_t> pieces;
  int64_t fill = 0;
  for (int64_t n : sizes) {
    fill += n;
    if (fill > buffer) {
      pieces.push_back(fill);
      fill = 0;
    }
  }
  if (fill > 0) pieces.push_back(fill);
  return pieces;
}

// Bytes per element of a torch dtype name; 0 for one astr does not take.
int64_t TorchItemSize(const std::string& dtype) {
  if (dtype == "float32") return 4;
  if (dtype == "bfloat16" || dtype == "float16") return 2;
  return 0;
}

}  // namespace

AdminHttp::Reply AdminHttp::InitWeightTransfer(const json& body) {
  auto it = body.find("init_info");
  if (it == body.end() || !it->is_object()) {
    return VllmError(400, "Missing 'init_info' in request body");
  }
  const json& info = *it;
  const std::string where = "init_info.";
  auto host = StringField(info, "master_address", "");
  if (!host.ok()) return VllmError(400, where + std::string(host.status().message()));
  if (host->empty()) {
    if (info.contains("ipc_handles") || info.empty()) {
      return VllmError(400, where +
                                "master_address: required. astr serves vLLM's NCCL weight "
                                "transfer; its IPC engine passes torch's pickled CUDA tensors, "
                                "which astr's workers cannot open (docs/rl.md \"CUDA IPC\")");
    }
    return VllmError(400, where + "master_address: required");
  }
  auto port = IntField(info, "master_port", where);
  auto offset = IntField(info, "rank_offset", where);
  auto world = IntField(info, "world_size", where);
  for (const auto* v : {&port, &offset, &world}) {
    if (!v->ok()) return VllmError(400, std::string(v->status().message()));
  }
  // The workers' ranks: astr gives them 1.. (the trainer is rank 0), as vLLM does with
  // rank_offset 1 and one engine.
  v1::InitWeightUpdateGroupRequest probe;
  probe.set_validate_only(true);
  probe.set_group_name(kVllmGroup);
  v1::InitWeightUpdateGroupResponse shape;
  std::lock_guard<std::mutex> lock(vllm_mu_);
  if (vllm_workers_ > 0) {
    // A trainer that starts again makes the group again.
    v1::DestroyWeightUpdateGroupRequest destroy;
    destroy.set_group_name(kVllmGroup);
    admin_->DestroyGroupNow(destroy);
    vllm_workers_ = 0;
    if (vllm_pending_ != nullptr) admin_->DiscardPending(vllm_pending_.get());
    vllm_pending_.reset();
    vllm_started_ = false;
  }
  if (grpc::Status s = admin_->InitGroupNow(probe, &shape); !s.ok()) {
    return VllmError(HttpStatusOf(s.error_code()), s.error_message());
  }
  const int64_t workers = shape.world_size() - 1;
  if (*offset != 1 || *world != 1 + workers) {
    return VllmError(400, where + "rank_offset " + std::to_string(*offset) + ", world_size " +
                              std::to_string(*world) + ": astr's " + std::to_string(workers) +
                              " worker(s) take ranks 1.." + std::to_string(workers) +
                              " after the trainer's rank 0: rank_offset 1, world_size " +
                              std::to_string(1 + workers) + " (GET /get_world_size answers " +
                              std::to_string(workers) + ")");
  }
  auto id = JoinVllmRendezvous(*host, static_cast<int>(*port), static_cast<int>(workers),
                               kVllmRendezvousTimeout);
  if (!id.ok()) {
    const int status = id.status().code() == StatusCode::kInvalidArgument ? 400 : 504;
    return VllmError(status, std::string(id.status().message()));
  }
  v1::InitWeightUpdateGroupRequest r;
  r.set_group_name(kVllmGroup);
  r.set_nccl_unique_id(*id);
  r.set_world_size(static_cast<int32_t>(*world));
  r.set_warmup_all_reduce(true);
  v1::InitWeightUpdateGroupResponse answer;
  if (grpc::Status s = admin_->InitGroupNow(r, &answer); !s.ok()) {
    return VllmError(HttpStatusOf(s.error_code()), s.error_message());
  }
  vllm_workers_ = static_cast<int>(workers);
  LOG(INFO) << "admin http: vLLM weight transfer joined the trainer at " << *host << ":" << *port
            << " (" << answer.nccl() << ")";
  return JsonReply(200, {{"message", "Weight transfer initialized"}});
}

AdminHttp::Reply AdminHttp::UpdateWeightsVllm(const json& body) {
  auto it = body.find("update_info");
  if (it == body.end() || !it->is_object()) {
    return VllmError(400, "Missing 'update_info' in request body");
  }
  const json& info = *it;
  if (info.contains("ipc_handles") || info.contains("ipc_handles_pickled")) {
    return VllmError(400,
                     "update_info.ipc_handles: vLLM's IPC engine passes torch's pickled CUDA "
                     "tensors, which astr's workers cannot open; use UpdateWeightsFromTensor "
                     "(docs/rl.md \"CUDA IPC\") or the NCCL engine");
  }
  const auto list = [&](const char* name) -> const json* {
    auto f = info.find(name);
    return f != info.end() && f->is_array() ? &*f : nullptr;
  };
  const json* names = list("names");
  const json* dtypes = list("dtype_names");
  const json* shapes = list("shapes");
  if (names == nullptr || dtypes == nullptr || shapes == nullptr ||
      names->size() != dtypes->size() || names->size() != shapes->size() || names->empty()) {
    return VllmError(400,
                     "update_info.names, dtype_names, shapes: three lists of the same non-zero "
                     "length");
  }
  auto packed = BoolField(info, "packed", false);
  if (!packed.ok()) return VllmError(400, "update_info." + std::string(packed.status().message()));
  int64_t buffer = kVllmPackedBufferBytes;
  if (info.contains("packed_buffer_size_bytes") && !info["packed_buffer_size_bytes"].is_null()) {
    auto b = IntField(info, "packed_buffer_size_bytes", "update_info.");
    if (!b.ok() || *b <= 0) {
      return VllmError(400, "update_info.packed_buffer_size_bytes: a positive integer");
    }
    buffer = *b;
  }
  v1::UpdateWeightsFromDistributedRequest r;
  r.set_group_name(kVllmGroup);
  std::vector<int64_t> sizes;
  for (size_t i = 0; i < names->size(); ++i) {
    const json& n = (*names)[i];
    const json& d = (*dtypes)[i];
    const json& sh = (*shapes)[i];
    const std::string at = "[" + std::to_string(i) + "]";
    if (!n.is_string() || !d.is_string() || !sh.is_array()) {
      return VllmError(400, "update_info.names" + at + ", dtype_names" + at + ", shapes" + at +
                                ": a string, a string and a list of integers");
    }
    v1::TensorSpec* t = r.mutable_manifest()->add_tensors();
    t->set_name(n.get<std::string>());
    t->set_dtype(d.get<std::string>());
    int64_t bytes = TorchItemSize(t->dtype());
    if (bytes == 0) {
      return VllmError(400, "update_info.dtype_names" + at + ": '" + t->dtype() +
                                "' (astr takes float32, bfloat16 and float16)");
    }
    for (const json& dim : sh) {
      if (!dim.is_number_integer() || dim.get<int64_t>() < 0) {
        return VllmError(400, "update_info.shapes" + at + ": non-negative integers expected");
      }
      t->add_shape(dim.get<int64_t>());
      bytes *= dim.get<int64_t>();
    }
    sizes.push_back(bytes);
  }
  if (*packed) {
    for (int64_t piece : VllmPackedPieces(sizes, buffer)) r.add_piece_bytes(piece);
  } else {
    r.set_bucket_bytes(-1);  // one broadcast per tensor, in its dtype
  }
  std::lock_guard<std::mutex> lock(vllm_mu_);
  if (!vllm_started_) {
    // vLLM's two-phase use (no start / finish): the update commits at once.
    v1::UpdateWeightsResponse answer;
    const grpc::Status s = admin_->UpdateFromDistributedNow(r, &answer);
    if (!s.ok()) return VllmError(HttpStatusOf(s.error_code()), s.error_message());
    return JsonReply(200, {{"message", "Weights updated"}, {"version", answer.version()}});
  }
  if (vllm_pending_ != nullptr) {
    // A trainer that sends one update in several calls: each call's tensors commit before the
    // next call's stage (a worker holds one staged update), the last at /finish_weight_update.
    std::unique_ptr<AdminService::PendingUpdate> before = std::move(vllm_pending_);
    v1::UpdateWeightsResponse answer;
    const grpc::Status s = admin_->CommitPendingNow(before.get(), "", &answer);
    if (!s.ok()) return VllmError(HttpStatusOf(s.error_code()), s.error_message());
  }
  auto pending = std::make_unique<AdminService::PendingUpdate>();
  const grpc::Status s = admin_->StageFromDistributedNow(r, pending.get());
  if (!s.ok()) return VllmError(HttpStatusOf(s.error_code()), s.error_message());
  vllm_pending_ = std::move(pending);
  return JsonReply(200, {{"message", "Weights updated"}});
}

}  // namespace astr::front
