#include "core/image_ref.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace trainyard {
namespace {

using ::testing::HasSubstr;

const std::string kHex = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const std::string kDigest = "sha256:" + kHex;

ImageRef Ref(std::string name, std::string tag, std::string digest = "") {
  return ImageRef{std::move(name), std::move(tag), std::move(digest)};
}

TEST(ImageRefTest, ParsesNamesTagsAndDigests) {
  EXPECT_EQ(*ParseImageRef("trainer"), Ref("trainer", "latest"));
  EXPECT_EQ(*ParseImageRef("trainer:v2"), Ref("trainer", "v2"));
  EXPECT_EQ(*ParseImageRef("team/trainer:V2_rc.1-x"), Ref("team/trainer", "V2_rc.1-x"));
  EXPECT_EQ(*ParseImageRef("trainer@" + kDigest), Ref("trainer", "", kDigest));
  EXPECT_EQ(*ParseImageRef("trainer:v2@" + kDigest), Ref("trainer", "v2", kDigest));
  EXPECT_EQ(*ParseImageRef(kDigest), Ref("", "", kDigest));
  EXPECT_EQ(*ParseImageRef("team/a.b_c__d--e/f-g"), Ref("team/a.b_c__d--e/f-g", "latest"));
  EXPECT_EQ(*ParseImageRef("a.b"), Ref("a.b", "latest"));  // one component: not a host
}

TEST(ImageRefTest, FirstComponentMayBeARegistryHostWithAPort) {
  EXPECT_EQ(*ParseImageRef("localhost:5000/team/x"), Ref("localhost:5000/team/x", "latest"));
  EXPECT_EQ(*ParseImageRef("localhost:5000/team/x:1.0"), Ref("localhost:5000/team/x", "1.0"));
  EXPECT_EQ(*ParseImageRef("registry.example.com/x@" + kDigest),
            Ref("registry.example.com/x", "", kDigest));
  EXPECT_EQ(*ParseImageRef("localhost/trainer:v2"), Ref("localhost/trainer", "v2"));
}

TEST(ImageRefTest, ToStringIsCanonical) {
  EXPECT_EQ(ParseImageRef("trainer")->ToString(), "trainer:latest");
  EXPECT_EQ(ParseImageRef("localhost:5000/x:1")->ToString(), "localhost:5000/x:1");
  EXPECT_EQ(ParseImageRef("trainer:v2@" + kDigest)->ToString(), "trainer@" + kDigest);
  EXPECT_EQ(ParseImageRef(kDigest)->ToString(), kDigest);
}

TEST(ImageRefTest, PinnedKeepsTheNameAndDropsTheTag) {
  EXPECT_EQ(PinnedImageRef(*ParseImageRef("team/trainer:v2"), kDigest), "team/trainer@" + kDigest);
  EXPECT_EQ(PinnedImageRef(*ParseImageRef(kDigest), kDigest), kDigest);
}

TEST(ImageRefTest, IsImageDigest) {
  EXPECT_TRUE(IsImageDigest(kDigest));
  EXPECT_FALSE(IsImageDigest(kHex));
  EXPECT_FALSE(IsImageDigest("sha256:" + kHex.substr(1)));
  EXPECT_FALSE(IsImageDigest("sha512:" + kHex));
}

void ExpectRejected(const std::string& text, const std::string& why) {
  auto r = ParseImageRef(text);
  ASSERT_FALSE(r.ok()) << text;
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  const std::string m = r.status().message();
  EXPECT_THAT(m, HasSubstr("image \"" + text.substr(0, 40))) << text;
  EXPECT_THAT(m, HasSubstr(why)) << text;
  EXPECT_THAT(m, HasSubstr("valid: name[:tag] or name@sha256:<64 hex digits>")) << text;
}

TEST(ImageRefTest, RejectsBadReferencesNamingTheValueAndTheForm) {
  ExpectRejected("", "must not be empty");
  ExpectRejected("Foo:bar", "the name must be lowercase");
  ExpectRejected("Foo:bar", "\"Foo\" is not");
  ExpectRejected("my image", "the name must be lowercase");
  ExpectRejected("trainer:", "the tag after ':' is empty");
  ExpectRejected("trainer:v 2", "the tag \"v 2\"");
  ExpectRejected("trainer:.v2", "not starting with '.'");
  ExpectRejected("../trainer", "\"..\" is not");
  ExpectRejected("a/../b", "\"..\" is not");
  ExpectRejected("a..b", "\"a..b\" is not");
  ExpectRejected("-a", "\"-a\" is not");
  ExpectRejected("a//b", "empty path component");
  ExpectRejected("/a", "empty path component");
  ExpectRejected("a/", "empty path component");
  ExpectRejected("trainer@sha256:" + kHex.substr(2), "got 62 characters");
  ExpectRejected("trainer@sha256:" + kHex + "00", "got 66 characters");
  ExpectRejected("trainer@sha256:" + std::string(64, 'g'), "with \"g\" among them");
  ExpectRejected("trainer@sha256:" + std::string(64, 'A'), "with \"A\" among them");
  ExpectRejected("trainer@md5:abc", "the digest must be sha256:");
  ExpectRejected("trainer@", "the digest must be sha256:");
  ExpectRejected("@" + kDigest, "no name before '@'");
  ExpectRejected("sha256:abc", "got 3 characters");
  ExpectRejected("Registry.io/x", "the registry host \"Registry.io\"");
  ExpectRejected("host:port/x", "the registry host \"host:port\"");
  ExpectRejected(std::string(256, 'a'), "the name is 256 characters, at most 255");
  ExpectRejected("a:" + std::string(129, 'b'), "the tag is 129 characters, at most 128");
}

}  // namespace
}  // namespace trainyard
