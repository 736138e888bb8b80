#include "tests/fuzz/fuzz_support.h"

#include <cstdio>
#include <cstdlib>

#include "common/base/logging.h"
#include "tests/support/test_util.h"

namespace astr::fuzz {

void InitQuietLogging(const char* argv0) {
  LogOptions options;
  options.level = "error";
  if (Status s = InitLogging(argv0, options); !s.ok()) {
    std::fprintf(stderr, "fuzz: %s\n", s.ToString().c_str());
    std::abort();
  }
}

std::string SharedFileOrSkip(const std::string& rel) {
  std::string path = testing::SharedFile(rel);
  if (path.empty()) {
    std::fprintf(stderr, "fuzz: shared test data missing: %s under %s; skipping\n", rel.c_str(),
                 testing::SharedDir().c_str());
    std::exit(kSkipExitCode);
  }
  return path;
}

std::string ScratchDir(const std::string& tag) { return testing::TempDir("fuzz_" + tag); }

void WriteFileOrDie(const std::string& path, std::string_view bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() ||
      std::fclose(f) != 0) {
    std::perror(path.c_str());
    std::abort();
  }
}

}  // namespace astr::fuzz
