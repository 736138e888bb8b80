#include "tests/test_util.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>

namespace astr::testing {

std::string SharedDir() {
  if (const char* env = std::getenv("ASTR_SHARED_DIR"); env != nullptr && *env != '\0') return env;
  return ASTR_DEFAULT_SHARED_DIR;
}

std::string SharedFile(const std::string& rel) {
  std::string path = SharedDir() + "/" + rel;
  return std::filesystem::exists(path) ? path : "";
}

std::string TempDir(const std::string& tag) {
  static std::atomic<int> counter{0};
  auto dir =
      std::filesystem::temp_directory_path() /
      ("astr_test_" + tag + "_" + std::to_string(getpid()) + "_" + std::to_string(counter++));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

std::string BinDir() { return ASTR_BIN_DIR; }

}  // namespace astr::testing
