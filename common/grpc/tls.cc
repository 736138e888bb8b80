#include "common/grpc/tls.h"

#include <grpcpp/security/tls_credentials_options.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "common/base/file_util.h"

namespace astr::rpc {
namespace {

namespace fs = std::filesystem;

// The staged copies sit in DIR/gen-N/; DIR/current is a symlink to the newest. Replacing the
// link is one rename, so gRPC's watcher reads either the old pair or the new one, never a mix.
constexpr const char* kCurrent = "current";

std::string OpenSslError() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "no PEM data";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};

std::unique_ptr<BIO, BioFree> MemBio(const std::string& pem) {
  return std::unique_ptr<BIO, BioFree>(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// The file's text; errors name the flag.
StatusOr<std::string> ReadFile(const std::string& flag, const std::string& path) {
  auto text = ReadFileToString(path);
  if (!text.ok()) return text.status().WithContext(flag);
  if (text->empty()) return InvalidArgumentError(flag + ": " + path + " is empty");
  return text;
}

Status WriteFile(const fs::path& path, const std::string& text, mode_t mode) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return InternalError("cannot write " + path.string());
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok) return InternalError("cannot write " + path.string());
  ::chmod(path.c_str(), mode);
  return OkStatus();
}

}  // namespace

Status CheckKeyPair(const std::string& cert_pem, const std::string& key_pem) {
  ERR_clear_error();
  auto cert_bio = MemBio(cert_pem);
  std::unique_ptr<X509, X509Free> cert(
      PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr));
  if (cert == nullptr)
    return InvalidArgumentError("not a PEM certificate (" + OpenSslError() + ")");
  auto key_bio = MemBio(key_pem);
  std::unique_ptr<EVP_PKEY, KeyFree> key(
      PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
  if (key == nullptr) {
    return InvalidArgumentError("not a PEM private key, or encrypted (" + OpenSslError() + ")");
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return InvalidArgumentError("the private key does not belong to the certificate");
  }
  return OkStatus();
}

Status CheckCertificates(const std::string& pem) {
  ERR_clear_error();
  auto bio = MemBio(pem);
  std::unique_ptr<X509, X509Free> cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (cert == nullptr) return InvalidArgumentError("no PEM certificate (" + OpenSslError() + ")");
  return OkStatus();
}

StatusOr<std::shared_ptr<TlsFiles>> TlsFiles::Create(TlsPaths paths, bool need_identity,
                                                     bool need_ca) {
  const std::string& p = paths.flag;
  if (paths.cert_file.empty() != paths.key_file.empty()) {
    return InvalidArgumentError(p + "-cert-file and " + p + "-key-file go together: give both");
  }
  if (need_identity && paths.cert_file.empty()) {
    // Only a CA was given (ServerTlsFromFlags calls this when some flag is set).
    return InvalidArgumentError(paths.CaFlag() + " needs " + p + "-cert-file and " + p +
                                "-key-file (a server presents its own certificate)");
  }
  if (need_ca && paths.ca_file.empty()) {
    return InvalidArgumentError(paths.CaFlag() + " is required here");
  }
  std::shared_ptr<TlsFiles> files(new TlsFiles(std::move(paths)));
  std::string tmpl = (fs::temp_directory_path() / "astr-tls-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) {
    return InternalError("cannot make a private folder for the TLS files in " +
                         fs::temp_directory_path().string());
  }
  files->dir_ = tmpl;
  if (Status s = files->Stage(); !s.ok()) return s;
  const std::string current = files->dir_ + "/" + kCurrent;
  if (files->has_identity()) {
    files->provider_ = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
        current + "/key.pem", current + "/cert.pem",
        files->has_ca() ? current + "/ca.pem" : std::string(), kWatchIntervalS);
  } else {
    files->provider_ = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
        current + "/ca.pem", kWatchIntervalS);
  }
  return files;
}

TlsFiles::~TlsFiles() {
  provider_.reset();  // stops the watcher before its files go
  std::error_code ec;
  if (!dir_.empty()) fs::remove_all(dir_, ec);
}

Status TlsFiles::Stage() {
  const std::string& p = paths_.flag;
  std::string cert, key, ca;
  if (has_identity()) {
    auto c = ReadFile(p + "-cert-file", paths_.cert_file);
    if (!c.ok()) return c.status();
    auto k = ReadFile(p + "-key-file", paths_.key_file);
    if (!k.ok()) return k.status();
    if (Status s = CheckKeyPair(*c, *k); !s.ok()) {
      return InvalidArgumentError(p + "-cert-file " + paths_.cert_file + " / " + p + "-key-file " +
                                  paths_.key_file + ": " + s.message());
    }
    cert = std::move(*c);
    key = std::move(*k);
  }
  if (has_ca()) {
    auto c = ReadFile(paths_.CaFlag(), paths_.ca_file);
    if (!c.ok()) return c.status();
    if (Status s = CheckCertificates(*c); !s.ok()) {
      return InvalidArgumentError(paths_.CaFlag() + " " + paths_.ca_file + ": " + s.message());
    }
    ca = std::move(*c);
  }
  // A new generation folder, then the link swung to it.
  int gen = 0;
  std::error_code ec;
  const fs::path current = fs::path(dir_) / kCurrent;
  if (fs::is_symlink(current, ec)) {
    gen = std::atoi(fs::read_symlink(current, ec).string().substr(4).c_str()) + 1;
  }
  const std::string name = "gen-" + std::to_string(gen);
  const fs::path folder = fs::path(dir_) / name;
  fs::create_directory(folder, ec);
  if (ec) return InternalError("cannot make " + folder.string() + ": " + ec.message());
  if (has_identity()) {
    if (Status s = WriteFile(folder / "cert.pem", cert, 0644); !s.ok()) return s;
    if (Status s = WriteFile(folder / "key.pem", key, 0600); !s.ok()) return s;
  }
  if (has_ca()) {
    if (Status s = WriteFile(folder / "ca.pem", ca, 0644); !s.ok()) return s;
  }
  const fs::path link = fs::path(dir_) / ("next-" + name);
  fs::create_symlink(name, link, ec);
  if (!ec) fs::rename(link, current, ec);
  if (ec) return InternalError("cannot switch to " + folder.string() + ": " + ec.message());
  // The generation before the previous one is no longer read by anyone (the watcher reads the
  // link's target anew each time and finishes a read well within a watch interval).
  if (gen >= 2) fs::remove_all(fs::path(dir_) / ("gen-" + std::to_string(gen - 2)), ec);
  return OkStatus();
}

Status TlsFiles::Reload() {
  std::lock_guard<std::mutex> lock(mu_);
  return Stage();
}

std::string TlsFiles::staged_cert() const { return dir_ + "/" + kCurrent + "/cert.pem"; }
std::string TlsFiles::staged_key() const { return dir_ + "/" + kCurrent + "/key.pem"; }
std::string TlsFiles::staged_ca() const { return dir_ + "/" + kCurrent + "/ca.pem"; }

std::shared_ptr<grpc::ServerCredentials> TlsFiles::ServerCredentials() const {
  grpc::experimental::TlsServerCredentialsOptions options(provider_);
  options.watch_identity_key_cert_pairs();
  if (has_ca()) {
    options.watch_root_certs();
    options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  } else {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  return grpc::experimental::TlsServerCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> TlsFiles::ChannelCredentials() const {
  grpc::experimental::TlsChannelCredentialsOptions options;
  options.set_certificate_provider(provider_);
  options.watch_root_certs();
  if (has_identity()) options.watch_identity_key_cert_pairs();
  return grpc::experimental::TlsCredentials(options);
}

StatusOr<std::shared_ptr<TlsFiles>> ServerTlsFromFlags(const std::string& cert_file,
                                                       const std::string& key_file,
                                                       const std::string& client_ca_file) {
  if (cert_file.empty() && key_file.empty() && client_ca_file.empty()) {
    return std::shared_ptr<TlsFiles>();
  }
  return TlsFiles::Create({.flag = "--tls",
                           .ca_flag = "--tls-client-ca-file",
                           .cert_file = cert_file,
                           .key_file = key_file,
                           .ca_file = client_ca_file},
                          /*need_identity=*/true, /*need_ca=*/false);
}

std::shared_ptr<grpc::ChannelCredentials> ClientCredentials(const ChannelSecurity& security,
                                                            grpc::ChannelArguments* args) {
  if (security.tls == nullptr) return grpc::InsecureChannelCredentials();
  if (!security.server_name.empty()) {
    args->SetString(GRPC_SSL_TARGET_NAME_OVERRIDE_ARG, security.server_name);
  }
  return security.tls->ChannelCredentials();
}

}  // namespace astr::rpc
