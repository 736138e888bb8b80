// CUDA IPC (docs/rl.md "CUDA IPC"): the backend opens a buffer another process shared with
// cudaIpcGetMemHandle (astr-test-cuda-ipc-export, started here) and reads exactly its bytes, in
// pieces and at offsets; a read past the end is refused; once the exporter has freed the buffer
// and exited, its handle no longer opens. On a GPU the exporter uses libcudart; on the emulated
// device, lib/libastr_cuda_ipc_emu.so.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "tests/gpu/cuda_ipc_pattern.h"
#include "tests/gpu/op_test.h"
#include "worker/backends/cuda/cuda_ipc.h"

extern char** environ;

namespace astr::gputest {
namespace {

#if defined(ASTR_CUDA_EMU)
constexpr const char* kExporter = ASTR_BIN_DIR "/astr-test-cuda-ipc-export-emu";
#else
constexpr const char* kExporter = ASTR_BIN_DIR "/astr-test-cuda-ipc-export";
#endif

// The exporter process: its handle, and the pipe whose closing makes it free the buffer and exit.
struct Exporter {
  pid_t pid = -1;
  int to_child = -1;
  std::string handle;  // 64 raw bytes
  std::string error;

  ~Exporter() { Stop(); }
  // Closes its stdin and waits for it; true when it exited 0.
  bool Stop() {
    if (pid < 0) return true;
    if (to_child >= 0) close(to_child);
    to_child = -1;
    int status = 0;
    waitpid(pid, &status, 0);
    pid = -1;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
};

bool Start(uint64_t bytes, Exporter* e) {
  int in[2], out[2];
  if (pipe(in) != 0 || pipe(out) != 0) {
    e->error = "pipe failed";
    return false;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_addclose(&actions, in[1]);
  posix_spawn_file_actions_addclose(&actions, out[0]);
  const std::string size = std::to_string(bytes);
  char* argv[] = {const_cast<char*>(kExporter), const_cast<char*>(size.c_str()), nullptr};
  const int rc = posix_spawn(&e->pid, kExporter, &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  close(in[0]);
  close(out[1]);
  e->to_child = in[1];
  if (rc != 0) {
    e->pid = -1;
    close(out[0]);
    e->error = std::string("cannot start ") + kExporter;
    return false;
  }
  FILE* from = fdopen(out[0], "r");
  char line[256] = {};
  const bool got = std::fgets(line, sizeof(line), from) != nullptr;
  std::fclose(from);
  std::string hex(got ? line : "");
  while (!hex.empty() && (hex.back() == '\n' || hex.back() == '\r')) hex.pop_back();
  if (hex.size() != 128) {
    e->error = std::string(kExporter) + " printed no handle";
    return false;
  }
  for (size_t i = 0; i < hex.size(); i += 2) {
    e->handle.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return true;
}

CaseResult ReadsTheExportersBytes(uint64_t bytes) {
  Exporter exporter;
  if (!Start(bytes, &exporter)) return Fail(exporter.error);
  const std::string handle = exporter.handle;
  {
    auto buffer = cuda::OpenCudaIpcBuffer(handle, bytes);
    if (!buffer.ok()) return Fail("OpenCudaIpcBuffer: " + buffer.status().ToString());
    // Pieces of an odd size, so that they start at every alignment.
    const uint64_t piece = bytes / 3 + 5;
    std::vector<uint8_t> host(piece);
    for (uint64_t off = 0; off < bytes; off += piece) {
      const uint64_t n = std::min(piece, bytes - off);
      Status s = (*buffer)->Read(off, std::span<uint8_t>(host.data(), n));
      if (!s.ok()) return Fail("Read at " + std::to_string(off) + ": " + s.ToString());
      for (uint64_t i = 0; i < n; ++i) {
        if (host[i] != IpcPattern(off + i)) {
          return Fail("byte " + std::to_string(off + i) + ": " + std::to_string(host[i]) +
                      ", the exporter wrote " + std::to_string(IpcPattern(off + i)));
        }
      }
    }
    if ((*buffer)->Read(bytes - 4, std::span<uint8_t>(host.data(), 8)).ok()) {
      return Fail("a read past the buffer's end was not refused");
    }
  }  // closed here, before the exporter frees the buffer
  if (!exporter.Stop()) return Fail(std::string(kExporter) + " did not exit cleanly");
  auto gone = cuda::OpenCudaIpcBuffer(handle, bytes);
  if (gone.ok()) return Fail("the handle of a freed buffer of an exited process opened");
  if (gone.status().code() != StatusCode::kInvalidArgument) {
    return Fail("a stale handle: " + gone.status().ToString() + " (expected INVALID_ARGUMENT)");
  }
  if (cuda::OpenCudaIpcBuffer(handle.substr(0, 10), bytes).ok()) {
    return Fail("a 10-byte handle opened");
  }
  CaseResult r = Pass(0.0, 0.0);
  r.detail = std::to_string(bytes) +
             " bytes read exactly in pieces; past-the-end read, stale and "
             "short handles refused";
  return r;
}

void RegisterCudaIpcCases() {
  for (uint64_t bytes : {uint64_t{4096}, uint64_t{3} << 20}) {
    RegisterCase({"cuda_ipc_read", "bytes=" + std::to_string(bytes),
                  [bytes] { return ReadsTheExportersBytes(bytes); }});
  }
}

}  // namespace

ASTR_GPU_CASES(RegisterCudaIpcCases);

}  // namespace astr::gputest
