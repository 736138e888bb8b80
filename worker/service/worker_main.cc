// astr-worker: loads a model and serves astr.v1.Worker (Info and the step stream) to
// astr-scheduler, plus grpc.health.v1 and server reflection, and optionally Prometheus metrics
// over HTTP (--metrics-listen). See docs/worker.md.
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/base/flags.h"
#include "common/base/logging.h"
#include "common/grpc/grpc_logging.h"
#include "common/grpc/health.h"
#include "common/grpc/keepalive.h"
#include "common/grpc/message_limits.h"
#include "common/grpc/shutdown_signal.h"
#include "common/grpc/stream_memory.h"
#include "common/grpc/tls.h"
#include "common/http/http_server.h"
#include "common/metrics/registry.h"
#include "worker/backend_loader.h"
#include "worker/engine_flags.h"
#include "worker/service/worker_loader.h"
#include "worker/service/worker_service.h"
#include "worker/weight_overlay.h"

namespace astr {
namespace {

// On SIGTERM the open step stream is drained first: the worker tells the scheduler (every answer
// says `draining`), which starts nothing new here and closes the stream once the running
// sequences are done, for up to --drain-timeout-s; then the step being executed finishes and is
// answered (bounded by kStepGrace) and the stream ends. After that only idle connections and
// unary calls remain; kShutdownGrace bounds how long they may hold the server.
constexpr auto kStepGrace = std::chrono::seconds(60);
constexpr auto kShutdownGrace = std::chrono::milliseconds(200);

int UsageError(const std::string& message) {
  std::fprintf(stderr, "astr-worker: %s\n", message.c_str());
  return 2;
}

// GET /metrics answers the service's metrics; any other path is 404, another method 405.
http::Handler MetricsHandler(const WorkerService* service) {
  return [service](std::shared_ptr<http::Exchange> exchange) {
    const http::Request& request = exchange->request();
    if (request.path != "/metrics") {
      exchange->Respond({.status = 404, .content_type = "text/plain", .body = "not found\n"});
    } else if (request.method != "GET") {
      exchange->Respond({.status = 405,
                         .content_type = "text/plain",
                         .headers = {{"Allow", "GET"}},
                         .body = "only GET\n"});
    } else {
      exchange->Respond({.status = 200,
                         .content_type = std::string(metrics::kTextContentType),
                         .body = service->RenderMetrics()});
    }
  };
}

// The TLS flags (--tls-*): the worker's certificate on --listen and --metrics-listen; with a
// client CA, the scheduler (and astr admin pushes) must present a certificate it signed.
struct TlsFlags {
  std::string cert_file, key_file, client_ca_file;
};

int Serve(const std::string& listen, const std::string& metrics_listen, int64_t drain_timeout_s,
          const TlsFlags& tls_flags, std::shared_ptr<rpc::TlsFiles> tls, LoadedWorker worker) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  WorkerService service(std::move(worker.info), std::move(worker.executor),
                        std::move(worker.updates));
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(
      listen, tls != nullptr ? tls->ServerCredentials() : grpc::InsecureServerCredentials(), &port);
  // gRPC sets SO_REUSEPORT by default: a second worker on a port in use would then start and
  // share the port with the first, and the scheduler would reach either at random.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // The scheduler pings every kWorkerKeepaliveTimeMs to notice a stopped worker (keepalive.h).
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             rpc::kWorkerKeepaliveTimeMs / 2);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder.RegisterService(&service);
  // A SequenceStart carries a whole prompt: allow long contexts.
  builder.SetMaxReceiveMessageSize(rpc::kMaxMessageBytes);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    LOG(ERROR) << "--listen: cannot listen on " << listen
               << " (address in use, or not a local address)";
    return 1;
  }
  std::unique_ptr<http::Server> metrics_server;  // stopped before `service` goes
  if (!metrics_listen.empty()) {
    auto started = http::Server::Start({.listen = metrics_listen,
                                        .threads = 1,
                                        .tls_cert_file = tls_flags.cert_file,
                                        .tls_key_file = tls_flags.key_file,
                                        .tls_client_ca_file = tls_flags.client_ca_file},
                                       MetricsHandler(&service));
    if (!started.ok()) {
      LOG(ERROR) << "--metrics-listen: " << started.status().message();
      return 1;
    }
    metrics_server = std::move(*started);
    // Tests read this line to learn the port (--metrics-listen HOST:0).
    LOG(INFO) << "metrics on " << metrics_listen.substr(0, metrics_listen.rfind(':')) << ":"
              << metrics_server->port();
  }
  // Readiness is the server's overall status (""); liveness a service of its own that stays
  // SERVING while the process runs, so that a probe never restarts a draining worker.
  server->GetHealthCheckService()->SetServingStatus(std::string(rpc::kLivenessService), true);
  const std::string host = listen.substr(0, listen.rfind(':'));
  // Launchers and tests read this line to learn the port (--listen HOST:0).
  LOG(INFO) << "listening on " << host << ":" << port;

  const int sig = rpc::WaitForShutdownSignal([&] {
    if (tls == nullptr) {
      LOG(INFO) << "no TLS files to reload";
      return;
    }
    for (Status s :
         {tls->Reload(), metrics_server != nullptr ? metrics_server->ReloadTls() : OkStatus()}) {
      if (!s.ok()) LOG(ERROR) << "kept the old TLS certificate: " << s.message();
    }
    LOG(INFO) << "TLS files reloaded";
  });
  LOG(INFO) << "received " << (sig == SIGINT ? "SIGINT" : "SIGTERM")
            << ": draining (running sequences may finish for up to " << drain_timeout_s
            << " s), then shutting down";
  server->GetHealthCheckService()->SetServingStatus("", false);
  service.Drain(std::chrono::seconds(drain_timeout_s), kStepGrace);
  server->Shutdown(std::chrono::system_clock::now() + kShutdownGrace);
  server->Wait();
  LOG(INFO) << "stopped";
  return 0;
}

int Main(int argc, const char* const* argv) {
  rpc::BlockShutdownSignals();  // before any thread starts, so every thread inherits the mask
  rpc::KeepFreedMemoryForStreams();
  FlagSet fs("astr-worker",
             "Serve a model to astr-scheduler: the astr.v1.Worker gRPC service (Info and "
             "the step stream), grpc.health.v1 (readiness: the server's status; liveness: "
             "service 'liveness') and server reflection. On SIGTERM or SIGINT it drains "
             "(--drain-timeout-s) and exits 0.");
  std::string model, backend;
  std::string listen = "127.0.0.1:50061";
  std::string metrics_listen;
  int64_t max_batch = 256;
  int64_t drain_timeout_s = 60;
  bool spare_weights = true;
  int64_t receive_buffers_mb = 64;
  TlsFlags tls_flags;
  fs.String("model", &model, "Model: a .gguf file or a Hugging Face folder.", /*required=*/true);
  fs.String("listen", &listen,
            "Address to serve on, HOST:PORT. Port 0 picks a free port; the bound address is "
            "logged (INFO) as 'listening on HOST:PORT' once the model is loaded.");
  fs.String("metrics-listen", &metrics_listen,
            "Serve Prometheus metrics (GET /metrics, docs/metrics.md) over HTTP on HOST:PORT; "
            "empty (the default) = off. Port 0 picks a free port; the bound address is logged "
            "(INFO) as 'metrics on HOST:PORT'.");
  fs.String("backend", &backend,
            "auto (CUDA where a usable GPU and the CUDA plugin exist, else cpu; the log says "
            "why CUDA was not used), cpu, cuda (an error if it cannot run), or instant "
            "(benchmarks only: plans are validated as for cpu but nothing is computed; each "
            "sample is an ordinary token chosen from the live id and position). Default: "
            "$ASTR_BACKEND if set, else auto.");
  fs.String("tls-cert-file", &tls_flags.cert_file,
            "PEM certificate chain served over TLS on --listen and --metrics-listen (with "
            "--tls-key-file); the scheduler then dials with --worker-tls-ca-file. Re-read on "
            "SIGHUP. Default: plaintext.");
  fs.String("tls-key-file", &tls_flags.key_file,
            "PEM private key of --tls-cert-file (unencrypted).");
  fs.String("tls-client-ca-file", &tls_flags.client_ca_file,
            "PEM CA bundle: with it, clients (the scheduler, weight pushes) must present a "
            "certificate it signed (mutual TLS; the scheduler's --worker-tls-cert-file). Needs "
            "--tls-cert-file.");
  EngineFlags engine;
  engine.RegisterBackend(&fs);
  fs.Int("max-batch", &max_batch, "Most sequences (plan entries) in one step.");
  fs.Int("drain-timeout-s", &drain_timeout_s,
         "On SIGTERM / SIGINT: how long the sequences running here may take to finish. Every "
         "step answer tells the scheduler the worker is draining, so it starts nothing new "
         "here; after this long the stream is cut and the rest restart on other workers (same "
         "outputs). 0 = cut at once. Kubernetes' terminationGracePeriodSeconds should exceed "
         "it.");
  fs.Bool("spare-weights", &spare_weights,
          "CPU backend: after a weight update, keep the weights it replaced and build the next "
          "update into their memory (no fresh pages to fault in: pushes several times faster "
          "on some machines), at the price of twice the weights' memory between updates. "
          "--spare-weights=false frees them (docs/rl.md \"Memory during an update\").");
  fs.Int("receive-buffers-mb", &receive_buffers_mb,
         "MiB of weight-update receive buffers kept from one update to the next (a push of the "
         "same model needs the same sizes again). 0 keeps none.");
  LogOptions log;
  log.Register(&fs);
  if (int rc = fs.ParseOrExit(argc, argv); rc >= 0) return rc;
  if (Status s = InitLogging(argv[0], log); !s.ok()) return UsageError(s.message());
  rpc::ForwardGrpcLogs();

  std::string backend_source;
  const std::string backend_name = RequestedBackend(backend, fs.WasSet("backend"), &backend_source);
  if (Status s = CheckWorkerBackend(backend_name, backend_source); !s.ok()) {
    return UsageError(s.message());
  }
  if (max_batch < 1) return UsageError("--max-batch must be >= 1");
  if (drain_timeout_s < 0) return UsageError("--drain-timeout-s must be >= 0");
  if (receive_buffers_mb < 0 || receive_buffers_mb > (int64_t{1} << 30)) {
    return UsageError("--receive-buffers-mb must be in [0, 2^30]");
  }
  ReceiveBuffers::Global().set_limit(static_cast<uint64_t>(receive_buffers_mb) << 20);
  auto tls = rpc::ServerTlsFromFlags(tls_flags.cert_file, tls_flags.key_file,
                                     tls_flags.client_ca_file);
  if (!tls.ok()) return UsageError(tls.status().message());
  engine.max_running = max_batch;  // EngineFlags sizes the backend's sample rows from it
  if (Status s = engine.Validate(); !s.ok()) return UsageError(s.message());

  WorkerConfig config{
      .model_path = model, .backend = backend_name, .backend_options = engine.BackendOpts()};
  config.backend_options.spare_weights = spare_weights;
  auto worker = LoadWorker(config);
  if (!worker.ok()) {
    LOG(ERROR) << worker.status().ToString();
    return 1;
  }
  return Serve(listen, metrics_listen, drain_timeout_s, tls_flags, std::move(*tls),
               std::move(*worker));
}

}  // namespace
}  // namespace astr

int main(int argc, char** argv) { return astr::Main(argc, argv); }
