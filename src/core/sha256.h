// SHA-256, streamed (Sha256) or of one buffer (Sha256Hex in auth.h), as lowercase hex.
// Used for image blob digests, dataset manifests and token secrets.
//
// Thread-safety: a Sha256 is used by one thread at a time; distinct ones are independent.
#pragma once

#include <cstddef>
#include <string>

struct evp_md_ctx_st;

namespace trainyard {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void Update(const void* data, size_t n);
  // The digest of everything given to Update, as 64 lowercase hex digits. Call once.
  std::string Hex();

 private:
  evp_md_ctx_st* ctx_;
};

}  // namespace trainyard
