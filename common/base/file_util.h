// Reading whole files, with errors that name the file.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "common/base/status.h"

namespace astr {

// NotFound "<path>: cannot open" when the file cannot be read.
StatusOr<std::string> ReadFileToString(const std::string& path);

// The parsed file; InvalidArgument "<path>: invalid JSON: <parser message with the position>", or
// "<path>: JSON nested deeper than ..." past kMaxJsonDepth (json_depth.h).
StatusOr<nlohmann::json> ReadJsonFile(const std::string& path);
// Same, keeping object keys in file order (for values that are printed or iterated again).
StatusOr<nlohmann::ordered_json> ReadOrderedJsonFile(const std::string& path);

}  // namespace astr
