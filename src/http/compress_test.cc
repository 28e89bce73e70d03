#include "http/compress.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <zlib.h>

#include <string>
#include <thread>

#include "http/server.h"

namespace trainyard::http {
namespace {

std::string Gunzip(const std::string& gz) {
  z_stream z{};
  EXPECT_EQ(inflateInit2(&z, 15 + 16), Z_OK);
  std::string out(1 << 20, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(gz.data()));
  z.avail_in = static_cast<uInt>(gz.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(inflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  inflateEnd(&z);
  return out;
}

TEST(CompressTest, AcceptsGzipReadsCodingsAndQValues) {
  EXPECT_TRUE(AcceptsGzip("gzip"));
  EXPECT_TRUE(AcceptsGzip("gzip, deflate, br, zstd"));
  EXPECT_TRUE(AcceptsGzip("br;q=1.0, GZip;q=0.5"));
  EXPECT_TRUE(AcceptsGzip("x-gzip"));
  EXPECT_TRUE(AcceptsGzip("*"));
  EXPECT_FALSE(AcceptsGzip(""));
  EXPECT_FALSE(AcceptsGzip("br"));
  EXPECT_FALSE(AcceptsGzip("identity"));
  EXPECT_FALSE(AcceptsGzip("gzip;q=0"));
  EXPECT_FALSE(AcceptsGzip("gzip; q=0.000, br"));
  EXPECT_FALSE(AcceptsGzip("*, gzip;q=0"));  // named explicitly: the name wins
  EXPECT_FALSE(AcceptsGzip("*;q=0"));
  EXPECT_FALSE(AcceptsGzip("gzipx, xgzip"));
}

TEST(CompressTest, CompressibleTypesAreText) {
  EXPECT_TRUE(IsCompressible("application/json"));
  EXPECT_TRUE(IsCompressible("text/javascript; charset=utf-8"));
  EXPECT_TRUE(IsCompressible("text/css"));
  EXPECT_TRUE(IsCompressible("image/svg+xml"));
  EXPECT_FALSE(IsCompressible("application/octet-stream"));
  EXPECT_FALSE(IsCompressible("image/png"));
  EXPECT_FALSE(IsCompressible(""));
}

TEST(CompressTest, GzipRoundTrips) {
  std::string text;
  for (int i = 0; i < 5000; ++i)
    text += "{\"id\": " + std::to_string(i) + ", \"state\": \"Pending\"}\n";
  for (int level : {1, 6, 9}) {
    const std::string gz = Gzip(text, level);
    EXPECT_LT(gz.size(), text.size() / 4) << level;
    EXPECT_EQ(Gunzip(gz), text) << level;
  }
  EXPECT_EQ(Gunzip(Gzip("", 1)), "");
}

// Through a real server and client: gzip when asked for it, never brotli, the bytes
// as they are otherwise, and one Content-Type header.
TEST(CompressTest, SendCompressedAnswersWhatTheClientAccepts) {
  std::string body;
  for (int i = 0; i < 2000; ++i) body += "line " + std::to_string(i) + " of a json-ish body\n";
  Server server;
  server.Get("/big", [&](const httplib::Request& req, httplib::Response& res) {
    res.set_content("replaced", "text/plain");
    SendCompressed(req, res, body, "application/json");
  });
  server.Get("/small", [&](const httplib::Request& req, httplib::Response& res) {
    SendCompressed(req, res, "{}", "application/json");
  });
  server.Get("/binary", [&](const httplib::Request& req, httplib::Response& res) {
    SendCompressed(req, res, body, "application/octet-stream");
  });
  const int port = server.BindToAnyPort("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread t([&] { server.Serve(); });
  httplib::Client client("127.0.0.1", port);
  client.set_decompress(false);  // see the bytes as sent

  auto gz = client.Get("/big", {{"Accept-Encoding", "gzip, deflate, br"}});
  ASSERT_TRUE(gz);
  EXPECT_EQ(gz->status, 200);
  EXPECT_EQ(gz->get_header_value("Content-Encoding"), "gzip");
  EXPECT_EQ(gz->get_header_value("Vary"), "Accept-Encoding");
  EXPECT_EQ(gz->get_header_value_count("Content-Type"), 1u);
  EXPECT_EQ(gz->get_header_value("Content-Type"), "application/json");
  EXPECT_LT(gz->body.size(), body.size());
  EXPECT_EQ(Gunzip(gz->body), body);

  for (const char* accept : {"", "br", "gzip;q=0"}) {
    auto plain = client.Get("/big", {{"Accept-Encoding", accept}});
    ASSERT_TRUE(plain);
    EXPECT_EQ(plain->get_header_value("Content-Encoding"), "") << accept;
    EXPECT_EQ(plain->body, body) << accept;
  }
  auto small = client.Get("/small", {{"Accept-Encoding", "gzip"}});
  ASSERT_TRUE(small);
  EXPECT_EQ(small->get_header_value("Content-Encoding"), "");
  EXPECT_EQ(small->body, "{}");
  auto binary = client.Get("/binary", {{"Accept-Encoding", "gzip"}});
  ASSERT_TRUE(binary);
  EXPECT_EQ(binary->get_header_value("Content-Encoding"), "");
  EXPECT_EQ(binary->body, body);
  // The server does not serve byte ranges (http/server.h): the whole body, as RFC 9110
  // allows.
  auto range = client.Get("/binary", {{"Range", "bytes=5-9"}});
  ASSERT_TRUE(range);
  EXPECT_EQ(range->status, 200);
  EXPECT_EQ(range->body, body);

  server.Stop();
  t.join();
}

}  // namespace
}  // namespace trainyard::http
