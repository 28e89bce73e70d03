#include "http/tls.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "http/client.h"

namespace trainyard::http {
namespace {

using ::testing::HasSubstr;

struct FreeX509 {
  void operator()(X509* x) const { X509_free(x); }
};
struct FreeKey {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using X509Ptr = std::unique_ptr<X509, FreeX509>;
using KeyPtr = std::unique_ptr<EVP_PKEY, FreeKey>;

KeyPtr NewKey() { return KeyPtr(EVP_EC_gen("P-256")); }

void AddExtension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  ASSERT_NE(ext, nullptr) << value;
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
}

struct CertSpec {
  std::string name;
  std::string san = "";  // "IP:127.0.0.1"; empty for a CA
  bool ca = false;
  long valid_from_s = -3600;
  long valid_until_s = 3600;
};

// A certificate for `key`, signed by issuer_key (self-signed when issuer is null).
X509Ptr MakeCert(const CertSpec& spec, EVP_PKEY* key, X509* issuer, EVP_PKEY* issuer_key) {
  X509Ptr cert(X509_new());
  X509_set_version(cert.get(), 2);
  static long serial = 1;
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), serial++);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), spec.valid_from_s);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), spec.valid_until_s);
  X509_set_pubkey(cert.get(), key);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(spec.name.c_str()), -1, -1, 0);
  X509* signer = issuer != nullptr ? issuer : cert.get();
  X509_set_issuer_name(cert.get(), X509_get_subject_name(signer));
  AddExtension(cert.get(), signer, NID_basic_constraints,
               spec.ca ? "critical,CA:TRUE" : "CA:FALSE");
  if (spec.ca) AddExtension(cert.get(), signer, NID_key_usage, "critical,keyCertSign,cRLSign");
  if (!spec.san.empty()) AddExtension(cert.get(), signer, NID_subject_alt_name, spec.san.c_str());
  X509_sign(cert.get(), issuer_key != nullptr ? issuer_key : key, EVP_sha256());
  return cert;
}

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("trainyard-tls-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    ca_key_ = NewKey();
    ca_ = MakeCert({.name = "test CA", .ca = true}, ca_key_.get(), nullptr, nullptr);
    server_key_ = NewKey();
    server_ = MakeCert({.name = "server", .san = "IP:127.0.0.1"}, server_key_.get(), ca_.get(),
                       ca_key_.get());
    Write("ca.crt", {ca_.get()});
    Write("server.crt", {server_.get()});
    Write("chain.crt", {server_.get(), ca_.get()});
    Write("server.key", server_key_.get());
  }
  void TearDown() override {
    if (http_) http_->Stop();
    if (thread_.joinable()) thread_.join();
    std::filesystem::remove_all(dir_);
  }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  void Write(const std::string& name, std::initializer_list<X509*> certs) {
    FILE* f = std::fopen(Path(name).c_str(), "w");
    for (X509* c : certs) PEM_write_X509(f, c);
    std::fclose(f);
  }
  void Write(const std::string& name, EVP_PKEY* key) {
    FILE* f = std::fopen(Path(name).c_str(), "w");
    PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr);
    std::fclose(f);
  }
  void WriteText(const std::string& name, const std::string& text) {
    std::ofstream(Path(name)) << text;
  }

  // Serves GET /ping over TLS with the given files; returns the port.
  int Serve(const std::string& cert, const std::string& key) {
    auto server = MakeTlsServer(Path(cert), Path(key));
    EXPECT_TRUE(server.ok()) << server.status().ToString();
    if (!server.ok()) return 0;
    http_ = std::move(*server);
    http_->Get("/ping", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("pong", "text/plain");
    });
    const int port = http_->BindToAnyPort("127.0.0.1");
    thread_ = std::thread([this] { http_->Serve(); });
    return port;
  }

  // GET /ping at https://HOST:port, verifying with ca ("" for the system store); returns
  // the body, or "error: " and why.
  std::string Ping(const std::string& host, int port, const std::string& ca) {
    httplib::Client client("https://" + host + ":" + std::to_string(port));
    client.set_connection_timeout(std::chrono::seconds(5));
    VerifyServer(client, ca.empty() ? "" : Path(ca));
    auto res = client.Get("/ping");
    if (!res) return "error: " + DescribeError(res, client);
    return res->body;
  }

  // The same through the client commands' own client (http/client.h), which loads
  // OpenSSL at run time and must verify alike.
  std::string PingCli(const std::string& host, int port, const std::string& ca) {
    ClientOptions options;
    if (!ca.empty()) options.ca_file = Path(ca);
    Client client("https://" + host + ":" + std::to_string(port), options);
    auto res = client.Send("GET", "/ping");
    if (auto* e = std::get_if<Error>(&res)) return "error: " + e->message;
    return std::get<Response>(res).body;
  }

  std::filesystem::path dir_;
  KeyPtr ca_key_, server_key_;
  X509Ptr ca_, server_;
  std::unique_ptr<Server> http_;
  std::thread thread_;
};

TEST_F(TlsTest, ServesClientsThatTrustItsCa) {
  const int port = Serve("server.crt", "server.key");
  ASSERT_GT(port, 0);
  EXPECT_EQ(Ping("127.0.0.1", port, "ca.crt"), "pong");
  EXPECT_EQ(PingCli("127.0.0.1", port, "ca.crt"), "pong");
}

TEST_F(TlsTest, TrustsTheServersOwnCertificateAsAnAnchor) {
  const int port = Serve("server.crt", "server.key");
  ASSERT_GT(port, 0);
  EXPECT_EQ(Ping("127.0.0.1", port, "server.crt"), "pong");
  EXPECT_EQ(PingCli("127.0.0.1", port, "server.crt"), "pong");
}

TEST_F(TlsTest, SendsTheChainInTheCertificateFile) {
  const int port = Serve("chain.crt", "server.key");
  ASSERT_GT(port, 0);
  EXPECT_EQ(Ping("127.0.0.1", port, "ca.crt"), "pong");
  EXPECT_EQ(PingCli("127.0.0.1", port, "ca.crt"), "pong");
}

TEST_F(TlsTest, RefusesAServerItCannotVerify) {
  const int port = Serve("server.crt", "server.key");
  ASSERT_GT(port, 0);
  // The system store does not hold the test CA.
  EXPECT_THAT(Ping("127.0.0.1", port, ""), HasSubstr("certificate failed verification"));
  EXPECT_THAT(PingCli("127.0.0.1", port, ""), HasSubstr("certificate failed verification"));
  // A different CA.
  KeyPtr other_key = NewKey();
  X509Ptr other = MakeCert({.name = "other CA", .ca = true}, other_key.get(), nullptr, nullptr);
  Write("other.crt", {other.get()});
  EXPECT_THAT(Ping("127.0.0.1", port, "other.crt"), HasSubstr("local issuer certificate"));
  EXPECT_THAT(PingCli("127.0.0.1", port, "other.crt"), HasSubstr("local issuer certificate"));
  // Plain HTTP spoken to it is refused, and an unreadable CA file is named.
  {
    Client plain("http://127.0.0.1:" + std::to_string(port), ClientOptions());
    EXPECT_TRUE(std::holds_alternative<Error>(plain.Send("GET", "/ping")));
  }
  EXPECT_THAT(PingCli("127.0.0.1", port, "nope.crt"), HasSubstr("nope.crt"));
}

TEST_F(TlsTest, RefusesACertificateForAnotherHost) {
  X509Ptr wrong = MakeCert({.name = "elsewhere", .san = "IP:127.0.0.2"}, server_key_.get(),
                           ca_.get(), ca_key_.get());
  Write("wrong.crt", {wrong.get()});
  const int port = Serve("wrong.crt", "server.key");
  ASSERT_GT(port, 0);
  EXPECT_THAT(Ping("127.0.0.1", port, "ca.crt"), HasSubstr("does not name the host"));
  EXPECT_THAT(PingCli("127.0.0.1", port, "ca.crt"), HasSubstr("does not name the host"));
}

TEST_F(TlsTest, BadServerFilesNameTheFlagAndTheFile) {
  auto missing = MakeTlsServer(Path("nope.crt"), Path("server.key"));
  EXPECT_THAT(missing.status().message(), HasSubstr("--tls-cert " + Path("nope.crt")));
  EXPECT_THAT(missing.status().message(), HasSubstr("No such file"));
  EXPECT_THAT(MakeTlsServer(Path("server.crt"), Path("nope.key")).status().message(),
              HasSubstr("--tls-key " + Path("nope.key")));

  WriteText("garbage", "not a certificate\n");
  EXPECT_THAT(MakeTlsServer(Path("garbage"), Path("server.key")).status().message(),
              HasSubstr("holds no PEM certificate"));
  EXPECT_THAT(MakeTlsServer(Path("server.crt"), Path("garbage")).status().message(),
              HasSubstr("--tls-key " + Path("garbage") + ": holds no PEM private key"));
  // The CA's key: a key, but not the certificate's.
  Write("ca.key", ca_key_.get());
  auto mismatch = MakeTlsServer(Path("server.crt"), Path("ca.key"));
  EXPECT_EQ(mismatch.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(mismatch.status().message(), HasSubstr("does not match the certificate"));

  X509Ptr expired =
      MakeCert({.name = "old", .san = "IP:127.0.0.1", .valid_from_s = -7200, .valid_until_s = -60},
               server_key_.get(), ca_.get(), ca_key_.get());
  Write("expired.crt", {expired.get()});
  EXPECT_THAT(MakeTlsServer(Path("expired.crt"), Path("server.key")).status().message(),
              HasSubstr("expired"));
}

TEST_F(TlsTest, RefusesAnEncryptedKeyWithoutPrompting) {
  FILE* f = std::fopen(Path("encrypted.key").c_str(), "w");
  const char pass[] = "secret";
  PEM_write_PrivateKey(f, server_key_.get(), EVP_aes_256_cbc(),
                       reinterpret_cast<const unsigned char*>(pass), sizeof pass - 1, nullptr,
                       nullptr);
  std::fclose(f);
  EXPECT_THAT(MakeTlsServer(Path("server.crt"), Path("encrypted.key")).status().message(),
              HasSubstr("encrypted"));
}

TEST_F(TlsTest, ChecksCaFiles) {
  EXPECT_TRUE(CheckCaFile("--ca-cert", Path("ca.crt")).ok());
  EXPECT_THAT(CheckCaFile("--ca-cert", Path("nope.crt")).message(),
              HasSubstr("--ca-cert " + Path("nope.crt") + ": cannot read it"));
  WriteText("garbage", "junk\n");
  EXPECT_THAT(CheckCaFile("--ca-cert", Path("garbage")).message(),
              HasSubstr("holds no PEM certificate"));
  EXPECT_THAT(CheckCaFile("--ca-cert", "").message(), HasSubstr("must not be empty"));
}

}  // namespace
}  // namespace trainyard::http
