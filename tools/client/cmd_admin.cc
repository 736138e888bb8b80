// `astr admin <verb>`: astr-scheduler's control plane (astr.v1.Admin, protos/astr/v1/admin.proto)
// from the command line: weight updates, the served version and checksums, pause / resume, the
// prefix cache. Each verb parses its own flags (AdminFlags plus its own) and makes one call.
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <string>
#include <vector>

#include "common/base/flags.h"
#include "common/model/content_hash.h"
#include "tools/client/admin_flags.h"
#include "tools/client/output.h"
#include "tools/client/safetensors_upload.h"
#include "tools/command.h"

namespace astr::cli {
namespace {

constexpr char kProgram[] = "astr admin";

// The largest --bucket-mb: a protobuf message must stay under 2 GiB.
constexpr int64_t kMaxBucketMiB = 1024;

// The --mode names of PauseMode, also how `version` prints it.
struct PauseModeName {
  v1::PauseMode mode;
  const char* name;
};
constexpr PauseModeName kPauseModes[] = {{v1::PAUSE_MODE_ABORT, "abort"},
                                         {v1::PAUSE_MODE_DRAIN, "drain"},
                                         {v1::PAUSE_MODE_KEEP, "keep"}};

const char* PauseModeLabel(v1::PauseMode mode) {
  for (const auto& m : kPauseModes) {
    if (m.mode == mode) return m.name;
  }
  return mode == v1::PAUSE_MODE_UNSPECIFIED ? "no" : "unknown";
}

StatusOr<v1::PauseMode> ParsePauseMode(const std::string& text) {
  for (const auto& m : kPauseModes) {
    if (text == m.name) return m.mode;
  }
  return InvalidArgumentError("--mode must be abort, drain or keep, not '" + text + "'");
}

// A usage error found after parsing: the message and exit code 2, as FlagSet does.
int UsageError(const std::string& program, const Status& status) {
  std::fprintf(stderr, "%s: %s\n", program.c_str(), status.message().c_str());
  return 2;
}

double Ms(int64_t ns) { return static_cast<double>(ns) / 1e6; }

std::string Mib(int64_t bytes) {
  char out[32];
  std::snprintf(out, sizeof(out), "%.2f MiB", static_cast<double>(bytes) / (1 << 20));
  return out;
}

std::string VersionLabel(int64_t version, const std::string& label) {
  std::string out = std::to_string(version);
  if (!label.empty()) out += " (\"" + label + "\")";
  return out;
}

std::string ShapeText(const google::protobuf::RepeatedField<int64_t>& shape) {
  std::string out = "[";
  for (int i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// "2026-12-01 15:11:19.123 UTC".
std::string UnixNsText(int64_t unix_ns) {
  const std::time_t seconds = static_cast<std::time_t>(unix_ns / 1000000000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char out[64];
  const size_t n = std::strftime(out, sizeof(out), "%Y-%m-%d %H:%M:%S", &utc);
  std::snprintf(out + n, sizeof(out) - n, ".%03d UTC", static_cast<int>(unix_ns / 1000000 % 1000));
  return out;
}

// The common tail of every verb: connect, make the call, print the response (or the error).
template <typename Response, typename Call, typename Print>
int CallAndPrint(const std::string& program, const AdminFlags& admin, Call call, Print print) {
  auto client = admin.Connect();
  if (!client.ok()) return PrintError(program.c_str(), client.status());
  StatusOr<Response> response = call(**client);
  if (!response.ok()) return PrintError(program.c_str(), response.status());
  if (admin.json) {
    std::printf("%s\n", JsonLine(*response).c_str());
  } else {
    print(*response);
  }
  return 0;
}

void PrintUpdate(const v1::UpdateWeightsResponse& r) {
  std::printf("version:  %s\n", VersionLabel(r.version(), r.label()).c_str());
  std::printf("tensors:  %d (%s per worker, %d workers)\n", r.tensors(), Mib(r.bytes()).c_str(),
              r.workers());
  std::printf("stage:    %.1f ms\n", Ms(r.stage_ns()));
  std::printf("commit:   %.1f ms (%d running sequences recomputed, %d reused)\n", Ms(r.commit_ns()),
              r.recomputed(), r.reused());
}

int UpdateWeightsVerb(int argc, const char* const* argv) {
  const std::string program = argv[0];
  FlagSet fs(program,
             "Replace the served weights, all workers at once between two steps, and print the "
             "new version. --from-disk names a checkpoint the workers read themselves; "
             "--from-safetensors streams a local checkpoint through this connection, each tensor "
             "with its XXH64 so that the workers check what they got.");
  AdminFlags admin;
  admin.Register(&fs);
  std::string from_disk, from_safetensors, label;
  // 4 MiB pipelines best through the scheduler (docs/benchmarks.md, astr-bench-refit).
  int64_t bucket_mb = 4;
  fs.String("from-disk", &from_disk,
            "A .gguf file or Hugging Face folder as the workers see it (an absolute path on their "
            "machines; the CLI does not read it).");
  fs.String("from-safetensors", &from_safetensors,
            "A local Hugging Face folder (model.safetensors or model.safetensors.index.json with "
            "its shards) or .safetensors file: its F32 / F16 / BF16 tensors are sent under their "
            "stored names.");
  fs.String("label", &label, "Label reported with the new version (e.g. the trainer's step).");
  fs.Int("bucket-mb", &bucket_mb,
         "MiB of tensor data per streamed message with --from-safetensors (at most 1024).");
  bool direct = false;
  fs.Bool("direct", &direct,
          "With --from-safetensors: send the bytes from here straight to every worker "
          "(Admin.BeginDirectUpdate; the scheduler reserves and commits the update), which is "
          "faster; the workers' addresses must be reachable from here, in plaintext.");
  if (int rc = fs.ParseOrExit(argc, argv); rc >= 0) return rc;
  if (Status s = admin.Check(); !s.ok()) return UsageError(program, s);
  if (from_disk.empty() == from_safetensors.empty()) {
    return UsageError(
        program, InvalidArgumentError("give exactly one of --from-disk or --from-safetensors"));
  }
  if (fs.WasSet("bucket-mb") && from_safetensors.empty()) {
    return UsageError(program, InvalidArgumentError("--bucket-mb needs --from-safetensors"));
  }
  if (direct && from_safetensors.empty()) {
    return UsageError(program, InvalidArgumentError("--direct needs --from-safetensors"));
  }
  if (bucket_mb < 1 || bucket_mb > kMaxBucketMiB) {
    return UsageError(program, InvalidArgumentError("--bucket-mb must be in [1, 1024], got " +
                                                    std::to_string(bucket_mb)));
  }
  const auto options = admin.CallOptions();
  if (!from_disk.empty()) {
    v1::UpdateWeightsFromDiskRequest request;
    request.set_path(from_disk);
    request.set_label(label);
    return CallAndPrint<v1::UpdateWeightsResponse>(
        program, admin,
        [&](client::AdminClient& c) { return c.UpdateWeightsFromDisk(request, options); },
        PrintUpdate);
  }
  auto upload = ReadSafetensorsUpload(from_safetensors, label);
  if (!upload.ok()) return PrintError(program.c_str(), upload.status());
  if (!admin.json) {
    std::fprintf(stderr, "%s: sending %d tensors, %s\n", program.c_str(),
                 upload->manifest.tensors_size(), Mib(upload->total_bytes).c_str());
  }
  return CallAndPrint<v1::UpdateWeightsResponse>(
      program, admin,
      [&](client::AdminClient& c) {
        return direct
                   ? c.UpdateWeightsDirect(upload->manifest, upload->data, bucket_mb << 20, options)
                   : c.UpdateWeights(upload->manifest, upload->data, bucket_mb << 20, options);
      },
      PrintUpdate);
}

int VersionVerb(int argc, const char* const* argv) {
  const std::string program = argv[0];
  FlagSet fs(program,
             "Show the weight version being served, its label and whether generation "
             "is paused.");
  AdminFlags admin;
  admin.Register(&fs);
  if (int rc = fs.ParseOrExit(argc, argv); rc >= 0) return rc;
  if (Status s = admin.Check(); !s.ok()) return UsageError(program, s);
  return CallAndPrint<v1::GetWeightVersionResponse>(
      program, admin,
      [&](client::AdminClient& c) { return c.GetWeightVersion(admin.CallOptions()); },
      [](const v1::GetWeightVersionResponse& r) {
        std::printf("version:    %s\n", VersionLabel(r.version(), r.label()).c_str());
        std::printf("committed:  %s\n", r.committed_unix_ns() == 0
                                            ? "- (the weights loaded at start)"
                                            : UnixNsText(r.committed_unix_ns()).c_str());
        std::printf("paused:     %s\n", PauseModeLabel(r.paused()));
      });
}

StatusOr<std::vector<std::string>> SplitNames(const std::string& text) {
  std::vector<std::string> names;
  if (text.empty()) return names;
  size_t begin = 0;
  while (true) {
    const size_t end = std::min(text.find(',', begin), text.size());
    if (end == begin) return InvalidArgumentError("--names: empty name in '" + text + "'");
    names.push_back(text.substr(begin, end - begin));
    if (end == text.size()) return names;
    begin = end + 1;
  }
}

void PrintChecksums(const std::string& program, const v1::GetWeightsChecksumResponse& r) {
  std::printf("version %lld: %d tensors\n", static_cast<long long>(r.version()), r.tensors_size());
  std::vector<std::string> shapes;
  size_t name_width = 4, shape_width = 5;
  for (const auto& t : r.tensors()) {
    shapes.push_back(ShapeText(t.shape()));
    name_width = std::max(name_width, t.name().size());
    shape_width = std::max(shape_width, shapes.back().size());
  }
  const int nw = static_cast<int>(name_width), sw = static_cast<int>(shape_width);
  std::printf("%-*s  %-6s  %-5s  %-*s  %s\n", nw, "NAME", "SOURCE", "DTYPE", sw, "SHAPE", "XXH64");
  int inconsistent = 0;
  for (int i = 0; i < r.tensors_size(); ++i) {
    const auto& t = r.tensors(i);
    std::printf("%-*s  %-6s  %-5s  %-*s  %s", nw, t.name().c_str(), t.source().c_str(),
                t.dtype().c_str(), sw, shapes[i].c_str(), model::ContentHashHex(t.xxh64()).c_str());
    if (!t.consistent()) {
      ++inconsistent;
      std::printf("  INCONSISTENT:");
      for (int w = 0; w < t.per_worker_size(); ++w) {
        std::printf("%s worker %d %s", w ? "," : "", w,
                    model::ContentHashHex(t.per_worker(w)).c_str());
      }
    }
    std::printf("\n");
  }
  if (inconsistent > 0) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: %d of %d tensors differ between workers\n", program.c_str(),
                 inconsistent, r.tensors_size());
  }
}

int ChecksumVerb(int argc, const char* const* argv) {
  const std::string program = argv[0];
  FlagSet fs(program,
             "Show the XXH64 of tensors as every worker holds them (\"pushed\": the bytes of the "
             "last update that carried the tensor; \"file\": its stored bytes in the checkpoint "
             "loaded), and flag the tensors whose workers disagree.");
  AdminFlags admin;
  admin.Register(&fs);
  std::string names;
  fs.String("names", &names,
            "Comma-separated Hugging Face tensor names; default: every tensor of the model.");
  if (int rc = fs.ParseOrExit(argc, argv); rc >= 0) return rc;
  if (Status s = admin.Check(); !s.ok()) return UsageError(program, s);
  auto list = SplitNames(names);
  if (!list.ok()) return UsageError(program, list.status());
  v1::GetWeightsChecksumRequest request;
  for (const auto& name : *list) request.add_names(name);
  return CallAndPrint<v1::GetWeightsChecksumResponse>(
      program, admin,
      [&](client::AdminClient& c) { return c.GetWeightsChecksum(request, admin.CallOptions()); },
      [&](const v1::GetWeightsChecksumResponse& r) { PrintChecksums(program, r); });
}

int PauseVerb(int argc, const char* const* argv) {
  const std::string program = argv[0];
  FlagSet fs(program,
             "Pause generation until `astr admin resume`. New requests queue meanwhile. Prints "
             "what happened to the running requests.");
  AdminFlags admin;
  admin.Register(&fs);
  std::string mode_text;
  fs.String("mode", &mode_text,
            "abort: running requests end now (finish reason abort); drain: they finish first, "
            "pause returns when none runs; keep: they freeze and continue on resume.",
            /*required=*/true);
  if (int rc = fs.ParseOrExit(argc, argv); rc >= 0) return rc;
  if (Status s = admin.Check(); !s.ok()) return UsageError(program, s);
  auto mode = ParsePauseMode(mode_text);
  if (!mode.ok()) return UsageError(program, mode.status());
  return CallAndPrint<v1::PauseResponse>(
      program, admin, [&](client::AdminClient& c) { return c.Pause(*mode, admin.CallOptions()); },
      [](const v1::PauseResponse& r) {
        std::printf("paused (%s): ", PauseModeLabel(r.mode()));
        switch (r.mode()) {
          case v1::PAUSE_MODE_ABORT:
            std::printf("%d running requests aborted", r.aborted());
            break;
          case v1::PAUSE_MODE_DRAIN:
            std::printf("%d running requests drained", r.drained());
            break;
          default:
            std::printf("%d running requests frozen", r.frozen());
            break;
        }
        std::printf("; %d queued\n", r.queued());
        if (r.request_ids_size() > 0) {
          std::string ids;
          for (const auto& id : r.request_ids()) ids += (ids.empty() ? "" : ", ") + id;
          std::printf("requests: %s\n", ids.c_str());
        }
      });
}

int ResumeVerb(int argc, const char* const* argv) {
  const std::string program = argv[0];
  FlagSet fs(program,
             "Resume generation after `astr admin pause` (nothing to do when not paused).");
  AdminFlags admin;
  admin.Register(&fs);
  if (int rc = fs.ParseOrExit(argc, argv); rc >= 0) return rc;
  if (Status s = admin.Check(); !s.ok()) return UsageError(program, s);
  return CallAndPrint<v1::ResumeResponse>(
      program, admin, [&](client::AdminClient& c) { return c.Resume(admin.CallOptions()); },
      [](const v1::ResumeResponse& r) {
        if (r.was_paused()) {
          std::printf("resumed after %.1f ms paused\n", Ms(r.paused_ns()));
        } else {
          std::printf("was not paused\n");
        }
      });
}

int FlushCacheVerb(int argc, const char* const* argv) {
  const std::string program = argv[0];
  FlagSet fs(program,
             "Empty every worker's prefix cache: cached pages no running sequence holds become "
             "free (allowed while requests run).");
  AdminFlags admin;
  admin.Register(&fs);
  if (int rc = fs.ParseOrExit(argc, argv); rc >= 0) return rc;
  if (Status s = admin.Check(); !s.ok()) return UsageError(program, s);
  return CallAndPrint<v1::FlushCacheResponse>(
      program, admin, [&](client::AdminClient& c) { return c.FlushCache(admin.CallOptions()); },
      [](const v1::FlushCacheResponse& r) {
        std::printf("flushed %lld pages of cached KV\n", static_cast<long long>(r.pages_freed()));
      });
}

int DrainWorkerVerb(int argc, const char* const* argv) {
  const std::string program = argv[0];
  FlagSet fs(program,
             "Drain one worker before a scale-down: the scheduler sends it no new sequence, "
             "moves its waiting ones to the other workers, lets its running ones finish there "
             "(up to --drain-timeout-s, then they restart elsewhere with the same outputs) and "
             "drops it. Returns once it left the pool. It is not added back while its address "
             "stays listed in --workers (see docs/deploy.md).");
  AdminFlags admin;
  admin.Register(&fs);
  std::string worker;
  int64_t drain_timeout_s = 0;
  fs.String("worker", &worker,
            "The worker's address, as `astr info` lists it (HOST:PORT, or IP:PORT for workers "
            "found through a dns:/// name).",
            /*required=*/true);
  fs.Int("drain-timeout-s", &drain_timeout_s,
         "How long its running sequences may take to finish there; 0 = the scheduler's "
         "--worker-drain-timeout-s.");
  if (int rc = fs.ParseOrExit(argc, argv); rc >= 0) return rc;
  if (Status s = admin.Check(); !s.ok()) return UsageError(program, s);
  if (drain_timeout_s < 0) {
    return UsageError(program, InvalidArgumentError("--drain-timeout-s must be >= 0"));
  }
  return CallAndPrint<v1::DrainWorkerResponse>(
      program, admin,
      [&](client::AdminClient& c) {
        return c.DrainWorker(worker, drain_timeout_s, admin.CallOptions());
      },
      [](const v1::DrainWorkerResponse& r) {
        std::printf("worker %s drained in %.1f ms: %d sequences finished there, %d moved\n",
                    r.address().c_str(), Ms(r.drain_ns()), r.finished(), r.moved());
      });
}

struct Verb {
  const char* name;
  const char* summary;
  int (*run)(int argc, const char* const* argv);
};
constexpr Verb kVerbs[] = {
    {"checksum", "XXH64 of the served tensors per worker, flagging disagreements.", ChecksumVerb},
    {"drain-worker", "Drain one worker and drop it from the pool (before a scale-down).",
     DrainWorkerVerb},
    {"flush-cache", "Empty the prefix cache.", FlushCacheVerb},
    {"pause", "Pause generation (--mode abort|drain|keep).", PauseVerb},
    {"resume", "Resume generation.", ResumeVerb},
    {"update-weights", "Replace the served weights (--from-disk or --from-safetensors).",
     UpdateWeightsVerb},
    {"version", "The weight version served, and whether generation is paused.", VersionVerb},
};

void PrintUsage(FILE* out) {
  std::fprintf(out,
               "Usage: astr admin <verb> [flags]\n\n"
               "Control a running astr-scheduler through its admin service (astr.v1.Admin, on "
               "the port of its --admin-listen): weight updates, pause / resume, the prefix "
               "cache. Every verb needs --token-file, the file holding the bearer token; it "
               "exits 0 on success, 1 when the call fails (printing the gRPC code and message), "
               "2 on a usage error.\n\nVerbs:\n");
  for (const Verb& v : kVerbs) std::fprintf(out, "  %-16s %s\n", v.name, v.summary);
  std::fprintf(out, "\nRun 'astr admin <verb> --help' for a verb's flags.\n");
}

int AdminCommand(int argc, const char* const* argv) {
  if (argc < 2) {
    PrintUsage(stderr);
    return 2;
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    PrintUsage(stdout);
    return 0;
  }
  for (const Verb& v : kVerbs) {
    if (name == v.name) {
      const std::string program = std::string(kProgram) + " " + name;
      std::vector<const char*> args = {program.c_str()};
      args.insert(args.end(), argv + 2, argv + argc);
      return v.run(static_cast<int>(args.size()), args.data());
    }
  }
  std::fprintf(stderr, "%s: unknown verb '%s'\n\n", kProgram, name.c_str());
  PrintUsage(stderr);
  return 2;
}

}  // namespace

ASTR_REGISTER_COMMAND("admin", "Control a running server: weight updates, pause, resume, cache.",
                      AdminCommand);

}  // namespace astr::cli
