// astr-scheduler: connects to astr-worker processes and serves the public astr.v1.Generate API,
// grpc.health.v1 and server reflection. SIGTERM / SIGINT drain: new requests are refused, running
// ones finish (up to --drain-timeout-s), then the process exits 0. See docs/api.md.
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "astr/v1/generate.grpc.pb.h"
#include "common/base/flags.h"
#include "common/base/logging.h"
#include "common/base/token_ids.h"
#include "common/grpc/grpc_logging.h"
#include "common/grpc/health.h"
#include "common/grpc/message_limits.h"
#include "common/grpc/shutdown_signal.h"
#include "common/grpc/tls.h"
#include "common/model/generation_defaults.h"
#include "scheduler/front/admin_http.h"
#include "scheduler/front/admin_service.h"
#include "scheduler/front/generate_service.h"
#include "scheduler/front/grpc_service.h"
#include "scheduler/front/http_front.h"
#include "scheduler/scheduler.h"
#include "scheduler/worker_connection.h"
#include "scheduler/worker_fit.h"
#include "scheduler/worker_membership.h"

namespace astr {
namespace {

using Clock = std::chrono::steady_clock;

// After the drain, handlers still writing their last messages get this long before the server
// cancels them. The grace always runs to its end while any client keeps an idle connection open
// (gRPC 1.51), so it is short: once the scheduler is idle, a last message needs milliseconds.
constexpr auto kShutdownGrace = std::chrono::milliseconds(500);
// Largest admin message: one bucket of an UpdateWeights stream (the workers take 256 MiB).

// The floor of --max-calls-per-peer 0 (automatic).
constexpr int64_t kMinAutoCallsPerPeer = 64;

// Where the admin service listens when --admin-token-file is given without --admin-listen.
constexpr char kDefaultAdminListen[] = "127.0.0.1:50053";

struct Flags {
  std::string workers;
  std::string listen = "127.0.0.1:50051";
  std::string tokenizer;
  std::string chat_template;
  std::string generation_config = "auto";
  sched::SchedulerOptions sched;
  int64_t max_n = 16;
  int64_t max_stop_strings = 16;
  int64_t max_logit_bias = 1024;
  int64_t max_stop_token_ids = 1024;
  int64_t connect_timeout_s = 30;
  double worker_refresh_s = 5;
  int64_t worker_drain_timeout_s = 60;
  int64_t step_timeout_ms = 300000;
  int64_t drain_timeout_s = 60;
  int64_t max_calls_per_peer = 0;
  int64_t stream_stall_timeout_s = 30;
  int64_t stream_pause_ms = 1000;
  int64_t front_threads = 4;
  int64_t grammar_threads = 2;
  int64_t grammar_cache_mb = 256;
  int64_t grammar_max_compile_ms = 5000;
  int64_t grammar_max_compile_mb = 0;
  int64_t grammar_compile_workers = 2;
  int64_t grammar_compiles_per_client = 1;
  int64_t grammar_max_queued_per_client = 16;
  int64_t grammar_max_queued_mb = 64;
  int64_t max_message_mb = 64;
  std::string admin_listen;  // empty: none, unless --admin-token-file (then kDefaultAdminListen)
  std::string admin_token_file;
  std::string admin_http_listen;  // empty: no admin HTTP routes
  std::string admin_token;  // read from admin_token_file before any worker is dialed
  std::string http_listen;
  std::string served_model_name;
  std::string tool_call_parser = "auto";
  std::string api_key_file;
  std::string tls_cert_file, tls_key_file, tls_client_ca_file;
  std::string worker_tls_ca_file, worker_tls_cert_file, worker_tls_key_file;
  std::string worker_tls_server_name;
  // Read from the files above before any worker is dialed; reloaded on SIGHUP.
  std::shared_ptr<front::ApiKeys> api_keys;
  std::shared_ptr<rpc::TlsFiles> server_tls;  // null: plaintext
  rpc::ChannelSecurity worker_security;
  int64_t http_threads = 2;
  int64_t http_max_body_mb = 16;
  int64_t http_idle_timeout_s = 60;
  double sse_ping_s = 10;
};

void Register(FlagSet* fs, Flags* f) {
  fs->String("workers", &f->workers,
             "astr-worker addresses, comma-separated: HOST:PORT (a fixed worker: it must answer "
             "at start, within --connect-timeout-s) or dns:///NAME:PORT (every address the name "
             "resolves to, e.g. a Kubernetes headless Service, re-resolved every "
             "--worker-refresh-s: new addresses join, vanished ones are drained; at start the "
             "scheduler waits for the first). All must serve the same model (content hash) "
             "and weight version, else a worker is refused with a log line naming both; a new "
             "request goes to the least-loaded one.",
             /*required=*/true);
  fs->Double("worker-refresh-s", &f->worker_refresh_s,
             "How often the dns:/// names of --workers are resolved again, and fixed workers "
             "that left the pool (they shut down) are dialled again, in seconds.");
  fs->Int("worker-drain-timeout-s", &f->worker_drain_timeout_s,
          "A worker being drained (its address left the --workers name, `astr admin "
          "drain-worker`, or it shuts down) gets no new sequence; its running ones may finish "
          "there for this long, then restart on the other workers (same outputs).");
  fs->String("listen", &f->listen,
             "Address to serve on, HOST:PORT. Port 0 picks a free port; the bound address is "
             "logged (INFO) as 'listening on HOST:PORT' once every worker is connected.");
  fs->String("admin-listen", &f->admin_listen,
             "Address of the astr.v1.Admin service (weight updates, pause / resume; "
             "docs/rl.md), HOST:PORT; the bound address is logged as 'admin service on "
             "HOST:PORT'. Default: none, or 127.0.0.1:50053 when --admin-token-file is given "
             "(without a token every admin call would be refused, so no port is taken and any "
             "number of schedulers share a machine). Empty: no admin service.");
  fs->String("admin-http-listen", &f->admin_http_listen,
             "Address of SGLang's weight-sync and generation-control HTTP routes "
             "(/update_weights_from_disk, /init_weights_update_group, "
             "/update_weights_from_distributed, /get_weight_version, /pause_generation, "
             "/continue_generation, /abort_request, /flush_cache, the memory routes) and vLLM's "
             "(/pause, /resume, /is_paused, /sleep, /wake_up, /init_weight_transfer_engine, "
             "/start_weight_update, /update_weights, /finish_weight_update; docs/rl.md), "
             "HOST:PORT, for RL frameworks written against SGLang or "
             "vLLM; the bound address is logged as 'admin http on HOST:PORT'. "
             "Needs --admin-token-file: every route takes `Authorization: Bearer <token>`. "
             "Default: none.");
  fs->String("admin-token-file", &f->admin_token_file,
             "File holding the bearer token every admin call must present "
             "(`authorization: Bearer <token>` metadata). Without it every admin call is "
             "refused with PERMISSION_DENIED.");
  fs->String("http-listen", &f->http_listen,
             "Address of the OpenAI-compatible HTTP API (/v1/completions, /v1/chat/completions, "
             "/v1/models, /tokenize, /detokenize, /health, /metrics; docs/http.md), HOST:PORT; "
             "the bound address is logged as 'http api on HOST:PORT'. Empty (the default): no "
             "HTTP API.");
  fs->String("served-model-name", &f->served_model_name,
             "The model name the HTTP API lists in /v1/models and requests must name in "
             "`model` (others get 404). Default: the served model's name.");
  fs->String("tool-call-parser", &f->tool_call_parser,
             "How chat responses find tool calls in the output when tool_choice is auto "
             "(docs/tools.md): auto (the format the chat template writes: hermes for "
             "<tool_call>, mistral for [TOOL_CALLS], llama3_json for Llama 3.x; none when it "
             "shows none), hermes, llama3_json, mistral or none.");
  fs->String("api-key-file", &f->api_key_file,
             "File of API keys, one per line, each optionally followed by its limits: `KEY "
             "[name=NAME] [rps=R] [burst=B] [max_concurrent=N]` (docs/reliability.md). gRPC "
             "calls of astr.v1.Generate (but GetServerStats) and HTTP requests to /v1/*, "
             "/tokenize and /detokenize must send `authorization: Bearer KEY` with one of them "
             "(UNAUTHENTICATED / 401 otherwise); a key over its rate or its open generations "
             "gets RESOURCE_EXHAUSTED / 429. Re-read on SIGHUP. Default: no key needed.");
  fs->String("tls-cert-file", &f->tls_cert_file,
             "PEM certificate chain served over TLS on --listen, --admin-listen and "
             "--http-listen (with --tls-key-file). Re-read on SIGHUP. Default: plaintext.");
  fs->String("tls-key-file", &f->tls_key_file, "PEM private key of --tls-cert-file (unencrypted).");
  fs->String("tls-client-ca-file", &f->tls_client_ca_file,
             "PEM CA bundle: with it, clients of --listen, --admin-listen and --http-listen "
             "must present a certificate it signed (mutual TLS). Needs --tls-cert-file.");
  fs->String("worker-tls-ca-file", &f->worker_tls_ca_file,
             "Dial the workers over TLS, verifying their certificates against this PEM CA "
             "bundle (the workers run with --tls-cert-file). Re-read on SIGHUP. Default: "
             "plaintext.");
  fs->String("worker-tls-cert-file", &f->worker_tls_cert_file,
             "PEM client certificate the scheduler presents to the workers (mutual TLS: "
             "workers started with --tls-client-ca-file require one), with "
             "--worker-tls-key-file. Needs --worker-tls-ca-file.");
  fs->String("worker-tls-key-file", &f->worker_tls_key_file,
             "PEM private key of --worker-tls-cert-file.");
  fs->String("worker-tls-server-name", &f->worker_tls_server_name,
             "The name the workers' certificates must carry, instead of the host of each "
             "--workers address (e.g. one name for pods whose IPs change).");
  fs->Int("http-threads", &f->http_threads,
          "I/O threads of the HTTP server (any number of connections and streams share them).");
  fs->Int("http-max-body-mb", &f->http_max_body_mb,
          "Largest HTTP request body, in MiB; a larger one gets 413.");
  fs->Int("http-idle-timeout-s", &f->http_idle_timeout_s,
          "An HTTP connection with no request in progress for this long is closed; a request "
          "whose head and body take longer than 30 s to arrive too.");
  fs->Double("sse-ping-s", &f->sse_ping_s,
             "A streamed HTTP response that has sent nothing for this long (queued, or in a "
             "long prefill) gets an SSE comment line ': ping', so proxies keep it open.");
  fs->String("tokenizer", &f->tokenizer,
             "Tokenizer and chat template: a model folder, tokenizer.json or .gguf file readable "
             "here. Default: the model path the first worker reports.");
  fs->String("chat-template", &f->chat_template,
             "A Jinja chat template file that chat completions render instead of the model's "
             "(a model without one, or another format), with the model's special tokens. A file "
             "that is missing or does not parse stops the start. Default: the model's.");
  fs->String("generation-config", &f->generation_config,
             "Sampling defaults of requests that leave temperature, top_k, top_p, min_p, "
             "repetition_penalty or max_tokens unset: 'auto' serves the model's own "
             "recommendation (generation_config.json next to a Hugging Face model, or a GGUF "
             "file's general.sampling.* keys; the --tokenizer path when set, else the first "
             "worker's model path); 'none' serves astr's defaults (temperature 1, top_p 1, "
             "...); a folder or .json file is read as a generation_config.json. A request's "
             "own value always wins.");
  fs->Int("max-batch-tokens", &f->sched.max_batch_tokens,
          "Most tokens (decode rows plus prefill chunks) in one step of one worker; the "
          "worker's own limit caps it.");
  fs->Int("max-running", &f->sched.max_running,
          "Most sequences in one step of one worker; the worker's --max-batch caps it.");
  fs->Int("prefill-chunk", &f->sched.prefill_chunk,
          "Most prompt tokens one sequence feeds in one step: longer prompts are prefilled in "
          "chunks, interleaved with other sequences' decode steps.");
  fs->Int("max-queued-requests", &f->sched.max_queued_requests,
          "Admission: requests waiting for their first step; beyond it new requests get "
          "RESOURCE_EXHAUSTED.");
  fs->Int("max-queued-tokens", &f->sched.max_queued_tokens,
          "Admission: prompt tokens (times n) of the waiting requests; beyond it new requests "
          "get RESOURCE_EXHAUSTED.");
  fs->Bool("overlap-steps", &f->sched.overlap_steps,
           "Send a worker its next plan before reading the result of the current one, so the "
           "worker never waits while the scheduler applies a result and plans (a token sampled "
           "for a sequence that finished meanwhile is dropped). --no-overlap-steps runs plan, "
           "step and result strictly in turn.");
  fs->Bool("prefix-cache", &f->sched.prefix_cache,
           "Radix prefix cache over each worker's full KV pages: a request whose tokens start "
           "like an earlier one's reuses its K/V (usage.cached_tokens), and an n-sample request "
           "prefills its prompt once. Cached pages are evicted, least recently used first, only "
           "when a worker's pool needs them. Keyed by weight version and cache_salt. "
           "--no-prefix-cache computes every prompt in full.");
  fs->Int("cache-route-slack", &f->sched.cache_route_slack,
          "Cache-aware routing: a new sequence goes to the worker whose prefix cache holds the "
          "longest prefix of it, unless that worker has more than this many sequences over the "
          "least-loaded worker (then to the least-loaded one). 0 = route on load alone when "
          "loads differ.");
  fs->Int("max-step-ms", &f->sched.max_step_ms,
          "Bounds the inter-token latency: a step that has decode rows holds at most the "
          "tokens a cost model, fitted to each worker's own step timings, predicts fit in this "
          "many ms (prompts are prefilled over more, smaller steps instead of stalling every "
          "stream), and always the decode rows plus 64 prompt tokens. 0 = auto: 3x the "
          "predicted time of the step's decode rows alone, times the ratio of sequences "
          "waiting for their first token to decoding ones when more wait. -1 = unbounded "
          "(only --max-batch-tokens).");
  fs->Int("worker-down-after-ms", &f->sched.worker_down_after_ms,
          "A worker whose step stream broke is redialed; after this long unreachable it is "
          "marked down and its sequences restart on the other workers (same outputs).");
  fs->Int("reconnect-attempt-ms", &f->sched.reconnect_attempt_ms,
          "Longest single redial attempt of a broken worker (attempts repeat until it is back "
          "or marked down).");
  fs->Int("max-worker-failures", &f->sched.max_worker_failures,
          "A request running on a worker whose step stream breaks restarts (same output); one "
          "caught in more breaks than this is aborted with UNAVAILABLE, so a request that "
          "makes its worker fail every time cannot keep restarting it.");
  fs->Int("max-n", &f->max_n, "Most samples (GenerateRequest.n) one request may ask for.");
  fs->Int("max-stop-strings", &f->max_stop_strings, "Most stop strings per request.");
  fs->Int("max-logit-bias", &f->max_logit_bias,
          "Most logit_bias entries per request (OpenAI's logit_bias, GenerateRequest "
          "sampling.logit_bias).");
  fs->Int("max-stop-token-ids", &f->max_stop_token_ids, "Most stop_token_ids per request.");
  fs->Int("connect-timeout-s", &f->connect_timeout_s,
          "How long to keep dialing each worker at start before giving up.");
  fs->Int("step-timeout-ms", &f->step_timeout_ms,
          "A worker that returns no step result for this long is treated as dead (its stream "
          "is cancelled and redialed, its sequences restart elsewhere): it catches a worker "
          "whose process runs but whose step hangs. A stopped worker process (SIGSTOP) is "
          "noticed sooner, within about 12 s, by its missing HTTP/2 keepalive answers. Must "
          "exceed the longest real step (a full prefill chunk on a slow CPU). 0 = wait "
          "forever.");
  fs->Int("drain-timeout-s", &f->drain_timeout_s,
          "On SIGTERM / SIGINT: how long running requests may take to finish; those still "
          "running then are aborted (UNAVAILABLE) and the process exits.");
  fs->Int(
      "max-calls-per-peer", &f->max_calls_per_peer,
      "Most generation and tokenization calls one client connection may hold open at once; "
      "beyond it a call gets RESOURCE_EXHAUSTED (HTTP 429) naming this flag, so one client "
      "cannot take every slot. 0 = half of the running sequences all workers can hold (the sum of "
      "min(--max-running, the worker's max batch)), at least 64, so another client finds "
      "room; "
      "raise it for a trainer that sends many requests over one connection.");
  fs->Int("stream-stall-timeout-s", &f->stream_stall_timeout_s,
          "A stream (GenerateStream, or an HTTP response with stream: true) whose client reads "
          "nothing for this long (its pending message is not taken) is cancelled: the request "
          "is aborted and its KV pages freed. While a client is slow, output accumulates in one "
          "pending message per sample. 0 = never.");
  fs->Int("stream-pause-ms", &f->stream_pause_ms,
          "A stream whose client reads nothing for this long is paused: its sequences give "
          "their KV pages back (preempted) and compute nothing until the client reads again, "
          "then resume with the same output (recomputed from their tokens, the prefix cache "
          "helping). So never-read streams cannot hold the pool. 0 = never.");
  fs->Bool("fair-share", &f->sched.fair_share,
           "Fair share across clients (the API key when --api-key-file is set, else the client "
           "connection): virtual token counters (VTC) order admission (the client served least "
           "first) and preemption (the client served most first); priorities still come first. "
           "--no-fair-share: arrival order.");
  fs->Int("front-threads", &f->front_threads,
          "Threads that parse, validate and tokenize requests, render chat templates and turn "
          "tokens into response messages.");
  fs->Int("grammar-threads", &f->grammar_threads,
          "Threads that compile one structured-output constraint's token masks (JSON schema, "
          "regex, grammar, choice; docs/structured.md).");
  fs->Int("grammar-compile-workers", &f->grammar_compile_workers,
          "Structured-output constraints compiled at once, all clients together. Compiles run "
          "on threads of their own (below the serving threads' CPU priority), never on the front "
          "threads or the scheduler loop: a request waits for its grammar holding no thread.");
  fs->Int("grammar-compiles-per-client", &f->grammar_compiles_per_client,
          "Compiles one client (its API key, else its connection) may run at once; clients are "
          "served in turn, so one client's schemas delay only its own requests.");
  fs->Int("grammar-max-queued-per-client", &f->grammar_max_queued_per_client,
          "Compiles one client may have waiting; beyond it a request is RESOURCE_EXHAUSTED "
          "(HTTP 429). Requests for a constraint already compiling wait for that compile and "
          "count for nothing.");
  fs->Int("grammar-max-queued-mb", &f->grammar_max_queued_mb,
          "Text of the constraints waiting for a compile, in MiB, all clients together; beyond "
          "it a request is RESOURCE_EXHAUSTED (HTTP 429), so a flood from many connections "
          "holds no more memory than this.");
  fs->Int("grammar-max-compile-ms", &f->grammar_max_compile_ms,
          "Wall time one constraint's compile may take. A compile runs first in a child process "
          "that is killed past half of it; one that fits is compiled again in the scheduler, so "
          "that an accepted request also waits at most this long. Over it: INVALID_ARGUMENT / "
          "HTTP 400 naming the field and this flag.");
  fs->Int("grammar-max-compile-mb", &f->grammar_max_compile_mb,
          "Memory one constraint's compile may use, in MiB, enforced on its child process; "
          "0 = 4 KiB per vocabulary entry within [128, 1024] (192 MiB for a 49k vocabulary). "
          "Over it: INVALID_ARGUMENT / HTTP 400 naming the field and this flag.");
  fs->Int("grammar-cache-mb", &f->grammar_cache_mb,
          "Compiled constraints kept for reuse, in MiB of the heap they hold (a repeated schema "
          "compiles once; the least recently used go first).");
  fs->Int("max-message-mb", &f->max_message_mb,
          "Largest request message accepted, in MiB (long token-id prompts).");
}

// Checks and stages the TLS files of both sides (tls.h).
Status LoadTls(Flags* f) {
  auto server_tls =
      rpc::ServerTlsFromFlags(f->tls_cert_file, f->tls_key_file, f->tls_client_ca_file);
  if (!server_tls.ok()) return server_tls.status();
  f->server_tls = std::move(*server_tls);
  if (!f->worker_tls_ca_file.empty() || !f->worker_tls_cert_file.empty() ||
      !f->worker_tls_key_file.empty()) {
    auto tls = rpc::TlsFiles::Create({.flag = "--worker-tls",
                                      .ca_flag = "",
                                      .cert_file = f->worker_tls_cert_file,
                                      .key_file = f->worker_tls_key_file,
                                      .ca_file = f->worker_tls_ca_file},
                                     /*need_identity=*/false, /*need_ca=*/true);
    if (!tls.ok()) return tls.status();
    f->worker_security.tls = std::move(*tls);
  } else if (!f->worker_tls_server_name.empty()) {
    return InvalidArgumentError("--worker-tls-server-name needs --worker-tls-ca-file");
  }
  f->worker_security.server_name = f->worker_tls_server_name;
  return OkStatus();
}

std::shared_ptr<grpc::ServerCredentials> ServerCredentials(const Flags& f) {
  return f.server_tls != nullptr ? f.server_tls->ServerCredentials()
                                 : grpc::InsecureServerCredentials();
}

Status Validate(const Flags& f) {
  auto positive = [](int64_t v, const char* name) {
    return v >= 1 ? OkStatus()
                  : InvalidArgumentError(std::string("--") + name + " must be >= 1, got " +
                                         std::to_string(v));
  };
  ASTR_RETURN_IF_ERROR(positive(f.max_n, "max-n"));
  ASTR_RETURN_IF_ERROR(positive(f.max_stop_strings, "max-stop-strings"));
  ASTR_RETURN_IF_ERROR(positive(f.max_logit_bias, "max-logit-bias"));
  ASTR_RETURN_IF_ERROR(positive(f.max_stop_token_ids, "max-stop-token-ids"));
  ASTR_RETURN_IF_ERROR(positive(f.grammar_threads, "grammar-threads"));
  if (f.tool_call_parser != "auto" && !front::ParseToolCallFormat(f.tool_call_parser)) {
    return InvalidArgumentError(
        "--tool-call-parser must be auto, hermes, llama3_json, mistral or "
        "none, got '" +
        f.tool_call_parser + "'");
  }
  ASTR_RETURN_IF_ERROR(positive(f.grammar_cache_mb, "grammar-cache-mb"));
  ASTR_RETURN_IF_ERROR(positive(f.grammar_max_compile_ms, "grammar-max-compile-ms"));
  if (f.grammar_max_compile_mb < 0 || f.grammar_max_compile_mb > (int64_t{1} << 20)) {
    return InvalidArgumentError("--grammar-max-compile-mb must be in [0, 1048576], got " +
                                std::to_string(f.grammar_max_compile_mb));
  }
  ASTR_RETURN_IF_ERROR(positive(f.grammar_compile_workers, "grammar-compile-workers"));
  if (f.grammar_compile_workers > 64) {
    return InvalidArgumentError("--grammar-compile-workers must be <= 64");
  }
  ASTR_RETURN_IF_ERROR(positive(f.grammar_compiles_per_client, "grammar-compiles-per-client"));
  ASTR_RETURN_IF_ERROR(positive(f.grammar_max_queued_per_client, "grammar-max-queued-per-client"));
  ASTR_RETURN_IF_ERROR(positive(f.grammar_max_queued_mb, "grammar-max-queued-mb"));
  if (f.grammar_max_queued_mb > (int64_t{1} << 20)) {
    return InvalidArgumentError("--grammar-max-queued-mb must be <= 1048576");
  }
  ASTR_RETURN_IF_ERROR(positive(f.connect_timeout_s, "connect-timeout-s"));
  if (!(f.worker_refresh_s >= 0.1) || f.worker_refresh_s > 3600) {
    return InvalidArgumentError("--worker-refresh-s must be in [0.1, 3600]");
  }
  if (f.worker_drain_timeout_s < 0) {
    return InvalidArgumentError("--worker-drain-timeout-s must be >= 0");
  }
  if (f.max_calls_per_peer < 0) return InvalidArgumentError("--max-calls-per-peer must be >= 0");
  ASTR_RETURN_IF_ERROR(positive(f.front_threads, "front-threads"));
  if (f.front_threads > 256) return InvalidArgumentError("--front-threads must be <= 256");
  if (f.stream_stall_timeout_s < 0) {
    return InvalidArgumentError("--stream-stall-timeout-s must be >= 0");
  }
  if (f.stream_pause_ms < 0) return InvalidArgumentError("--stream-pause-ms must be >= 0");
  ASTR_RETURN_IF_ERROR(positive(f.max_message_mb, "max-message-mb"));
  if (f.max_message_mb > 2047) return InvalidArgumentError("--max-message-mb must be <= 2047");
  if (f.drain_timeout_s < 0) return InvalidArgumentError("--drain-timeout-s must be >= 0");
  if (f.step_timeout_ms < 0) return InvalidArgumentError("--step-timeout-ms must be >= 0");
  ASTR_RETURN_IF_ERROR(positive(f.http_threads, "http-threads"));
  if (f.http_threads > 64) return InvalidArgumentError("--http-threads must be <= 64");
  ASTR_RETURN_IF_ERROR(positive(f.http_max_body_mb, "http-max-body-mb"));
  if (f.http_max_body_mb > 2047) return InvalidArgumentError("--http-max-body-mb must be <= 2047");
  ASTR_RETURN_IF_ERROR(positive(f.http_idle_timeout_s, "http-idle-timeout-s"));
  if (!(f.sse_ping_s > 0) || f.sse_ping_s > 3600) {
    return InvalidArgumentError("--sse-ping-s must be in (0, 3600]");
  }
  return sched::ValidateSchedulerOptions(f.sched);
}

void LogWorker(const std::string& address, const v1::InfoResponse& info) {
  LOG(INFO) << "worker " << address << ": " << info.model_name() << " (" << info.architecture()
            << ", hash " << info.content_hash() << "), backend " << info.backend() << ", "
            << info.num_pages() << " pages of " << info.page_size() << " tokens, max batch "
            << info.max_batch();
}

// The workers to start with: every fixed entry of --workers (each must answer within the
// timeout), and, when there are dns:/// entries, the first worker their names resolve to that
// answers (waiting for one until the timeout when no fixed entry gave a worker). The other
// addresses join afterwards through WorkerMembership.
StatusOr<std::vector<std::unique_ptr<sched::WorkerConnection>>> ConnectInitial(
    const std::vector<sched::WorkerSpec>& specs, sched::WorkerMembership* membership,
    std::chrono::seconds timeout, std::chrono::milliseconds step_timeout,
    const rpc::ChannelSecurity& security) {
  std::vector<std::unique_ptr<sched::WorkerConnection>> workers;
  bool any_dns = false;
  for (const sched::WorkerSpec& spec : specs) {
    any_dns |= spec.dns;
    if (spec.dns) continue;
    auto conn = sched::ConnectWorker(spec.text, timeout, step_timeout, security);
    if (!conn.ok()) return conn.status().WithContext("--workers");
    LogWorker(spec.text, (*conn)->info());
    workers.push_back(std::move(*conn));
  }
  if (any_dns && workers.empty()) {
    const auto deadline = Clock::now() + timeout;
    Status last = UnavailableError("no address yet");
    while (workers.empty()) {
      for (const std::string& address : membership->Resolve()) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        if (left.count() <= 0) break;
        auto conn = sched::ConnectWorker(
            address, std::min<std::chrono::milliseconds>(left, std::chrono::seconds(2)),
            step_timeout, security);
        if (!conn.ok()) {
          last = conn.status();
          continue;
        }
        LogWorker(address, (*conn)->info());
        workers.push_back(std::move(*conn));
        break;
      }
      if (!workers.empty()) break;
      if (Clock::now() >= deadline) {
        return UnavailableError("--workers: no worker answered within " +
                                std::to_string(timeout.count()) +
                                " s (--connect-timeout-s); last: " + std::string(last.message()));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
  }
  // The rule every member keeps (scheduler/worker_fit.h); the first worker defines the pool.
  const sched::PoolIdentity pool = sched::PoolOf(workers[0]->info());
  for (const auto& w : workers) {
    Status fits = sched::CheckWorkerFits(w->address(), w->info(), pool);
    if (!fits.ok()) {
      return fits.WithContext("--workers (the first one, " + workers[0]->address() +
                              ", defines the pool)");
    }
  }
  return workers;
}

// The tokenizer, chat template and limits of the served model.
StatusOr<front::ServedModel> LoadServedModel(const std::string& flag_path,
                                             const std::string& chat_template_file,
                                             const std::string& generation_config,
                                             const std::vector<v1::InfoResponse>& infos) {
  const std::string path = flag_path.empty() ? infos[0].model_path() : flag_path;
  const std::string source = flag_path.empty() ? "the first worker's model path" : "--tokenizer";
  front::ServedModel model;
  auto tokenizer = tok::Tokenizer::Load(path);
  if (!tokenizer.ok()) {
    return tokenizer.status().WithContext("tokenizer from " + source + " " + path +
                                          " (set --tokenizer to a copy readable here)");
  }
  model.tokenizer = *tokenizer;
  auto chat = chat::ChatTemplate::LoadOrOverride(path, chat_template_file);
  if (!chat.ok() && !chat_template_file.empty()) return chat.status();
  if (chat.ok()) {
    model.chat_template = std::make_shared<chat::ChatTemplate>(std::move(*chat));
  } else {
    model.no_chat_template_reason = chat.status().message();
  }
  model.vocab_size = infos[0].vocab_size();
  model.max_context_tokens = infos[0].max_context_tokens();
  for (const auto& info : infos) {
    model.max_context_tokens = std::min(model.max_context_tokens, info.max_context_tokens());
  }
  // The tokenizer's EOS ids (generation_config.json) and those the model file names.
  model.eos_token_ids = model.tokenizer->eos_ids();
  MergeTokenIds(&model.eos_token_ids, infos[0].eos_token_ids());
  if (generation_config != "none") {
    const std::string from = generation_config == "auto" ? path : generation_config;
    auto defaults = model::LoadGenerationDefaults(from);
    if (!defaults.ok()) return defaults.status().WithContext("--generation-config");
    model.generation_defaults = std::move(*defaults);
  }
  LOG(INFO) << "sampling defaults of requests that leave them unset: "
            << model.generation_defaults.Describe() << " (--generation-config " << generation_config
            << ")";
  LOG(INFO) << "tokenizer " << path << ": " << model.tokenizer->Describe() << "; chat template: "
            << (model.chat_template ? model.chat_template->origin()
                                    : "none (" + model.no_chat_template_reason + ")");
  if (model.tokenizer->vocab_size() > model.vocab_size) {
    LOG(WARNING) << "the tokenizer has " << model.tokenizer->vocab_size()
                 << " ids but the model only " << model.vocab_size
                 << "; prompts using the extra ids are refused";
  }
  return model;
}

// Sets grpc.health.v1 to SERVING / NOT_SERVING from GetServerStats.accepting_requests every
// kHealthInterval, logging each change with its reason.
class HealthUpdater {
 public:
  HealthUpdater(grpc::Server* server, front::GenerateService* service)
      : server_(server), service_(service), thread_([this] { Run(); }) {}
  ~HealthUpdater() { Stop(); }
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Run() {
    std::unique_lock<std::mutex> lock(mu_);
    do {
      const v1::GetServerStatsResponse stats = service_->Stats();
      const bool serving = stats.accepting_requests();
      if (serving != serving_) {
        serving_ = serving;
        server_->GetHealthCheckService()->SetServingStatus(v1::Generate::service_full_name(),
                                                           serving);
        server_->GetHealthCheckService()->SetServingStatus(serving);
        LOG(INFO) << (serving ? "health: SERVING"
                              : "health: NOT_SERVING (" + stats.not_accepting_reason() + ")");
      }
    } while (!cv_.wait_for(lock, kHealthInterval, [this] { return stop_; }));
  }

  static constexpr auto kHealthInterval = std::chrono::milliseconds(250);
  grpc::Server* const server_;
  front::GenerateService* const service_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool serving_ = true;  // what the server was started with
  std::thread thread_;
};

// Refuses new requests, waits for the running ones (logging each second), aborts what is left
// after `timeout`.
void Drain(sched::Scheduler* scheduler, front::GenerateService* service,
           std::chrono::seconds timeout) {
  scheduler->StartDrain();  // the front asks the scheduler, so new calls are refused from here
  const auto deadline = Clock::now() + timeout;
  auto next_log = Clock::now();
  while (!scheduler->Idle()) {
    const auto now = Clock::now();
    const v1::GetServerStatsResponse stats = scheduler->Stats();
    if (now >= deadline) {
      LOG(WARNING) << "drain timeout (" << timeout.count() << " s): aborting "
                   << stats.waiting_requests() + stats.running_requests() << " requests";
      service->CancelAll(UnavailableError("the server is shutting down: drain timeout passed"));
      return;
    }
    if (now >= next_log) {
      LOG(INFO) << "draining: " << stats.running_requests() << " running, "
                << stats.waiting_requests() << " waiting";
      next_log = now + std::chrono::seconds(1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  LOG(INFO) << "drained: no request left";
}

int Serve(const Flags& f, std::unique_ptr<sched::Scheduler> scheduler, front::ServedModel model,
          sched::WorkerMembership* membership) {
  front::RequestLimits limits;
  limits.max_n = static_cast<int32_t>(f.max_n);
  limits.max_stop_strings = static_cast<int32_t>(f.max_stop_strings);
  limits.max_logit_bias = static_cast<int32_t>(std::min<int64_t>(f.max_logit_bias, INT32_MAX));
  limits.max_stop_token_ids =
      static_cast<int32_t>(std::min<int64_t>(f.max_stop_token_ids, INT32_MAX));
  front::FrontLimits front_limits;
  front_limits.max_calls_per_peer = f.max_calls_per_peer;
  if (front_limits.max_calls_per_peer == 0) {
    int64_t running = 0;
    for (const v1::InfoResponse& info : scheduler->WorkerInfos()) {
      running += std::min<int64_t>(f.sched.max_running, info.max_batch());
    }
    // At least kMinAutoCallsPerPeer, so a small pool (--max-running 1) does not make one
    // connection's ordinary bursts fail.
    front_limits.max_calls_per_peer = std::max<int64_t>(kMinAutoCallsPerPeer, running / 2);
  }
  LOG(INFO) << "at most " << front_limits.max_calls_per_peer
            << " open calls per client connection (--max-calls-per-peer)";
  front_limits.stream_stall_timeout = std::chrono::seconds(f.stream_stall_timeout_s);
  front_limits.stream_pause_after = std::chrono::milliseconds(f.stream_pause_ms);
  front_limits.threads = static_cast<int>(f.front_threads);
  front_limits.api_keys = f.api_keys;
  front_limits.compiles.workers = static_cast<int>(f.grammar_compile_workers);
  front_limits.compiles.per_client =
      static_cast<int>(std::min<int64_t>(f.grammar_compiles_per_client, 1 << 20));
  front_limits.compiles.max_queued_per_client =
      static_cast<int>(std::min<int64_t>(f.grammar_max_queued_per_client, 1 << 20));
  front_limits.compiles.max_queued_bytes = f.grammar_max_queued_mb << 20;
  front::GenerateService service(scheduler.get(), std::move(model), limits, front_limits);
  front::GenerateGrpcService grpc_service(&service);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(f.listen, ServerCredentials(f), &port);
  // gRPC sets SO_REUSEPORT by default: a second server on a port in use would then start and
  // share the port, and clients would land on either process at random.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.RegisterService(&grpc_service);
  builder.SetMaxReceiveMessageSize(static_cast<int>(f.max_message_mb << 20));
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    LOG(ERROR) << "--listen: cannot listen on " << f.listen
               << " (address in use, or not a local address)";
    return 1;
  }
  // Every worker is connected: serving. Both the server ("") and the service by name answer.
  server->GetHealthCheckService()->SetServingStatus(v1::Generate::service_full_name(), true);
  server->GetHealthCheckService()->SetServingStatus(true);
  // Liveness (a probe that restarts the process) must not follow admission: SERVING until exit.
  server->GetHealthCheckService()->SetServingStatus(std::string(rpc::kLivenessService), true);
  const std::string host = f.listen.substr(0, f.listen.rfind(':'));
  // Launchers and tests read this line to learn the port (--listen HOST:0).
  LOG(INFO) << "listening on " << host << ":" << port;

  // Health follows admission: NOT_SERVING while no new request would be admitted (no worker up,
  // queue full, draining), so load balancers and probes route around this replica.
  HealthUpdater health(server.get(), &service);

  // The admin service: its own server, so that admin traffic never takes a generation slot.
  std::unique_ptr<front::AdminService> admin;
  std::unique_ptr<grpc::Server> admin_server;
  if (!f.admin_listen.empty()) {
    if (f.admin_token.empty()) {
      LOG(WARNING) << "no --admin-token-file: every admin call will be refused";
    }
    admin =
        std::make_unique<front::AdminService>(scheduler.get(), f.admin_token, f.worker_security);
    grpc::ServerBuilder admin_builder;
    int admin_port = 0;
    admin_builder.AddListeningPort(f.admin_listen, ServerCredentials(f), &admin_port);
    admin_builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    admin_builder.RegisterService(admin.get());
    admin_builder.SetMaxReceiveMessageSize(rpc::kMaxMessageBytes);
    admin_server = admin_builder.BuildAndStart();
    if (admin_server == nullptr || admin_port == 0) {
      LOG(ERROR) << "--admin-listen: cannot listen on " << f.admin_listen
                 << " (address in use, or not a local address)";
      return 1;
    }
    const std::string admin_host = f.admin_listen.substr(0, f.admin_listen.rfind(':'));
    LOG(INFO) << "admin service on " << admin_host << ":" << admin_port;
  } else {
    LOG(INFO) << "no admin service (--admin-token-file or --admin-listen serves one)";
  }

  // SGLang's admin HTTP routes: their own listener, only with the admin token.
  std::unique_ptr<front::AdminService> http_admin_calls;
  std::unique_ptr<front::AdminHttp> admin_http;
  if (!f.admin_http_listen.empty()) {
    front::AdminService* calls = admin.get();
    if (calls == nullptr) {
      http_admin_calls =
          std::make_unique<front::AdminService>(scheduler.get(), f.admin_token, f.worker_security);
      calls = http_admin_calls.get();
    }
    http::ServerOptions options;
    options.listen = f.admin_http_listen;
    options.max_body_bytes = 1 << 20;
    options.tls_cert_file = f.tls_cert_file;
    options.tls_key_file = f.tls_key_file;
    options.tls_client_ca_file = f.tls_client_ca_file;
    admin_http = std::make_unique<front::AdminHttp>(calls, scheduler.get(), std::move(options));
    if (Status s = admin_http->Start(); !s.ok()) {
      LOG(ERROR) << "--admin-http-listen: " << s.message();
      return 1;
    }
    const std::string host = f.admin_http_listen.substr(0, f.admin_http_listen.rfind(':'));
    LOG(INFO) << "admin http on " << host << ":" << admin_http->port();
  }

  // The OpenAI-compatible HTTP API: in-process, on the same GenerateService as gRPC.
  std::unique_ptr<front::HttpFront> http;
  if (!f.http_listen.empty()) {
    front::HttpFrontOptions options;
    options.server.listen = f.http_listen;
    options.server.threads = static_cast<int>(f.http_threads);
    options.server.max_body_bytes = static_cast<size_t>(f.http_max_body_mb) << 20;
    options.server.idle_timeout = std::chrono::seconds(f.http_idle_timeout_s);
    options.server.write_timeout =
        f.stream_stall_timeout_s > 0 ? std::chrono::milliseconds(f.stream_stall_timeout_s * 1000)
                                     : std::chrono::milliseconds(24LL * 3600 * 1000);
    options.served_model_name = f.served_model_name;
    options.tool_call_parser = f.tool_call_parser;
    options.server.tls_cert_file = f.tls_cert_file;
    options.server.tls_key_file = f.tls_key_file;
    options.server.tls_client_ca_file = f.tls_client_ca_file;
    options.ping_interval = std::chrono::milliseconds(static_cast<int64_t>(f.sse_ping_s * 1000));
    options.threads = static_cast<int>(f.front_threads);
    options.metrics = [s = scheduler.get()] { return s->RenderMetrics(); };
    options.registry = &scheduler->metrics();
    http = std::make_unique<front::HttpFront>(&service, std::move(options));
    if (Status s = http->Start(); !s.ok()) {
      LOG(ERROR) << "--http-listen: " << s.message();
      return 1;
    }
    const std::string http_host = f.http_listen.substr(0, f.http_listen.rfind(':'));
    LOG(INFO) << "http api on " << http_host << ":" << http->port();
  }

  // Workers join and leave from here on (stopped before the scheduler goes).
  membership->Start(scheduler.get());
  const int sig = rpc::WaitForShutdownSignal([&f, &http, &admin_http] {
    // Each part reloads on its own: a bad file leaves that part as it was (and says why).
    auto report = [](const char* what, const Status& s) {
      if (s.ok()) {
        LOG(INFO) << "reloaded " << what;
      } else {
        LOG(ERROR) << "kept the old " << what << ": " << s.message();
      }
    };
    if (f.api_keys != nullptr) report("API keys", f.api_keys->Reload());
    if (f.server_tls != nullptr) report("TLS certificate (gRPC)", f.server_tls->Reload());
    if (http != nullptr && f.server_tls != nullptr) {
      report("TLS certificate (HTTP)", http->ReloadTls());
    }
    if (admin_http != nullptr && f.server_tls != nullptr) {
      report("TLS certificate (admin HTTP)", admin_http->ReloadTls());
    }
    if (f.worker_security.tls != nullptr) {
      report("worker TLS files", f.worker_security.tls->Reload());
    }
  });
  health.Stop();
  LOG(INFO) << "received " << (sig == SIGINT ? "SIGINT" : "SIGTERM")
            << ": draining (new requests get UNAVAILABLE)";
  server->GetHealthCheckService()->SetServingStatus(false);
  Drain(scheduler.get(), &service, std::chrono::seconds(f.drain_timeout_s));
  membership->Stop();
  if (http != nullptr) http->Stop();
  if (admin_http != nullptr) admin_http->Stop();
  if (admin_server != nullptr) {
    admin_server->Shutdown(std::chrono::system_clock::now() + kShutdownGrace);
    admin_server->Wait();
  }
  server->Shutdown(std::chrono::system_clock::now() + kShutdownGrace);
  server->Wait();
  http.reset();
  scheduler.reset();
  LOG(INFO) << "stopped";
  return 0;
}

int Main(int argc, const char* const* argv) {
  rpc::BlockShutdownSignals();  // before any thread starts, so every thread inherits the mask
  FlagSet fs("astr-scheduler",
             "Serve the public astr.v1.Generate gRPC API (plus grpc.health.v1 and server "
             "reflection) on top of astr-worker processes: validation, admission, "
             "continuous batching, detokenization and stop strings. Exits 0 on SIGTERM or "
             "SIGINT after draining.");
  Flags f;
  Register(&fs, &f);
  LogOptions log;
  log.Register(&fs);
  if (int rc = fs.ParseOrExit(argc, argv); rc >= 0) return rc;
  if (!fs.WasSet("admin-listen") && !f.admin_token_file.empty()) {
    f.admin_listen = kDefaultAdminListen;
  }
  f.sched.worker_drain_timeout_ms = f.worker_drain_timeout_s * 1000;
  Status valid = Validate(f);
  if (valid.ok() && !f.admin_http_listen.empty() && f.admin_token_file.empty()) {
    valid = InvalidArgumentError(
        "--admin-http-listen needs --admin-token-file (the admin HTTP routes are never served "
        "without the admin token)");
  }
  if (valid.ok() && !f.admin_token_file.empty()) {
    auto token = front::ReadAdminToken(f.admin_token_file);
    if (token.ok()) {
      f.admin_token = std::move(*token);
    } else {
      valid = token.status();
    }
  }
  if (valid.ok() && !f.api_key_file.empty()) {
    auto keys = front::ApiKeys::Load(f.api_key_file);
    if (keys.ok()) {
      f.api_keys = std::move(*keys);
    } else {
      valid = keys.status();
    }
  }
  if (valid.ok()) valid = LoadTls(&f);
  if (valid.ok()) valid = InitLogging(argv[0], log);
  if (!valid.ok()) {
    std::fprintf(stderr, "astr-scheduler: %s\n", valid.message().c_str());
    return 2;
  }
  rpc::ForwardGrpcLogs();
  auto specs = sched::ParseWorkerSpecs(f.workers);
  if (!specs.ok()) {
    std::fprintf(stderr, "astr-scheduler: %s\n", specs.status().message().c_str());
    return 2;
  }
  const auto step_timeout = std::chrono::milliseconds(f.step_timeout_ms);
  sched::MembershipOptions membership_options;
  membership_options.refresh =
      std::chrono::milliseconds(static_cast<int64_t>(f.worker_refresh_s * 1000));
  membership_options.connect = [step_timeout, security = f.worker_security](
                                   const std::string& address, std::chrono::milliseconds timeout) {
    return sched::ConnectWorker(address, timeout, step_timeout, security);
  };
  sched::WorkerMembership membership(*specs, membership_options);
  auto workers = ConnectInitial(*specs, &membership, std::chrono::seconds(f.connect_timeout_s),
                                step_timeout, f.worker_security);
  if (!workers.ok()) {
    LOG(ERROR) << workers.status().ToString();
    return 1;
  }
  std::vector<v1::InfoResponse> infos;
  for (const auto& w : *workers) infos.push_back(w->info());
  auto model = LoadServedModel(f.tokenizer, f.chat_template, f.generation_config, infos);
  if (!model.ok()) {
    LOG(ERROR) << model.status().ToString();
    return 1;
  }
  sched::ConstraintCompilerOptions compile_options;
  compile_options.threads = static_cast<int>(std::min<int64_t>(f.grammar_threads, 256));
  compile_options.cache_bytes = f.grammar_cache_mb << 20;
  compile_options.budget.time = std::chrono::milliseconds(f.grammar_max_compile_ms);
  compile_options.budget.memory_bytes = f.grammar_max_compile_mb << 20;
  auto constraints = front::MakeConstraintCompiler(*model->tokenizer, model->vocab_size,
                                                   model->eos_token_ids, compile_options);
  if (!constraints.ok()) {
    LOG(ERROR) << constraints.status().ToString();
    return 1;
  }
  model->constraints = std::move(*constraints);
  auto scheduler = sched::Scheduler::Create(f.sched, std::move(*workers));
  if (!scheduler.ok()) {
    LOG(ERROR) << scheduler.status().ToString();
    return 1;
  }
  {
    std::shared_ptr<const sched::ConstraintCompiler> c = model->constraints;
    metrics::Registry& r = (*scheduler)->metrics();
    r.AddCallbackCounter("astr:constraint_compiles_total",
                         "Structured-output constraints compiled (cache hits not included).", {})
        .Add({}, [c] { return static_cast<double>(c->stats().compiles); });
    r.AddCallbackCounter("astr:constraint_compile_seconds_total",
                         "Wall time of those compiles (the trial in a child process and the "
                         "scheduler's own compile).",
                         {})
        .Add({}, [c] { return static_cast<double>(c->stats().compile_ns) * 1e-9; });
    r.AddCallbackCounter("astr:constraint_cache_hits_total",
                         "Structured-output constraints found compiled in the cache.", {})
        .Add({}, [c] { return static_cast<double>(c->stats().cache_hits); });
    r.AddCallbackGauge("astr:constraint_cache_bytes",
                       "Heap held by the compiled constraints in the cache (--grammar-cache-mb).",
                       {})
        .Add({}, [c] { return static_cast<double>(c->stats().cache_bytes); });
    auto& refusals = r.AddCallbackCounter(
        "astr:constraint_compile_refusals_total",
        "Constraint compiles refused: over the time or memory budget, over a size limit, the "
        "client's queue full (busy), or cancelled by their client.",
        {"reason"});
    refusals.Add({"time"}, [c] { return static_cast<double>(c->stats().over_time); });
    refusals.Add({"memory"}, [c] { return static_cast<double>(c->stats().over_memory); });
    refusals.Add({"size"}, [c] { return static_cast<double>(c->stats().too_large); });
    refusals.Add({"busy"}, [c] { return static_cast<double>(c->stats().refused_busy); });
    refusals.Add({"cancelled"}, [c] { return static_cast<double>(c->stats().cancelled); });
  }
  return Serve(f, std::move(*scheduler), std::move(*model), &membership);
}

}  // namespace
}  // namespace astr

int main(int argc, char** argv) { return astr::Main(argc, argv); }
