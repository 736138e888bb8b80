// TLS and mutual TLS for the gRPC endpoints (public API, admin, scheduler <-> worker), with the
// certificates reloaded on SIGHUP.
//
// gRPC reads certificates through a certificate provider; the one that reloads,
// FileWatcherCertificateProvider, re-reads its files on a timer. Pointed at the operator's files
// it would pick up a half-written file, or a new certificate before its key. So a TlsFiles copies
// the operator's files into a private folder (0700) after checking them (the certificate parses,
// the key parses and belongs to it, the CA parses), and the provider watches the copies. Reload()
// checks the files again and replaces the copies only when they pass: a bad file on SIGHUP is
// refused with a log line and the old certificates keep serving. gRPC notices the new copies
// within kWatchIntervalS; connections already open keep their session.
#pragma once

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/support/channel_arguments.h>

#include <memory>
#include <mutex>
#include <string>

#include "common/base/status.h"

namespace astr::rpc {

// How often gRPC looks at the staged copies (its minimum).
inline constexpr int kWatchIntervalS = 1;

// The paths an endpoint's TLS flags name. `flag` is the flags' common prefix in messages
// ("--tls", "--worker-tls"): "--tls-cert-file: ..." names the flag at fault.
struct TlsPaths {
  std::string flag = "--tls";
  std::string ca_flag;    // the CA's flag when it is not FLAG-ca-file
  std::string cert_file;  // PEM certificate chain, leaf first
  std::string key_file;   // PEM private key of the leaf
  std::string ca_file;    // PEM CA bundle: verifies the peer
  std::string CaFlag() const { return ca_flag.empty() ? flag + "-ca-file" : ca_flag; }
};

// Checks PEM text: a certificate chain and the private key of its first certificate.
Status CheckKeyPair(const std::string& cert_pem, const std::string& key_pem);
// Checks PEM text holding at least one certificate.
Status CheckCertificates(const std::string& pem);

class TlsFiles {
 public:
  // Checks and stages `paths`. `need_identity`: the certificate and key are required (a server);
  // else they are optional, but not one without the other (a client with or without mTLS).
  // `need_ca`: the CA is required (a client verifying its server).
  static StatusOr<std::shared_ptr<TlsFiles>> Create(TlsPaths paths, bool need_identity,
                                                    bool need_ca);
  ~TlsFiles();
  TlsFiles(const TlsFiles&) = delete;
  TlsFiles& operator=(const TlsFiles&) = delete;

  // Reads and checks the files again; when they pass, the staged copies are replaced (gRPC loads
  // them within kWatchIntervalS). On error nothing changes.
  Status Reload();

  const TlsPaths& paths() const { return paths_; }
  bool has_identity() const { return !paths_.cert_file.empty(); }
  bool has_ca() const { return !paths_.ca_file.empty(); }
  // The staged copies (what an HTTP server or a test may load too).
  std::string staged_cert() const;
  std::string staged_key() const;
  std::string staged_ca() const;

  // Server credentials: this identity; with a CA, clients must present a certificate it signed
  // (mTLS), else none is asked for.
  std::shared_ptr<grpc::ServerCredentials> ServerCredentials() const;
  // Channel credentials: verify the server against the CA (a target name override, if any, is a
  // channel argument: GRPC_SSL_TARGET_NAME_OVERRIDE_ARG); present this identity when there is one.
  std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials() const;

 private:
  explicit TlsFiles(TlsPaths paths) : paths_(std::move(paths)) {}
  Status Stage();

  const TlsPaths paths_;
  std::string dir_;  // the private folder of the staged copies
  std::mutex mu_;    // serializes Reload
  std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider_;
};

// A server's TLS from its --tls-cert-file, --tls-key-file and --tls-client-ca-file (mTLS when the
// CA is given): null when all three are empty (plaintext).
StatusOr<std::shared_ptr<TlsFiles>> ServerTlsFromFlags(const std::string& cert_file,
                                                       const std::string& key_file,
                                                       const std::string& client_ca_file);

// How a client dials: plaintext (no tls), or TLS verifying the server against tls's CA (and
// presenting tls's identity, mTLS), checking the name `server_name` in the server's certificate
// instead of the dialed host when it is set (workers behind changing pod addresses).
struct ChannelSecurity {
  std::shared_ptr<TlsFiles> tls;
  std::string server_name;
};

// The credentials for `security`; sets the target-name override in `args` when there is one.
std::shared_ptr<grpc::ChannelCredentials> ClientCredentials(const ChannelSecurity& security,
                                                            grpc::ChannelArguments* args);

}  // namespace astr::rpc
