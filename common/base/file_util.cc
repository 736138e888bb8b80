#include "common/base/file_util.h"

#include <fstream>
#include <sstream>

#include "common/base/json_depth.h"

namespace astr {
namespace {

template <typename Json>
StatusOr<Json> ParseJson(const std::string& path) {
  ASTR_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  ASTR_RETURN_IF_ERROR(CheckJsonDepth(text, path));
  try {
    return Json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgumentError(path + ": invalid JSON: " + e.what());
  }
}

}  // namespace

StatusOr<std::string> ReadFileToString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError(path + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return DataLossError(path + ": read error");
  return ss.str();
}

StatusOr<nlohmann::json> ReadJsonFile(const std::string& path) {
  return ParseJson<nlohmann::json>(path);
}

StatusOr<nlohmann::ordered_json> ReadOrderedJsonFile(const std::string& path) {
  return ParseJson<nlohmann::ordered_json>(path);
}

}  // namespace astr
