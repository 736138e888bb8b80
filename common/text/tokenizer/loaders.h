// Loaders behind Tokenizer::Load.
#pragma once

#include <memory>
#include <string>

#include "common/base/status.h"
#include "common/text/tokenizer/tokenizer.h"

namespace astr::tok {

// A folder with tokenizer.json (tokenizer_config.json and generation_config.json are read for the
// EOS ids when present), or a tokenizer.json file.
StatusOr<std::shared_ptr<const Tokenizer>> LoadHfTokenizer(const std::string& path);

}  // namespace astr::tok
