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

}  // namespace astr::front
