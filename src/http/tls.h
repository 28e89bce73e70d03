// TLS for Trainyard's HTTP connections (docs/tls.md): the server's certificate and key
// turned into an HTTPS server, and the clients' (CLI, agent) verification of the
// server's certificate.
//
// Every target that includes <httplib.h> links trainyard_http, which defines
// CPPHTTPLIB_OPENSSL_SUPPORT for all of them alike (the library's classes differ
// without it), so httplib::Client takes "https://" URLs and verifies by default.
//
// Thread-safety: the functions keep no state; a client is configured before use by
// the thread that owns it.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "http/server.h"

namespace httplib {
class Client;
class Result;
}  // namespace httplib

namespace trainyard::http {

// An HTTPS server presenting the certificate chain in `cert_file` (PEM: the server's
// certificate first, then any intermediates) with the private key in `key_file` (PEM,
// not encrypted). Returns InvalidArgument naming --tls-cert or --tls-key when a file
// cannot be read, holds no certificate or key, the key does not belong to the
// certificate, or the certificate has expired.
Result<std::unique_ptr<Server>> MakeTlsServer(const std::string& cert_file,
                                              const std::string& key_file,
                                              ServerOptions options = {});

// Checks that `ca_file` can be read and holds at least one PEM certificate; the error
// names `flag`.
Status CheckCaFile(const std::string& flag, const std::string& ca_file);

// Makes `client` (of an "https://" URL; a no-op for "http://") verify the server:
// its certificate must chain to a certificate in `ca_file` (a CA's, or the server's
// own: every certificate there is trusted as is, as curl does), or to the system's
// store when `ca_file` is empty, and must name the URL's host (DNS or IP SAN).
// Verification is never turned off.
void VerifyServer(httplib::Client& client, const std::string& ca_file);

// Why a request of `client` got no answer, in words; for a certificate that failed
// verification, OpenSSL's reason ("unable to get local issuer certificate").
std::string DescribeError(const httplib::Result& result, const httplib::Client& client);

}  // namespace trainyard::http
