#include "server/api/datasets.h"

#include "data/manifest.h"
#include "server/api/api_testing.h"

namespace trainyard::server {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

// A manifest of `files` files named f0..fN, each of `size` bytes with made-up hashes
// (the registry checks the text, not the files: they are read where they are).
std::string ManifestText(int files, int64_t size, char salt = 'a') {
  data::Manifest m;
  for (int i = 0; i < files; ++i) {
    m.entries.push_back({"f" + std::to_string(i), size, 1,
                         std::string(63, salt) + static_cast<char>('0' + i % 10)});
    m.total_bytes += size;
  }
  return data::ManifestToText(m);
}

std::string VersionOf(const std::string& text) { return data::ParseManifest(text)->Version(); }

json Body(const std::string& name, const std::string& source, const std::string& manifest) {
  return {{"name", name}, {"source", source}, {"manifest", manifest}};
}

}  // namespace

std::vector<RouteCase> DatasetRouteCases() {
  return {
      {"POST /api/v1/datasets",
       [](ApiFixture& f) {
         const std::string v1 = ManifestText(3, 100);
         Answer a = f.CallAs(f.member_token_, "POST", "/api/v1/datasets",
                             Body("imagenet", "/shared/imagenet", v1).dump());
         ASSERT_EQ(a.status, 201) << a.text;
         EXPECT_EQ(a.body["version"], VersionOf(v1));
         EXPECT_EQ(a.body["new_version"], true);
         EXPECT_EQ(a.body["tenant"], "vision");  // the member's own
         EXPECT_EQ(a.body["versions"][0]["files"], 3);
         EXPECT_EQ(a.body["versions"][0]["bytes"], 300);
         EXPECT_EQ(a.body["versions"][0]["registered_by"], "user:alice");
         // The same content again: the same version, nothing new.
         a = f.CallAs(f.member_token_, "POST", "/api/v1/datasets",
                      Body("imagenet", "/shared/imagenet", v1).dump());
         ASSERT_EQ(a.status, 200) << a.text;
         EXPECT_EQ(a.body["new_version"], false);
         EXPECT_EQ(a.body["versions"].size(), 1u);
         // New content: a second version, the latest.
         const std::string v2 = ManifestText(4, 100, 'b');
         a = f.CallAs(f.member_token_, "POST", "/api/v1/datasets",
                      Body("imagenet", "/shared/imagenet", v2).dump());
         ASSERT_EQ(a.status, 201) << a.text;
         EXPECT_EQ(a.body["latest"], VersionOf(v2));
         EXPECT_EQ(a.body["versions"].size(), 2u);

         // Bad input names the field and value.
         a = f.CallAs(f.member_token_, "POST", "/api/v1/datasets",
                      Body("imagenet", "/elsewhere", v1).dump());
         EXPECT_EQ(a.status, 400);
         EXPECT_THAT(a.text,
                     HasSubstr("source is \\\"/shared/imagenet\\\", not \\\"/elsewhere\\\""));
         a = f.CallAs(f.member_token_, "POST", "/api/v1/datasets",
                      Body("imagenet", "/shared/imagenet", "not a manifest").dump());
         EXPECT_EQ(a.status, 400);
         EXPECT_THAT(a.text, HasSubstr("line 1"));
         a = f.CallAs(f.member_token_, "POST", "/api/v1/datasets",
                      json{{"name", "x"}, {"source", "/shared/x"}}.dump());
         EXPECT_EQ(a.status, 400);
         EXPECT_THAT(a.text, HasSubstr("dataset.manifest: required"));
         a = f.CallAs(f.member_token_, "POST", "/api/v1/datasets",
                      Body("x", "shared/x", v1).dump());
         EXPECT_EQ(a.status, 400);
         EXPECT_THAT(a.text, HasSubstr("dataset.source: \\\"shared/x\\\" is not"));
         a = f.CallAs(f.member_token_, "POST", "/api/v1/datasets",
                      Body("bad name", "/shared/x", v1).dump());
         EXPECT_EQ(a.status, 400);
         EXPECT_THAT(a.text, HasSubstr("dataset.name"));
         // A cluster-wide dataset is a cluster admin's to register.
         json wide = Body("common", "/shared/common", v1);
         wide["tenant"] = "";
         a = f.CallAs(f.member_token_, "POST", "/api/v1/datasets", wide.dump());
         EXPECT_EQ(a.status, 403) << a.text;
         a = f.Call("POST", "/api/v1/datasets", Body("common", "/shared/common", v1).dump());
         ASSERT_EQ(a.status, 201) << a.text;
         EXPECT_TRUE(a.body["tenant"].is_null());
       }},
      {"GET /api/v1/datasets",
       [](ApiFixture& f) {
         const std::string m = ManifestText(2, 10);
         ASSERT_EQ(
             f.Call("POST", "/api/v1/datasets", Body("common", "/shared/common", m).dump()).status,
             201);
         ASSERT_TRUE(f.cluster_->EnsureTenant("robotics", "test").ok());
         json theirs = Body("grasping", "/shared/grasping", m);
         theirs["tenant"] = "robotics";
         ASSERT_EQ(f.Call("POST", "/api/v1/datasets", theirs.dump()).status, 201);
         ASSERT_EQ(f.CallAs(f.member_token_, "POST", "/api/v1/datasets",
                            Body("mine", "/shared/mine", m).dump())
                       .status,
                   201);
         Answer a = f.CallAs(f.member_token_, "GET", "/api/v1/datasets");
         ASSERT_EQ(a.status, 200) << a.text;
         std::vector<std::string> names;
         for (const json& d : a.body["datasets"]) names.push_back(d["name"]);
         // Its tenant's and the cluster-wide ones; not another tenant's.
         EXPECT_EQ(names, (std::vector<std::string>{"common", "mine"}));
         a = f.Get("/api/v1/datasets");
         EXPECT_EQ(a.body["datasets"].size(), 3u);
         EXPECT_EQ(f.Get("/api/v1/datasets?tenant=x").status, 400);
       }},
      {"GET /api/v1/datasets/([^/]+)",
       [](ApiFixture& f) {
         const std::string m = ManifestText(2, 10);
         ASSERT_TRUE(f.cluster_->EnsureTenant("robotics", "test").ok());
         json theirs = Body("grasping", "/shared/grasping", m);
         theirs["tenant"] = "robotics";
         ASSERT_EQ(f.Call("POST", "/api/v1/datasets", theirs.dump()).status, 201);
         Answer a = f.Get("/api/v1/datasets/grasping");
         ASSERT_EQ(a.status, 200) << a.text;
         EXPECT_EQ(a.body["source"], "/shared/grasping");
         EXPECT_EQ(a.body["latest"], VersionOf(m));
         EXPECT_EQ(a.body["created_by"], "user:admin");
         // Another tenant's reads as missing.
         a = f.CallAs(f.member_token_, "GET", "/api/v1/datasets/grasping");
         EXPECT_EQ(a.status, 404);
         EXPECT_EQ(f.Get("/api/v1/datasets/nope").status, 404);
       }},
      {"GET /api/v1/datasets/([^/]+)/manifest",
       [](ApiFixture& f) {
         const std::string v1 = ManifestText(2, 10);
         const std::string v2 = ManifestText(3, 10, 'c');
         ASSERT_EQ(f.Call("POST", "/api/v1/datasets", Body("d", "/shared/d", v1).dump()).status,
                   201);
         ASSERT_EQ(f.Call("POST", "/api/v1/datasets", Body("d", "/shared/d", v2).dump()).status,
                   201);
         Answer a = f.Get("/api/v1/datasets/d/manifest");
         ASSERT_EQ(a.status, 200) << a.text;
         EXPECT_EQ(a.text, v2);
         EXPECT_THAT(a.Header("Content-Type"), HasSubstr("text/plain"));
         a = f.Get("/api/v1/datasets/d/manifest?version=" + VersionOf(v1));
         ASSERT_EQ(a.status, 200) << a.text;
         EXPECT_EQ(a.text, v1);
         a = f.Get("/api/v1/datasets/d/manifest?version=sha256:" + std::string(64, '0'));
         EXPECT_EQ(a.status, 404);
         EXPECT_THAT(a.text, HasSubstr("it has 2 version(s), newest " + VersionOf(v2)));
         EXPECT_EQ(f.Get("/api/v1/datasets/d/manifest?versoin=x").status, 400);
       }},
      {"DELETE /api/v1/datasets/([^/]+)",
       [](ApiFixture& f) {
         ASSERT_EQ(f.CallAs(f.member_token_, "POST", "/api/v1/datasets",
                            Body("mine", "/shared/mine", ManifestText(1, 1)).dump())
                       .status,
                   201);
         // A member registers versions; deleting is for its tenant's admins.
         Answer a = f.CallAs(f.member_token_, "DELETE", "/api/v1/datasets/mine");
         EXPECT_EQ(a.status, 403) << a.text;
         a = f.Call("DELETE", "/api/v1/datasets/mine");
         ASSERT_EQ(a.status, 200) << a.text;
         EXPECT_EQ(a.body, json({{"deleted", "mine"}}));
         EXPECT_EQ(f.Call("DELETE", "/api/v1/datasets/mine").status, 404);
       }},
  };
}

namespace {

class DatasetJobsTest : public ApiFixture {};

// A job's data is resolved at submission: the stored spec names the exact version and
// the source, and its start carries both to the agent.
TEST_F(DatasetJobsTest, SubmissionResolvesLatestToTheVersionAndTheSource) {
  const std::string v1 = ManifestText(2, 10);
  ASSERT_EQ(CallAs(member_token_, "POST", "/api/v1/datasets",
                   Body("imagenet", "/shared/imagenet", v1).dump())
                .status,
            201);
  Answer a =
      Call("POST", "/api/v1/jobs", "name: t\ncommand: [x]\ntenant: vision\ndata: [imagenet]\n");
  ASSERT_EQ(a.status, 201) << a.text;
  const JobId id = a.body["id"];
  auto job = cluster_->GetJob(id);
  ASSERT_TRUE(job.ok());
  ASSERT_EQ(job->job.spec.data.size(), 1u);
  EXPECT_EQ(job->job.spec.data[0].version, VersionOf(v1));
  EXPECT_EQ(job->job.spec.data[0].source, "/shared/imagenet");
  EXPECT_EQ(job->job.spec.data[0].mount, "/data/imagenet");
  // A newer version does not change what the submitted job reads.
  ASSERT_EQ(CallAs(member_token_, "POST", "/api/v1/datasets",
                   Body("imagenet", "/shared/imagenet", ManifestText(5, 10, 'e')).dump())
                .status,
            201);
  a = Get("/api/v1/jobs/" + std::to_string(id));
  ASSERT_EQ(a.status, 200);
  EXPECT_EQ(a.body["spec"]["data"][0]["version"], VersionOf(v1));
  // The run records it exactly.
  a = Get("/api/v1/runs/" + std::to_string(id));
  ASSERT_EQ(a.status, 200) << a.text;
  EXPECT_EQ(a.body["data_version"], "imagenet@" + VersionOf(v1));
}

TEST_F(DatasetJobsTest, MissingDatasetsVersionsAndOtherTenantsDataAreRefused) {
  ASSERT_TRUE(cluster_->EnsureTenant("robotics", "test").ok());
  json theirs = Body("grasping", "/shared/grasping", ManifestText(1, 1));
  theirs["tenant"] = "robotics";
  ASSERT_EQ(Call("POST", "/api/v1/datasets", theirs.dump()).status, 201);
  json s3 = Body("crawl", "s3://bucket/crawl", ManifestText(1, 1));
  s3["tenant"] = "vision";
  ASSERT_EQ(Call("POST", "/api/v1/datasets", s3.dump()).status, 201);

  Answer a = Call("POST", "/api/v1/jobs", "name: t\ncommand: [x]\ntenant: vision\ndata: [nope]\n");
  EXPECT_EQ(a.status, 404);
  EXPECT_THAT(a.text, HasSubstr("data[0].dataset: no dataset \\\"nope\\\" that jobs of tenant "
                                "\\\"vision\\\" may read"));
  a = Call("POST", "/api/v1/jobs", "name: t\ncommand: [x]\ntenant: vision\ndata: [grasping]\n");
  EXPECT_EQ(a.status, 404) << a.text;
  a = Call("POST", "/api/v1/jobs",
           "name: t\ncommand: [x]\ntenant: vision\ndata: [{dataset: crawl, version: sha256:" +
               std::string(64, '1') + "}]\n");
  EXPECT_EQ(a.status, 404);
  EXPECT_THAT(a.text, HasSubstr("data[0].version: dataset crawl has no version"));
  a = Call("POST", "/api/v1/jobs", "name: t\ncommand: [x]\ntenant: vision\ndata: [crawl]\n");
  EXPECT_EQ(a.status, 409);
  EXPECT_THAT(a.text, HasSubstr("no fetcher for it yet"));
  // Nothing was submitted.
  a = Get("/api/v1/jobs");
  EXPECT_EQ(a.body["jobs"].size(), 0u) << a.text;
}

}  // namespace
}  // namespace trainyard::server
