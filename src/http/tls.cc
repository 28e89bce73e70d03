#include "http/tls.h"

#include <httplib.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace trainyard::http {
namespace {

struct FreeBio {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct FreeX509 {
  void operator()(X509* x) const { X509_free(x); }
};
struct FreeKey {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using BioPtr = std::unique_ptr<BIO, FreeBio>;
using X509Ptr = std::unique_ptr<X509, FreeX509>;
using KeyPtr = std::unique_ptr<EVP_PKEY, FreeKey>;

// The oldest error OpenSSL queued in this thread, in words ("" when none); clears the
// queue.
std::string TakeOpenSslError() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}

// A password callback that gives none: an encrypted key fails to load instead of
// prompting on the terminal.
int NoPassword(char*, int, int, void*) { return 0; }

// "FLAG FILE: " for messages.
std::string Where(const std::string& flag, const std::string& file) {
  return flag + " " + file + ": ";
}

Result<std::string> ReadFile(const std::string& flag, const std::string& file) {
  if (file.empty()) return InvalidArgument(flag + ": must not be empty");
  errno = 0;
  std::ifstream in(file, std::ios::binary);
  if (!in) return InvalidArgument(Where(flag, file) + "cannot read it: " + std::strerror(errno));
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) return InvalidArgument(Where(flag, file) + "cannot read it");
  return text.str();
}

BioPtr MemoryBio(const std::string& text) {
  return BioPtr(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

std::string FormatAsn1Time(const ASN1_TIME* t) {
  BioPtr out(BIO_new(BIO_s_mem()));
  ASN1_TIME_print(out.get(), t);
  char* data = nullptr;
  const long n = BIO_get_mem_data(out.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

// Puts the certificate chain and key into `ctx`, or says which file is wrong and why.
Status SetUpServerContext(SSL_CTX& ctx, const std::string& cert_file, const std::string& key_file) {
  TY_ASSIGN_OR_RETURN(std::string cert_text, ReadFile("--tls-cert", cert_file));
  TY_ASSIGN_OR_RETURN(std::string key_text, ReadFile("--tls-key", key_file));
  ERR_clear_error();

  BioPtr certs = MemoryBio(cert_text);
  X509Ptr leaf(PEM_read_bio_X509(certs.get(), nullptr, NoPassword, nullptr));
  if (leaf == nullptr) {
    TakeOpenSslError();
    return InvalidArgument(Where("--tls-cert", cert_file) +
                           "holds no PEM certificate (expected \"-----BEGIN CERTIFICATE-----\")");
  }
  if (X509_cmp_current_time(X509_get0_notAfter(leaf.get())) < 0) {
    return InvalidArgument(Where("--tls-cert", cert_file) + "the certificate expired on " +
                           FormatAsn1Time(X509_get0_notAfter(leaf.get())));
  }
  if (SSL_CTX_use_certificate(&ctx, leaf.get()) != 1) {
    return InvalidArgument(Where("--tls-cert", cert_file) +
                           "cannot use the certificate: " + TakeOpenSslError());
  }
  // The rest of the file: intermediate CAs, sent along so that clients can build the chain.
  while (X509* ca = PEM_read_bio_X509(certs.get(), nullptr, NoPassword, nullptr)) {
    if (SSL_CTX_add0_chain_cert(&ctx, ca) != 1) {
      X509_free(ca);
      return InvalidArgument(Where("--tls-cert", cert_file) +
                             "cannot use a chain certificate: " + TakeOpenSslError());
    }
  }
  ERR_clear_error();  // the end of the file

  BioPtr keys = MemoryBio(key_text);
  KeyPtr key(PEM_read_bio_PrivateKey(keys.get(), nullptr, NoPassword, nullptr));
  if (key == nullptr) {
    const std::string why = TakeOpenSslError();
    return InvalidArgument(Where("--tls-key", key_file) +
                           "holds no PEM private key, or an encrypted one (give the key "
                           "unencrypted: openssl pkey -in KEY -out PLAIN.key)" +
                           (why.empty() ? "" : "; openssl: " + why));
  }
  if (X509_check_private_key(leaf.get(), key.get()) != 1) {
    ERR_clear_error();
    return InvalidArgument(Where("--tls-key", key_file) +
                           "the key does not match the certificate in --tls-cert " + cert_file);
  }
  if (SSL_CTX_use_PrivateKey(&ctx, key.get()) != 1 || SSL_CTX_check_private_key(&ctx) != 1) {
    return InvalidArgument(Where("--tls-key", key_file) +
                           "cannot use the key: " + TakeOpenSslError());
  }
  SSL_CTX_set_min_proto_version(&ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(&ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Server>> MakeTlsServer(const std::string& cert_file,
                                              const std::string& key_file, ServerOptions options) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (ctx == nullptr) return Internal("cannot make a TLS context: " + TakeOpenSslError());
  if (Status s = SetUpServerContext(*ctx, cert_file, key_file); !s.ok()) {
    SSL_CTX_free(ctx);
    return s;
  }
  return std::make_unique<Server>(options, ctx);  // which owns ctx from now on
}

Status CheckCaFile(const std::string& flag, const std::string& ca_file) {
  TY_ASSIGN_OR_RETURN(std::string text, ReadFile(flag, ca_file));
  BioPtr bio = MemoryBio(text);
  X509Ptr first(PEM_read_bio_X509(bio.get(), nullptr, NoPassword, nullptr));
  ERR_clear_error();
  if (first == nullptr) {
    return InvalidArgument(Where(flag, ca_file) +
                           "holds no PEM certificate (expected \"-----BEGIN CERTIFICATE-----\")");
  }
  return Status::Ok();
}

void VerifyServer(httplib::Client& client, const std::string& ca_file) {
  client.enable_server_certificate_verification(true);
  if (ca_file.empty()) return;  // httplib then loads the system's store
  client.set_ca_cert_path(ca_file);
  // Trust the file's certificates as anchors even when not self-signed: the server's
  // own certificate or an intermediate CA works as well as a root.
  if (SSL_CTX* ctx = client.ssl_context(); ctx != nullptr) {
    X509_VERIFY_PARAM_set_flags(SSL_CTX_get0_param(ctx), X509_V_FLAG_PARTIAL_CHAIN);
  }
}

std::string DescribeError(const httplib::Result& result, const httplib::Client& client) {
  switch (result.error()) {
    case httplib::Error::SSLServerVerification: {
      const long verify = client.get_openssl_verify_result();
      return std::string("the server's certificate failed verification: ") +
             (verify != X509_V_OK ? X509_verify_cert_error_string(verify)
                                  : "it does not name the host in the URL");
    }
    case httplib::Error::SSLLoadingCerts:
      return "cannot load the CA certificates to verify the server with";
    case httplib::Error::SSLConnection:
      return "TLS handshake failed (does the server serve https?)";
    default:
      return httplib::to_string(result.error());  // the error's name, e.g. "Connection"
  }
}

}  // namespace trainyard::http
