#include "agent/image_store.h"

#include <archive.h>
#include <archive_entry.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace trainyard::agent {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// ----- building tarballs -----

struct Entry {
  std::string path;
  std::string data;        // a regular file's content
  mode_t type = AE_IFREG;  // AE_IFREG, AE_IFDIR, AE_IFLNK
  mode_t mode = 0644;
  std::string link;      // a symlink's target
  std::string hardlink;  // a hard link's target (type ignored)
};
Entry Dir(std::string path, mode_t mode = 0755) {
  return Entry{std::move(path), "", AE_IFDIR, mode, "", ""};
}
Entry File(std::string path, std::string data, mode_t mode = 0644) {
  return Entry{std::move(path), std::move(data), AE_IFREG, mode, "", ""};
}
Entry Symlink(std::string path, std::string target) {
  return Entry{std::move(path), "", AE_IFLNK, 0777, std::move(target), ""};
}
Entry Hardlink(std::string path, std::string target) {
  return Entry{std::move(path), "", AE_IFREG, 0644, "", std::move(target)};
}

enum class Compression { kNone, kGzip, kZstd };

la_ssize_t Append(archive*, void* out, const void* buf, size_t n) {
  static_cast<std::string*>(out)->append(static_cast<const char*>(buf), n);
  return static_cast<la_ssize_t>(n);
}

std::string Tar(const std::vector<Entry>& entries, Compression c = Compression::kNone) {
  std::string out;
  archive* a = archive_write_new();
  archive_write_set_format_pax_restricted(a);
  if (c == Compression::kGzip) archive_write_add_filter_gzip(a);
  if (c == Compression::kZstd) archive_write_add_filter_zstd(a);
  archive_write_set_bytes_in_last_block(a, 1);
  EXPECT_EQ(archive_write_open(a, &out, nullptr, Append, nullptr), ARCHIVE_OK)
      << archive_error_string(a);
  for (const Entry& e : entries) {
    archive_entry* ae = archive_entry_new();
    archive_entry_set_pathname(ae, e.path.c_str());
    archive_entry_set_mtime(ae, 1700000000, 0);
    if (!e.hardlink.empty()) {
      archive_entry_set_filetype(ae, AE_IFREG);
      archive_entry_set_perm(ae, e.mode);
      archive_entry_set_hardlink(ae, e.hardlink.c_str());
      archive_entry_set_size(ae, 0);
    } else {
      archive_entry_set_filetype(ae, e.type);
      archive_entry_set_perm(ae, e.mode);
      if (e.type == AE_IFLNK) archive_entry_set_symlink(ae, e.link.c_str());
      archive_entry_set_size(ae, e.type == AE_IFREG ? static_cast<la_int64_t>(e.data.size()) : 0);
    }
    EXPECT_EQ(archive_write_header(a, ae), ARCHIVE_OK) << archive_error_string(a);
    if (e.type == AE_IFREG && e.hardlink.empty() && !e.data.empty()) {
      archive_write_data(a, e.data.data(), e.data.size());
    }
    archive_entry_free(ae);
  }
  archive_write_close(a);
  archive_write_free(a);
  return out;
}

std::string Sha256Hex(const std::string& data) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), md.data(), &len, EVP_sha256(), nullptr);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out.push_back(kHex[md[i] >> 4]);
    out.push_back(kHex[md[i] & 15]);
  }
  return out;
}

std::string Config(const std::vector<std::string>& env, const std::string& workdir, size_t layers,
                   const std::string& salt = "") {
  json diff_ids = json::array();
  for (size_t i = 0; i < layers; ++i) diff_ids.push_back("sha256:" + std::string(64, '0'));
  return json{{"architecture", "amd64"},
              {"os", "linux"},
              {"created", "2026-01-01T00:00:00Z" + salt},
              {"config",
               {{"Env", env},
                {"WorkingDir", workdir},
                {"Entrypoint", {"/bin/sh", "-c"}},
                {"Cmd", {"echo hi"}},
                {"User", "1000:1000"}}},
              {"rootfs", {{"type", "layers"}, {"diff_ids", diff_ids}}}}
      .dump();
}

// A docker-archive: manifest.json naming the config and layers by file name.
std::string DockerArchive(const std::string& config, const std::vector<std::string>& layers,
                          const std::vector<std::string>& repo_tags) {
  std::vector<Entry> entries;
  const std::string config_name = Sha256Hex(config) + ".json";
  entries.push_back(File(config_name, config));
  json layer_names = json::array();
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string dir = "layer" + std::to_string(i);
    entries.push_back(Dir(dir));
    entries.push_back(File(dir + "/layer.tar", layers[i]));
    layer_names.push_back(dir + "/layer.tar");
  }
  entries.push_back(File(
      "manifest.json",
      json::array({json{{"Config", config_name}, {"RepoTags", repo_tags}, {"Layers", layer_names}}})
          .dump()));
  return Tar(entries);
}

// An OCI image layout: oci-layout, index.json -> manifest -> config + layers.
std::string OciLayout(const std::string& config, const std::vector<std::string>& layers,
                      const std::string& ref_name, bool corrupt_layer = false) {
  std::vector<Entry> entries = {File("oci-layout", R"({"imageLayoutVersion":"1.0.0"})"),
                                Dir("blobs"), Dir("blobs/sha256")};
  auto blob = [&](const std::string& data, bool corrupt = false) {
    const std::string hex = Sha256Hex(data);
    entries.push_back(File("blobs/sha256/" + hex, corrupt ? data + "x" : data));
    return "sha256:" + hex;
  };
  json layer_descs = json::array();
  for (const std::string& l : layers) {
    layer_descs.push_back({{"mediaType", "application/vnd.oci.image.layer.v1.tar+gzip"},
                           {"digest", blob(l, corrupt_layer)},
                           {"size", l.size()}});
  }
  const std::string manifest = json{
      {"schemaVersion", 2},
      {"mediaType", "application/vnd.oci.image.manifest.v1+json"},
      {"config",
       {{"mediaType", "application/vnd.oci.image.config.v1+json"},
        {"digest", blob(config)},
        {"size", config.size()}}},
      {"layers", layer_descs}}.dump();
  const std::string manifest_digest = blob(manifest);
  entries.push_back(File(
      "index.json", json{{"schemaVersion", 2},
                         {"manifests",
                          {{{"mediaType", "application/vnd.oci.image.manifest.v1+json"},
                            {"digest", manifest_digest},
                            {"size", manifest.size()},
                            {"annotations", {{"org.opencontainers.image.ref.name", ref_name}}}}}}}
                        .dump()));
  return Tar(entries);
}

class ImageStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = fs::temp_directory_path().string() + "/image_store_test.XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = fs::canonical(pattern).string();
    root_ = dir_ + "/store";
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& bytes) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  static std::string Read(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::ostringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  ImageStore Store() {
    return ImageStore(root_, [this] { return now_ms_; });
  }
  // Loads `bytes` as a tarball and returns the error message (the load must fail).
  std::string LoadError(const std::string& bytes) {
    const std::string path = Write("bad.tar", bytes);
    auto r = Store().Load(path);
    EXPECT_FALSE(r.ok());
    if (r.ok()) return "";
    EXPECT_THAT(r.status().message(), HasSubstr(path));
    return r.status().message();
  }

  // Two layers: the second removes a file of the first (.wh.) and empties a directory
  // of it (.wh..wh..opq) while adding a file of its own there; the second is gzip.
  std::string TwoLayerImage(const std::string& tag, const std::string& salt = "") {
    const std::string layer1 =
        Tar({Dir("bin"), File("bin/tool", "#!/bin/sh\necho tool\n", 0755), Dir("etc"),
             File("etc/keep", "keep"), File("etc/gone", "gone"), Dir("data"),
             File("data/old1", "1"), Dir("data/sub"), File("data/sub/old2", "2"),
             File("big", std::string(1000, 'b')), Hardlink("big-link", "big")});
    const std::string layer2 =
        Tar({Dir("etc"), File("etc/.wh.gone", ""), Dir("data"), File("data/new", "new"),
             File("data/.wh..wh..opq", ""), File("etc/added", "added" + salt)},
            Compression::kGzip);
    return DockerArchive(Config({"PATH=/bin", "HOME=/root"}, "/work", 2, salt), {layer1, layer2},
                         {tag});
  }

  std::string dir_;
  std::string root_;
  int64_t now_ms_ = 1'700'000'000'000;
};

TEST_F(ImageStoreTest, LoadsADockerArchiveWithWhiteoutsAndAGzipLayer) {
  const std::string tar = Write("img.tar", TwoLayerImage("trainer:v2"));
  ImageStore store = Store();
  auto rec = store.Load(tar);
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  EXPECT_EQ(rec->digest.substr(0, 7), "sha256:");
  EXPECT_EQ(rec->digest.size(), 71u);
  EXPECT_THAT(rec->refs, ElementsAre("trainer:v2"));
  EXPECT_EQ(rec->rootfs, root_ + "/images/" + rec->digest.substr(7) + "/rootfs");
  EXPECT_THAT(rec->env, ElementsAre("PATH=/bin", "HOME=/root"));
  EXPECT_EQ(rec->workdir, "/work");
  EXPECT_THAT(rec->entrypoint, ElementsAre("/bin/sh", "-c"));
  EXPECT_THAT(rec->cmd, ElementsAre("echo hi"));
  EXPECT_EQ(rec->user, "1000:1000");
  EXPECT_EQ(rec->layers, 2);
  EXPECT_EQ(rec->loaded_ms, now_ms_);

  const std::string& fsroot = rec->rootfs;
  EXPECT_EQ(Read(fsroot + "/bin/tool"), "#!/bin/sh\necho tool\n");
  struct stat st {};
  ASSERT_EQ(stat((fsroot + "/bin/tool").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  EXPECT_EQ(Read(fsroot + "/etc/keep"), "keep");
  EXPECT_EQ(Read(fsroot + "/etc/added"), "added");
  EXPECT_FALSE(fs::exists(fsroot + "/etc/gone"));      // .wh.gone
  EXPECT_FALSE(fs::exists(fsroot + "/etc/.wh.gone"));  // whiteouts are not files
  EXPECT_FALSE(fs::exists(fsroot + "/data/old1"));     // opaque: lower content gone
  EXPECT_FALSE(fs::exists(fsroot + "/data/sub"));
  EXPECT_EQ(Read(fsroot + "/data/new"), "new");  // this layer's own content kept
  EXPECT_FALSE(fs::exists(fsroot + "/data/.wh..wh..opq"));
  // The hard link is one inode inside the rootfs, counted once.
  struct stat a {
  }, b{};
  ASSERT_EQ(stat((fsroot + "/big").c_str(), &a), 0);
  ASSERT_EQ(stat((fsroot + "/big-link").c_str(), &b), 0);
  EXPECT_EQ(a.st_ino, b.st_ino);
  EXPECT_EQ(rec->size_bytes, 1000 + 20 + 4 + 5 + 3);

  // The store's files, and nothing left of the load.
  EXPECT_TRUE(fs::exists(root_ + "/images/" + rec->digest.substr(7) + "/image.json"));
  json refs = json::parse(Read(root_ + "/refs.json"));
  EXPECT_EQ(refs, json({{"trainer:v2", rec->digest}}));
  EXPECT_TRUE(fs::is_empty(root_ + "/tmp"));
}

TEST_F(ImageStoreTest, TheDigestIsTheSha256OfTheConfig) {
  const std::string config = Config({}, "", 1);
  const std::string tar =
      Write("img.tar", DockerArchive(config, {Tar({File("a", "a")}, Compression::kZstd)}, {"x:1"}));
  auto rec = Store().Load(tar);
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  EXPECT_EQ(rec->digest, "sha256:" + Sha256Hex(config));
  EXPECT_EQ(Read(rec->rootfs + "/a"), "a");  // a zstd layer
}

TEST_F(ImageStoreTest, FollowsDockerSaveLinksBetweenLayerFiles) {
  // docker save stores a layer once and links to it where it recurs.
  const std::string layer = Tar({File("f", "f")});
  const std::string config = Config({}, "", 2);
  const std::string tar =
      Write("img.tar",
            Tar({File("c.json", config), Dir("a"), File("a/layer.tar", layer), Dir("b"),
                 Symlink("b/layer.tar", "../a/layer.tar"),
                 File("manifest.json", json::array({{{"Config", "c.json"},
                                                     {"RepoTags", {"x:1"}},
                                                     {"Layers", {"a/layer.tar", "b/layer.tar"}}}})
                                           .dump())}));
  auto rec = Store().Load(tar);
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  EXPECT_EQ(rec->layers, 2);
  EXPECT_EQ(Read(rec->rootfs + "/f"), "f");
}

TEST_F(ImageStoreTest, LoadsAnOciLayoutWithItsRefNameAnnotation) {
  const std::string config = Config({"PATH=/usr/bin"}, "/", 1);
  const std::string tar = Write(
      "oci.tar", OciLayout(config, {Tar({Dir("usr"), File("usr/x", "x")}, Compression::kGzip)},
                           "localhost:5000/team/trainer:v3"));
  auto rec = Store().Load(tar);
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  EXPECT_EQ(rec->digest, "sha256:" + Sha256Hex(config));
  EXPECT_THAT(rec->refs, ElementsAre("localhost:5000/team/trainer:v3"));
  EXPECT_EQ(Read(rec->rootfs + "/usr/x"), "x");
  EXPECT_EQ(Store().Resolve("localhost:5000/team/trainer:v3")->digest, rec->digest);
}

TEST_F(ImageStoreTest, ResolvesByTagDigestAndNameAtDigest) {
  ImageStore store = Store();
  auto loaded = store.Load(Write("img.tar", TwoLayerImage("trainer:latest")));
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  const std::string d = loaded->digest;
  for (const std::string& ref : {std::string("trainer"), std::string("trainer:latest"), d,
                                 "trainer@" + d, "other@" + d, "trainer:v9@" + d}) {
    auto r = store.Resolve(ref);
    ASSERT_TRUE(r.ok()) << ref << ": " << r.status().ToString();
    EXPECT_EQ(r->digest, d) << ref;
    EXPECT_EQ(r->rootfs, loaded->rootfs) << ref;
  }
  // As podman and docker record names without a registry.
  auto podman = store.Load(Write("p.tar", TwoLayerImage("localhost/podman-built:1", "p")));
  ASSERT_TRUE(podman.ok()) << podman.status().ToString();
  EXPECT_EQ(store.Resolve("podman-built:1")->digest, podman->digest);
}

TEST_F(ImageStoreTest, AMissingRefSaysWhatIsLoadedAndHowToLoad) {
  ImageStore store = Store();
  auto empty = store.Resolve("trainer:v2");
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(empty.status().message(), "image \"trainer:v2\" is not in the image store " + root_ +
                                          " (no images loaded); load it with trainyard image "
                                          "load FILE.tar");
  ASSERT_TRUE(store.Load(Write("a.tar", TwoLayerImage("a:1"))).ok());
  ASSERT_TRUE(store.Load(Write("b.tar", TwoLayerImage("b", "b"))).ok());
  auto missing = store.Resolve("trainer:v2");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(),
            "image \"trainer:v2\" is not in the image store " + root_ +
                " (loaded images: a:1, b:latest); load it with trainyard image load FILE.tar");
  auto by_digest = store.Resolve("sha256:" + std::string(64, 'e'));
  EXPECT_EQ(by_digest.status().code(), StatusCode::kNotFound);
  auto bad = store.Resolve("Trainer");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("lowercase"));
}

TEST_F(ImageStoreTest, ReloadingIsIdempotentAndAddsRefs) {
  ImageStore store = Store();
  const std::string tar = Write("img.tar", TwoLayerImage("trainer:v2"));
  auto first = store.Load(tar);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  // Something written into the rootfs stays: the image is not unpacked again.
  std::ofstream(first->rootfs + "/marker") << "m";
  now_ms_ += 5000;
  auto again = store.Load(tar, {"trainer:stable"});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->digest, first->digest);
  EXPECT_EQ(again->loaded_ms, first->loaded_ms);
  EXPECT_THAT(again->refs, ElementsAre("trainer:stable", "trainer:v2"));
  EXPECT_TRUE(fs::exists(first->rootfs + "/marker"));
  EXPECT_EQ(store.List().size(), 1u);
}

TEST_F(ImageStoreTest, ARefMovesToTheNewImageAndTheOldOneStays) {
  ImageStore store = Store();
  auto old_image = store.Load(Write("1.tar", TwoLayerImage("trainer:v2")));
  ASSERT_TRUE(old_image.ok());
  auto new_image = store.Load(Write("2.tar", TwoLayerImage("trainer:v2", "new")));
  ASSERT_TRUE(new_image.ok()) << new_image.status().ToString();
  ASSERT_NE(old_image->digest, new_image->digest);
  EXPECT_EQ(Read(new_image->rootfs + "/etc/added"), "addednew");
  EXPECT_EQ(store.Resolve("trainer:v2")->digest, new_image->digest);
  auto old_now = store.Resolve(old_image->digest);
  ASSERT_TRUE(old_now.ok());
  EXPECT_TRUE(old_now->refs.empty());
  std::vector<ImageRecord> all = store.List();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].digest, new_image->digest);  // named images first
  EXPECT_EQ(all[1].digest, old_image->digest);
}

TEST_F(ImageStoreTest, RemoveDropsTheRefAndTheImageWithItsLastRef) {
  ImageStore store = Store();
  auto rec = store.Load(Write("img.tar", TwoLayerImage("trainer:v2")), {"trainer:stable"});
  ASSERT_TRUE(rec.ok());
  ASSERT_TRUE(store.Remove("trainer:v2").ok());
  EXPECT_EQ(store.Resolve("trainer:v2").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(fs::exists(rec->rootfs));  // still named by trainer:stable
  ASSERT_TRUE(store.Remove("trainer:stable").ok());
  EXPECT_FALSE(fs::exists(rec->rootfs));
  EXPECT_TRUE(store.List().empty());
  Status again = store.Remove("trainer:stable");
  EXPECT_EQ(again.code(), StatusCode::kNotFound);
  EXPECT_THAT(again.message(), HasSubstr("\"trainer:stable\" is not in the image store"));

  // By digest: the image and every ref to it.
  auto other = store.Load(Write("img.tar", TwoLayerImage("a:1")), {"a:2"});
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE(store.Remove(other->digest).ok());
  EXPECT_FALSE(fs::exists(other->rootfs));
  EXPECT_EQ(store.Resolve("a:2").status().code(), StatusCode::kNotFound);
}

TEST_F(ImageStoreTest, DefaultRootFollowsTheEnvironment) {
  const char* old = std::getenv("TRAINYARD_IMAGE_STORE");
  const std::string saved = old != nullptr ? old : "";
  setenv("TRAINYARD_IMAGE_STORE", "/srv/images", 1);
  EXPECT_EQ(ImageStore::DefaultRoot(), "/srv/images");
  unsetenv("TRAINYARD_IMAGE_STORE");
  if (geteuid() == 0) {
    EXPECT_EQ(ImageStore::DefaultRoot(), "/var/lib/trainyard/images");
  }
  if (!saved.empty()) setenv("TRAINYARD_IMAGE_STORE", saved.c_str(), 1);
}

// ----- bad input -----

TEST_F(ImageStoreTest, RefusesWhatIsNotATarball) {
  EXPECT_THAT(LoadError("this is not a tar archive, just some text\n"),
              HasSubstr("not a readable tar archive"));
  auto missing = Store().Load(dir_ + "/no-such.tar");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr(dir_ + "/no-such.tar"));
}

TEST_F(ImageStoreTest, RefusesATarballWithoutManifestOrIndex) {
  EXPECT_THAT(LoadError(Tar({File("hello.txt", "hi")})),
              HasSubstr("neither manifest.json (a docker-archive"));
}

TEST_F(ImageStoreTest, RefusesAManifestNamingAMissingLayer) {
  const std::string config = Config({}, "", 1);
  std::string tar = Tar(
      {File("c.json", config),
       File(
           "manifest.json",
           json::array({{{"Config", "c.json"}, {"RepoTags", {"x:1"}}, {"Layers", {"l/layer.tar"}}}})
               .dump())});
  EXPECT_THAT(LoadError(tar), HasSubstr("manifest.json names the layer \"l/layer.tar\", which is "
                                        "not in it"));
}

TEST_F(ImageStoreTest, RefusesAnOciBlobWhoseDigestDoesNotMatch) {
  const std::string layer = Tar({File("a", "a")});
  const std::string msg = LoadError(OciLayout(Config({}, "", 1), {layer}, "x:1", true));
  EXPECT_THAT(msg, HasSubstr("the blob \"blobs/sha256/" + Sha256Hex(layer) + "\" is corrupt"));
  EXPECT_THAT(msg, HasSubstr("not the " + Sha256Hex(layer)));
}

TEST_F(ImageStoreTest, RefusesDotDotAndAbsoluteEntries) {
  const std::string dotdot =
      DockerArchive(Config({}, "", 1), {Tar({File("../escape", "x")})}, {"x:1"});
  std::string msg = LoadError(dotdot);
  EXPECT_THAT(msg, HasSubstr("layer 1"));
  EXPECT_THAT(msg, HasSubstr("the entry \"../escape\" has a \"..\" component"));
  EXPECT_FALSE(fs::exists(root_ + "/tmp/escape"));
  EXPECT_FALSE(fs::exists(dir_ + "/escape"));

  const std::string absolute =
      DockerArchive(Config({}, "", 1), {Tar({File(dir_ + "/absolute", "x")})}, {"x:1"});
  msg = LoadError(absolute);
  EXPECT_THAT(msg, HasSubstr("the entry \"" + dir_ + "/absolute\" is an absolute path"));
  EXPECT_FALSE(fs::exists(dir_ + "/absolute"));
  EXPECT_TRUE(Store().List().empty());
}

TEST_F(ImageStoreTest, RefusesToWriteThroughASymlinkOfALowerLayer) {
  // Layer 1: escape -> / ; layer 2 writes escape/<this test's dir>/pwned. Followed on
  // the host, that would land in dir_.
  const std::string rel_dir = dir_.substr(1);
  const std::string tar = DockerArchive(
      Config({}, "", 2),
      {Tar({Symlink("escape", "/")}), Tar({File("escape/" + rel_dir + "/pwned", "x")})}, {"x:1"});
  const std::string msg = LoadError(tar);
  EXPECT_THAT(msg, HasSubstr("layer 2"));
  EXPECT_THAT(msg, HasSubstr("the entry \"escape/" + rel_dir +
                             "/pwned\" goes through the "
                             "symlink \"escape\" (-> \"/\")"));
  EXPECT_FALSE(fs::exists(dir_ + "/pwned"));

  // Nor delete through one.
  std::ofstream(dir_ + "/victim") << "v";
  const std::string wh = DockerArchive(
      Config({}, "", 2),
      {Tar({Symlink("escape", "/")}), Tar({File("escape/" + rel_dir + "/.wh.victim", "")})},
      {"x:1"});
  EXPECT_THAT(LoadError(wh), HasSubstr("goes through the symlink \"escape\""));
  EXPECT_TRUE(fs::exists(dir_ + "/victim"));

  // A hard link to a file outside.
  const std::string hl =
      DockerArchive(Config({}, "", 1), {Tar({Hardlink("h", "../victim")})}, {"x:1"});
  EXPECT_THAT(LoadError(hl), HasSubstr("the entry \"h\" is a hard link to \"../victim\""));
}

TEST_F(ImageStoreTest, ANewImageIsNotVisibleUntilComplete) {
  // A failed load leaves neither an image nor a ref.
  const std::string tar = DockerArchive(
      Config({}, "", 2), {Tar({File("ok", "ok")}), Tar({File("../bad", "x")})}, {"x:1"});
  LoadError(tar);
  EXPECT_TRUE(Store().List().empty());
  EXPECT_FALSE(fs::exists(root_ + "/refs.json"));
  EXPECT_TRUE(fs::is_empty(root_ + "/images"));
}

}  // namespace
}  // namespace trainyard::agent
