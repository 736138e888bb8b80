// Tokenizer encode / decode throughput on one thread, printed as JSON.
//
//   astr-bench-tokenizer --model PATH [--file TEXT] [--min-seconds S] [--max-tokens N]
//
// Besides throughput it times EncodeAtMost(text, N), the call that refuses a prompt longer than a
// context of N tokens (e.g. a 50 MB text against 2048), and reports the tokenizer's length bound.
//
// Without --file the text is the English prose of /usr/share/common-licenses (GPL, Apache, ...),
// which every Debian machine has.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "common/base/file_util.h"
#include "common/base/flags.h"
#include "common/base/logging.h"
#include "common/text/tokenizer/tokenizer.h"

namespace astr {
namespace {

namespace fs = std::filesystem;

std::string DefaultText() {
  std::string text;
  const fs::path dir = "/usr/share/common-licenses";
  std::error_code ec;
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.is_regular_file()) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& p : files) {
    if (auto content = ReadFileToString(p.string()); content.ok()) text += *content;
  }
  return text;
}

template <typename Fn>
double TimeRepeated(double min_seconds, int* reps, Fn&& fn) {
  const auto start = std::chrono::steady_clock::now();
  double elapsed = 0;
  *reps = 0;
  do {
    fn();
    ++*reps;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  } while (elapsed < min_seconds);
  return elapsed;
}

int Run(int argc, const char* const* argv) {
  std::string model, file;
  double min_seconds = 2.0;
  int64_t max_tokens = 2048;
  FlagSet flags("astr-bench-tokenizer",
                "Measure tokenizer encode and decode speed on one thread; prints JSON.");
  flags.String("model", &model, "A .gguf file, a Hugging Face model folder, or a tokenizer.json.",
               true);
  flags.String("file", &file,
               "Text to encode (default: the English texts in /usr/share/common-licenses).");
  flags.Double("min-seconds", &min_seconds, "Repeat each measurement for at least this long.");
  flags.Int("max-tokens", &max_tokens,
            "Also time encoding with this limit (a context), which stops once it is passed.");
  if (int rc = flags.ParseOrExit(argc, argv); rc >= 0) return rc;
  (void)InitLogging(argv[0], LogOptions());
  std::string text;
  if (file.empty()) {
    text = DefaultText();
  } else {
    auto content = ReadFileToString(file);
    if (!content.ok()) {
      LOG(ERROR) << content.status().ToString();
      return 1;
    }
    text = std::move(*content);
  }
  if (text.empty()) {
    std::fprintf(stderr, "astr-bench-tokenizer: no text (give --file)\n");
    return 1;
  }
  auto loaded = tok::Tokenizer::Load(model);
  if (!loaded.ok()) {
    LOG(ERROR) << loaded.status().ToString();
    return 1;
  }
  const tok::Tokenizer& tok = **loaded;
  const tok::EncodeOptions plain{.add_special_tokens = false, .parse_special = false};
  std::vector<int32_t> ids;
  // First pass on a fresh tokenizer: the word cache starts empty.
  const auto cold_start = std::chrono::steady_clock::now();
  ids = tok.Encode(text, plain);
  const double cold_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - cold_start).count();
  int encode_reps = 0, decode_reps = 0;
  const double encode_s =
      TimeRepeated(min_seconds, &encode_reps, [&] { ids = tok.Encode(text, plain); });
  std::string decoded;
  const double decode_s =
      TimeRepeated(min_seconds, &decode_reps, [&] { decoded = tok.Decode(ids, false); });
  int bounded_reps = 0;
  tok::BoundedEncoding bounded;
  const double bounded_s = TimeRepeated(min_seconds, &bounded_reps, [&] {
    bounded = tok.EncodeAtMost(text, static_cast<size_t>(std::max<int64_t>(0, max_tokens)), plain);
  });
  const double mb = static_cast<double>(text.size()) / 1e6;
  nlohmann::json out = {
      {"model", model},
      {"tokenizer", tok.Describe()},
      {"text_bytes", text.size()},
      {"tokens", ids.size()},
      {"threads", 1},
      {"encode_first_pass_mb_per_s", mb / cold_s},
      {"encode_mb_per_s", mb * encode_reps / encode_s},
      {"encode_tokens_per_s", static_cast<double>(ids.size()) * encode_reps / encode_s},
      {"decode_mb_per_s", static_cast<double>(decoded.size()) / 1e6 * decode_reps / decode_s},
      {"round_trip_exact", decoded == text},
      {"max_bytes_per_token", tok.max_bytes_per_token(false)},
      {"min_tokens", tok.MinTokens(text, false)},
      {"bounded_max_tokens", max_tokens},
      {"bounded_complete", bounded.complete},
      {"bounded_min_tokens", bounded.complete ? bounded.ids.size() : bounded.min_tokens},
      {"bounded_from_length", bounded.from_length},
      {"bounded_encode_ms", 1e3 * bounded_s / bounded_reps},
  };
  std::cout << out.dump(2) << "\n";
  return 0;
}

}  // namespace
}  // namespace astr

int main(int argc, char** argv) { return astr::Run(argc, argv); }
