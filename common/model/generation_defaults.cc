#include "common/model/generation_defaults.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/base/file_util.h"
#include "common/model/gguf.h"

namespace astr::model {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// The ranges the sampler accepts (ValidateSamplingParams): a default outside them would fail every
// request that leaves the field unset, so the file is refused instead.
Status CheckRanges(const GenerationDefaults& d, const std::string& origin,
                   const char* const names[6]) {
  auto bad = [&](int i, const std::string& why) {
    return InvalidArgumentError(origin + ": " + names[i] + " " + why);
  };
  if (d.temperature && !(*d.temperature >= 0.0f && std::isfinite(*d.temperature))) {
    return bad(0, "must be a finite number >= 0, got " + std::to_string(*d.temperature));
  }
  if (d.top_k && *d.top_k < 0) return bad(1, "must be >= 0, got " + std::to_string(*d.top_k));
  if (d.top_p && !(*d.top_p > 0.0f && *d.top_p <= 1.0f)) {
    return bad(2, "must be in (0, 1], got " + std::to_string(*d.top_p));
  }
  if (d.min_p && !(*d.min_p >= 0.0f && *d.min_p <= 1.0f)) {
    return bad(3, "must be in [0, 1], got " + std::to_string(*d.min_p));
  }
  if (d.repetition_penalty &&
      !(*d.repetition_penalty > 0.0f && std::isfinite(*d.repetition_penalty))) {
    return bad(4, "must be a finite number > 0, got " + std::to_string(*d.repetition_penalty));
  }
  if (d.max_tokens && *d.max_tokens < 1) {
    return bad(5, "must be >= 1, got " + std::to_string(*d.max_tokens));
  }
  return OkStatus();
}

StatusOr<GenerationDefaults> FromGguf(const std::string& path) {
  ASTR_ASSIGN_OR_RETURN(auto file, GgufFile::Open(path));
  GenerationDefaults d;
  auto number = [&](const char* key) -> StatusOr<std::optional<double>> {
    if (file->Find(key) == nullptr) return std::optional<double>();
    ASTR_ASSIGN_OR_RETURN(double v, file->GetFloat(key));
    return std::optional<double>(v);
  };
  auto integer = [&](const char* key) -> StatusOr<std::optional<int64_t>> {
    if (file->Find(key) == nullptr) return std::optional<int64_t>();
    ASTR_ASSIGN_OR_RETURN(int64_t v, file->GetInt(key));
    return std::optional<int64_t>(v);
  };
  ASTR_ASSIGN_OR_RETURN(auto temp, number("general.sampling.temp"));
  ASTR_ASSIGN_OR_RETURN(auto top_k, integer("general.sampling.top_k"));
  ASTR_ASSIGN_OR_RETURN(auto top_p, number("general.sampling.top_p"));
  ASTR_ASSIGN_OR_RETURN(auto min_p, number("general.sampling.min_p"));
  ASTR_ASSIGN_OR_RETURN(auto repeat, number("general.sampling.penalty_repeat"));
  ASTR_ASSIGN_OR_RETURN(auto last_n, integer("general.sampling.penalty_last_n"));
  if (temp) d.temperature = static_cast<float>(*temp);
  if (top_k) d.top_k = static_cast<int32_t>(std::min<int64_t>(*top_k, INT32_MAX));
  if (top_p) d.top_p = static_cast<float>(*top_p);
  if (min_p) d.min_p = static_cast<float>(*min_p);
  if (repeat) d.repetition_penalty = static_cast<float>(*repeat);
  // llama.cpp: penalty_last_n -1 = the whole context, 0 = penalties off, n = the last n tokens.
  if (last_n && *last_n == 0) {
    d.repetition_penalty.reset();
  } else if (last_n && *last_n > 0) {
    d.penalty_window = static_cast<int32_t>(std::min<int64_t>(*last_n, INT32_MAX));
  }
  static const char* const kNames[6] = {"general.sampling.temp",           "general.sampling.top_k",
                                        "general.sampling.top_p",          "general.sampling.min_p",
                                        "general.sampling.penalty_repeat", "(none)"};
  ASTR_RETURN_IF_ERROR(CheckRanges(d, path, kNames));
  if (!d.empty()) d.source = path;
  return d;
}

}  // namespace

std::string GenerationDefaults::Describe() const {
  std::ostringstream out;
  auto add = [&](const char* name, auto v) {
    if (v) out << (out.tellp() > 0 ? " " : "") << name << "=" << *v;
  };
  add("temperature", temperature);
  add("top_k", top_k);
  add("top_p", top_p);
  add("min_p", min_p);
  add("repetition_penalty", repetition_penalty);
  add("penalty_window", penalty_window);
  add("max_tokens", max_tokens);
  if (out.tellp() == 0) return "none";
  if (!source.empty()) out << " (from " << source << ")";
  return out.str();
}

StatusOr<GenerationDefaults> ParseGenerationConfigJson(const std::string& text,
                                                       const std::string& origin) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgumentError(origin + ": not valid JSON");
  if (!j.is_object()) return InvalidArgumentError(origin + ": not a JSON object");
  GenerationDefaults d;
  auto number = [&](const char* key, std::optional<float>* out) -> Status {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return OkStatus();
    if (!it->is_number()) return InvalidArgumentError(origin + ": " + key + " must be a number");
    *out = it->get<float>();
    return OkStatus();
  };
  auto integer = [&](const char* key, std::optional<int32_t>* out) -> Status {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return OkStatus();
    if (!it->is_number_integer()) {
      return InvalidArgumentError(origin + ": " + key + " must be an integer");
    }
    const int64_t v = it->get<int64_t>();
    *out = static_cast<int32_t>(std::clamp<int64_t>(v, INT32_MIN, INT32_MAX));
    return OkStatus();
  };
  ASTR_RETURN_IF_ERROR(number("temperature", &d.temperature));
  ASTR_RETURN_IF_ERROR(integer("top_k", &d.top_k));
  ASTR_RETURN_IF_ERROR(number("top_p", &d.top_p));
  ASTR_RETURN_IF_ERROR(number("min_p", &d.min_p));
  ASTR_RETURN_IF_ERROR(number("repetition_penalty", &d.repetition_penalty));
  ASTR_RETURN_IF_ERROR(integer("max_new_tokens", &d.max_tokens));
  // transformers' own defaults (top_k 50 with do_sample) are not recommendations: only the keys
  // written in the file count, as with vLLM's --generation-config auto.
  static const char* const kNames[6] = {"temperature",        "top_k",         "top_p", "min_p",
                                        "repetition_penalty", "max_new_tokens"};
  ASTR_RETURN_IF_ERROR(CheckRanges(d, origin, kNames));
  if (!d.empty()) d.source = origin;
  return d;
}

StatusOr<GenerationDefaults> LoadGenerationDefaults(const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  if (p.extension() == ".gguf") return FromGguf(path);
  fs::path json_path;
  if (fs::is_directory(p, ec)) {
    json_path = p / "generation_config.json";
  } else if (p.extension() == ".json" && p.filename() != "config.json" &&
             p.filename() != "tokenizer.json" && p.filename() != "tokenizer_config.json") {
    json_path = p;
  } else {
    json_path = p.parent_path() / "generation_config.json";
  }
  if (!fs::exists(json_path, ec)) {
    if (json_path == p) return NotFoundError(path + ": no such file");
    return GenerationDefaults{};
  }
  ASTR_ASSIGN_OR_RETURN(std::string text, ReadFileToString(json_path.string()));
  return ParseGenerationConfigJson(text, json_path.string());
}

}  // namespace astr::model
