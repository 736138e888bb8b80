// The main() of a fuzz target's corpus-replay test, for builds without libFuzzer (g++): runs every
// file named on the command line, and every file under every folder named (recursively, in name
// order), through the target's LLVMFuzzerTestOneInput once. A crash, sanitizer report or
// assertion of the target fails the test as it would fail the fuzzer; running nothing fails it
// too (a corpus folder that moved must not pass silently).
//   <name>_fuzz_replay [FILE|DIR]...
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
// Optional in a target, as in libFuzzer.
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace {

namespace fs = std::filesystem;

// The files to run, in a stable order: a failure names the same input on every run.
bool CollectInputs(const fs::path& arg, std::vector<fs::path>* out) {
  std::error_code ec;
  if (fs::is_regular_file(arg, ec)) {
    out->push_back(arg);
    return true;
  }
  if (!fs::is_directory(arg, ec)) return false;
  std::vector<fs::path> found;
  for (const fs::directory_entry& e : fs::recursive_directory_iterator(arg, ec)) {
    if (e.is_regular_file()) found.push_back(e.path());
  }
  std::sort(found.begin(), found.end());
  out->insert(out->end(), found.begin(), found.end());
  return !ec;
}

bool ReadFile(const fs::path& path, std::vector<uint8_t>* bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  bytes->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return !in.bad();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help") {
    std::fprintf(stderr,
                 "usage: %s FILE|DIR...\n"
                 "Runs every file (folders: every file under them) through the fuzz target once.\n",
                 argv[0]);
    return argc < 2 ? 2 : 0;
  }
  if (LLVMFuzzerInitialize != nullptr) LLVMFuzzerInitialize(&argc, &argv);
  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) {
    if (!CollectInputs(argv[i], &inputs)) {
      std::fprintf(stderr, "%s: no such file or folder\n", argv[i]);
      return 1;
    }
  }
  const auto start = std::chrono::steady_clock::now();
  std::vector<uint8_t> bytes;
  for (const fs::path& path : inputs) {
    if (!ReadFile(path, &bytes)) {
      std::fprintf(stderr, "%s: cannot read\n", path.c_str());
      return 1;
    }
    // Say which input runs before running it: a crash leaves this as the last line.
    std::fprintf(stderr, "running %s (%zu bytes)\n", path.c_str(), bytes.size());
    LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("ran %zu inputs in %.2f s\n", inputs.size(), seconds);
  if (inputs.empty()) {
    std::fprintf(stderr, "no inputs found\n");
    return 1;
  }
  return 0;
}
