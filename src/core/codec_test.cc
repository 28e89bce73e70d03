#include "core/codec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <limits>
#include <map>
#include <string>

#include "core/spec_codec.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

Timestamp At(int64_t ms) { return Timestamp(Duration(ms)); }

JobSpec TestSpec() {
  JobSpec spec;
  spec.name = "llama-pretrain";
  spec.tenant = "research";
  spec.queue = "vision";
  spec.replicas = 4;
  spec.procs_per_replica = 8;
  spec.resources.gpus = 8;
  spec.resources.gpu_type = "h100";
  spec.resources.milli_cpus = 32'000;
  spec.resources.memory_bytes = 256 * kGiB;
  spec.command = {"torchrun", "train.py"};
  spec.args = {"--lr", "3e-4"};
  spec.env = {{"NCCL_DEBUG", "WARN"}};
  spec.time_limit = Duration(3'600'000);
  spec.checkpoint.interval = Duration(600'000);
  spec.retry.max = 3;
  spec.labels = {{"team", "llm"}};
  NormalizeSpec(spec);
  return spec;
}

Job TestJob() {
  Job job;
  job.id = 42;
  job.spec = TestSpec();
  job.state = JobState::kRunning;
  job.reason = "started on 4 nodes";
  job.submit_time = At(1'764'400'000'000);
  job.state_time = At(1'764'400'060'000);
  job.submitted_by = "alice";
  Attempt first;
  first.index = 0;
  first.start_time = At(1'764'400'010'000);
  first.end_time = At(1'764'400'020'000);
  first.nodes = {"n1", "n2", "n3", "n4"};
  first.exit_reason = ExitReason::kNodeLost;
  first.exit_code = -9;
  first.message = "node n3 stopped reporting";
  first.lost_work = Duration(10'000);
  Attempt second;
  second.index = 1;
  second.start_time = At(1'764'400'060'000);
  second.nodes = {"n1", "n2", "n5", "n4"};
  job.attempts = {first, second};
  job.checkpoint = CheckpointInfo{"/ckpt/step-100", 100, At(1'764'400'015'000), Duration(2'500)};
  job.retries = 1;
  job.excluded_nodes = {"n3"};
  job.held = false;
  return job;
}

Node TestNode() {
  Node node;
  node.name = "gpu-node-7";
  node.labels = {{"zone", "b"}, {"rack", "r12"}};
  for (int i = 0; i < 2; ++i) {
    node.gpus.push_back(
        Gpu{i, "GPU-" + std::to_string(i), "H100", 80 * kGiB, "nvl-" + std::to_string(i / 4)});
  }
  node.milli_cpus = 128'000;
  node.memory_bytes = 2 * kTiB;
  node.topology = {"spine-1", "leaf-4"};
  node.state = NodeState::kCordoned;
  node.state_reason = "XID 79 on GPU 1";
  return node;
}

// Encodes, prints and parses back, as the store does.
json ThroughText(const nlohmann::ordered_json& j) { return json::parse(j.dump()); }

TEST(CodecTest, JobRoundTrips) {
  Job job = TestJob();
  Result<Job> back = JobFromJson(ThroughText(ToJson(job)));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, job);
}

TEST(CodecTest, JobRoundTripsWithoutOptionalParts) {
  Job job;
  job.id = 1;
  job.spec = TestSpec();
  job.submit_time = At(5);
  job.state_time = At(5);
  Result<Job> back = JobFromJson(ThroughText(ToJson(job)));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, job);
  EXPECT_FALSE(back->checkpoint.has_value());
}

TEST(CodecTest, JobUsesNamesAndMilliseconds) {
  nlohmann::ordered_json j = ToJson(TestJob());
  EXPECT_EQ(j["state"], "Running");
  EXPECT_EQ(j["submit_time_ms"], 1'764'400'000'000);
  EXPECT_EQ(j["attempts"][0]["exit_reason"], std::string(ExitReasonName(ExitReason::kNodeLost)));
  EXPECT_EQ(j["attempts"][0]["lost_work_ms"], 10'000);
  EXPECT_TRUE(j["attempts"][1]["end_time_ms"].is_null());
  EXPECT_EQ(j["checkpoint"]["write_duration_ms"], 2'500);
  EXPECT_EQ(j["spec"], SpecToJson(TestSpec()));
}

TEST(CodecTest, AbsentOptionalsMayBeMissingOrNull) {
  json j = ThroughText(ToJson(TestJob()));
  j.erase("checkpoint");
  j["attempts"][1].erase("end_time_ms");
  Result<Job> back = JobFromJson(j);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_FALSE(back->checkpoint.has_value());
  EXPECT_FALSE(back->attempts[1].end_time.has_value());
}

TEST(CodecTest, UnknownKeysAreIgnored) {
  json j = ThroughText(ToJson(TestJob()));
  j["added_in_a_later_version"] = {1, 2, 3};
  EXPECT_TRUE(JobFromJson(j).ok());
}

TEST(CodecTest, UnknownJobStateNamesFieldValueAndChoices) {
  json j = ThroughText(ToJson(TestJob()));
  j["state"] = "Runing";
  Result<Job> r = JobFromJson(j);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("job.state: unknown value \"Runing\""));
  EXPECT_THAT(r.status().message(), HasSubstr("Pending, Admitted"));
  EXPECT_THAT(r.status().message(), HasSubstr("did you mean Running?"));
}

TEST(CodecTest, UnknownExitReasonNamesItsPath) {
  json j = ThroughText(ToJson(TestJob()));
  j["attempts"][0]["exit_reason"] = "exploded";
  Result<Job> r = JobFromJson(j);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("job.attempts[0].exit_reason: unknown value"));
}

TEST(CodecTest, WrongTypeNamesPathAndValue) {
  json j = ThroughText(ToJson(TestJob()));
  j["attempts"][1]["start_time_ms"] = "soon";
  Result<Job> r = JobFromJson(j);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "job.attempts[1].start_time_ms: expected an integer, got string \"soon\"");
}

TEST(CodecTest, WrongTypesAreRejected) {
  struct Case {
    const char* key;
    json value;
    const char* message;
  };
  const Case cases[] = {
      {"id", "42", "job.id: expected an integer, got string \"42\""},
      {"id", 4.5, "job.id: expected an integer, got number 4.5"},
      {"held", 1, "job.held: expected true or false, got number 1"},
      {"excluded_nodes", "n3", "job.excluded_nodes: expected a list of strings"},
      {"excluded_nodes", json::array({"n3", 7}), "job.excluded_nodes[1]: expected a string"},
      {"attempts", json::object(), "job.attempts: expected a list"},
      {"checkpoint", "latest", "job.checkpoint: expected an object, got string"},
      {"spec", json::array(), "job.spec: expected an object"},
      {"retries", int64_t{1} << 40, "job.retries: expected an integer between"},
      {"id", std::numeric_limits<uint64_t>::max(), "job.id: expected an integer between"},
  };
  for (const Case& c : cases) {
    json j = ThroughText(ToJson(TestJob()));
    j[c.key] = c.value;
    Result<Job> r = JobFromJson(j);
    ASSERT_FALSE(r.ok()) << c.key;
    EXPECT_THAT(r.status().message(), HasSubstr(c.message)) << c.key;
  }
}

TEST(CodecTest, MissingFieldsAreNamed) {
  for (const char* key : {"id", "spec", "state", "reason", "submit_time_ms", "state_time_ms",
                          "submitted_by", "attempts", "retries", "excluded_nodes", "held"}) {
    json j = ThroughText(ToJson(TestJob()));
    j.erase(key);
    Result<Job> r = JobFromJson(j);
    ASSERT_FALSE(r.ok()) << key;
    EXPECT_EQ(r.status().message(), "job." + std::string(key) + ": missing");
  }
  json j = ThroughText(ToJson(TestJob()));
  j["checkpoint"].erase("step");
  EXPECT_EQ(JobFromJson(j).status().message(), "job.checkpoint.step: missing");
}

TEST(CodecTest, NotAnObject) {
  EXPECT_EQ(JobFromJson(json::array()).status().message(), "job: expected an object, got array []");
  EXPECT_EQ(NodeFromJson(json(nullptr)).status().message(), "node: expected an object, got null");
  EXPECT_FALSE(TenantFromJson(json("x")).ok());
  EXPECT_FALSE(QueueFromJson(json(3)).ok());
  EXPECT_FALSE(PriorityClassFromJson(json(true)).ok());
}

TEST(CodecTest, InvalidSpecIsReportedThroughTheSpecReader) {
  json j = ThroughText(ToJson(TestJob()));
  j["spec"]["replicas"] = 0;
  Result<Job> r = JobFromJson(j);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("job.spec: "));
  EXPECT_THAT(r.status().message(), HasSubstr("replicas"));
}

TEST(CodecTest, StoredSpecsSkipThePathRuleSubmissionsMeet) {
  json j = ThroughText(ToJson(TestJob()));
  j["spec"]["checkpoint"]["dir"] = "/ckpt/../other";
  Result<Job> r = JobFromJson(j);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->spec.checkpoint.dir, "/ckpt/../other");
  // The same spec, submitted, is refused with the field and the value.
  SpecParseResult submitted = ParseSpec(j["spec"].dump(), "job.yaml");
  ASSERT_FALSE(submitted.ok());
  EXPECT_EQ(submitted.errors[0].field, "checkpoint.dir");
  EXPECT_THAT(submitted.errors[0].message, HasSubstr("\"..\" component"));
}

TEST(CodecTest, InvalidUtf8DoesNotThrow) {
  json j = ThroughText(ToJson(TestJob()));
  j["spec"]["name"] = "bad\xff";
  Status s;
  EXPECT_NO_THROW(s = JobFromJson(j).status());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("job"));
}

TEST(CodecTest, NodeRoundTrips) {
  Node node = TestNode();
  Result<Node> back = NodeFromJson(ThroughText(ToJson(node)));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, node);
  EXPECT_EQ(ToJson(node)["state"], "Cordoned");
}

TEST(CodecTest, NodeErrorsNameThePath) {
  json j = ThroughText(ToJson(TestNode()));
  j["gpus"][1]["memory_bytes"] = "80Gi";
  EXPECT_THAT(NodeFromJson(j).status().message(),
              HasSubstr("node.gpus[1].memory_bytes: expected an integer"));

  j = ThroughText(ToJson(TestNode()));
  j["state"] = "Broken";
  EXPECT_THAT(NodeFromJson(j).status().message(),
              HasSubstr("node.state: unknown value \"Broken\"; expected one of Ready, Cordoned"));

  j = ThroughText(ToJson(TestNode()));
  j["topology"].erase("leaf");
  EXPECT_EQ(NodeFromJson(j).status().message(), "node.topology.leaf: missing");

  j = ThroughText(ToJson(TestNode()));
  j["labels"]["zone"] = 3;
  EXPECT_THAT(NodeFromJson(j).status().message(),
              HasSubstr("node.labels.zone: expected a string, got number 3"));
}

TEST(CodecTest, TenancyRoundTrips) {
  Tenant t{"research", "the research org", 48, 32};
  Queue q{"vision", "research", "root", 16, 64, 2.5};
  PriorityClass p{"production", 500, false};
  Result<Tenant> t2 = TenantFromJson(ThroughText(ToJson(t)));
  Result<Queue> q2 = QueueFromJson(ThroughText(ToJson(q)));
  Result<PriorityClass> p2 = PriorityClassFromJson(ThroughText(ToJson(p)));
  ASSERT_TRUE(t2.ok() && q2.ok() && p2.ok());
  EXPECT_EQ(*t2, t);
  EXPECT_EQ(*q2, q);
  EXPECT_EQ(*p2, p);
}

TEST(CodecTest, TenancyErrors) {
  json q = ThroughText(ToJson(Queue{"vision", "research", "", 1, 2, 1.0}));
  q["weight"] = 3;  // an integer is a number
  ASSERT_TRUE(QueueFromJson(q).ok());
  EXPECT_EQ(QueueFromJson(q)->weight, 3.0);
  q["weight"] = "heavy";
  EXPECT_EQ(QueueFromJson(q).status().message(),
            "queue.weight: expected a number, got string \"heavy\"");
  q.erase("tenant");
  q["weight"] = 1;
  EXPECT_EQ(QueueFromJson(q).status().message(), "queue.tenant: missing");

  json p = ThroughText(ToJson(PriorityClass{"p0", 1000, false}));
  p["preemptible"] = "no";
  EXPECT_THAT(PriorityClassFromJson(p).status().message(),
              HasSubstr("priority_class.preemptible: expected true or false"));
  json t = ThroughText(ToJson(Tenant{"a", "b"}));
  t["description"] = nullptr;
  EXPECT_EQ(TenantFromJson(t).status().message(),
            "tenant.description: expected a string, got null");
  t["description"] = "b";
  t["limit_gpus"] = "many";
  EXPECT_EQ(TenantFromJson(t).status().message(),
            "tenant.limit_gpus: expected an integer, got string \"many\"");
}

TEST(CodecTest, TenantStoredBeforeQuotasDecodesUnbounded) {
  // A document written before tenants had a quota.
  Result<Tenant> t = TenantFromJson(json::parse(R"({"name": "vision", "description": "d"})"));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(*t, (Tenant{"vision", "d", kMaxQueueGpus, kMaxQueueGpus}));
  EXPECT_TRUE(ValidateTenant(*t).ok());
}

TEST(CodecTest, TenantQuotaIsValidated) {
  EXPECT_TRUE(ValidateTenant(Tenant{"vision", "", 0, 0}).ok());
  EXPECT_EQ(ValidateTenant(Tenant{"vision", "", -1, 8}).message(),
            "tenant.guaranteed_gpus: must be between 0 and 10000000, got -1");
  EXPECT_EQ(ValidateTenant(Tenant{"vision", "", 8, kMaxQueueGpus + 1}).message(),
            "tenant.limit_gpus: must be between 0 and 10000000, got 10000001");
}

User TestUser() {
  User u;
  u.name = "alice";
  u.tenant = "research";
  u.role = Role::kTenantAdmin;
  u.priority_classes = {"p0", "production"};
  u.created = At(1'764'400'000'000);
  u.created_by = "user:root";
  return u;
}

ApiToken TestToken() {
  ApiToken t;
  t.id = "0a1b2c3d4e5f";
  t.user = "alice";
  t.secret_hash = std::string(64, 'a');
  t.description = "laptop";
  t.created = At(1'764'400'000'000);
  t.expires = At(1'764'500'000'000);
  t.revoked = At(1'764'450'000'000);
  return t;
}

AuditEntry TestAudit() {
  AuditEntry e;
  e.seq = 17;
  e.time = At(1'764'400'000'123);
  e.actor = "user:alice";
  e.token_id = "0a1b2c3d4e5f";
  e.tenant = "research";
  e.action = "POST /api/v1/jobs/42/cancel";
  e.object = "job/42";
  e.source = "10.0.0.7:53412";
  e.status = 403;
  e.message = "user alice may not cancel job 42";
  return e;
}

TEST(CodecTest, UserRoundTrips) {
  User u = TestUser();
  Result<User> back = UserFromJson(ThroughText(ToJson(u)));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, u);
  nlohmann::ordered_json j = ToJson(u);
  EXPECT_EQ(j["role"], "tenant-admin");
  EXPECT_EQ(j["created_ms"], 1'764'400'000'000);

  User admin;
  admin.name = "root";
  admin.role = Role::kClusterAdmin;
  admin.created_by = "bootstrap";
  back = UserFromJson(ThroughText(ToJson(admin)));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, admin);
}

TEST(CodecTest, UserErrorsNameThePath) {
  json j = ThroughText(ToJson(TestUser()));
  j["role"] = "tenant-admn";
  Result<User> r = UserFromJson(j);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(),
              HasSubstr("user.role: unknown value \"tenant-admn\"; expected "
                        "one of viewer, member, tenant-admin, cluster-admin"));
  EXPECT_THAT(r.status().message(), HasSubstr("did you mean tenant-admin?"));

  j = ThroughText(ToJson(TestUser()));
  j["priority_classes"] = json::array({"p0", 1});
  EXPECT_THAT(UserFromJson(j).status().message(),
              HasSubstr("user.priority_classes[1]: expected a string, got number 1"));
  for (const char* key :
       {"name", "tenant", "role", "priority_classes", "created_ms", "created_by"}) {
    j = ThroughText(ToJson(TestUser()));
    j.erase(key);
    EXPECT_EQ(UserFromJson(j).status().message(), "user." + std::string(key) + ": missing");
  }
  EXPECT_EQ(UserFromJson(json::array()).status().message(),
            "user: expected an object, got array []");
}

TEST(CodecTest, ApiTokenRoundTrips) {
  ApiToken t = TestToken();
  Result<ApiToken> back = ApiTokenFromJson(ThroughText(ToJson(t)));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, t);
  EXPECT_EQ(ToJson(t)["expires_ms"], 1'764'500'000'000);

  t.expires.reset();
  t.revoked.reset();
  nlohmann::ordered_json j = ToJson(t);
  EXPECT_TRUE(j["expires_ms"].is_null());
  EXPECT_TRUE(j["revoked_ms"].is_null());
  back = ApiTokenFromJson(ThroughText(j));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, t);

  // Absent optionals may also be missing.
  json missing = ThroughText(j);
  missing.erase("expires_ms");
  missing.erase("revoked_ms");
  back = ApiTokenFromJson(missing);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, t);
}

TEST(CodecTest, ApiTokenErrorsNameThePath) {
  json j = ThroughText(ToJson(TestToken()));
  j["revoked_ms"] = "yesterday";
  EXPECT_EQ(ApiTokenFromJson(j).status().message(),
            "api_token.revoked_ms: expected an integer, got string \"yesterday\"");
  for (const char* key : {"id", "user", "secret_hash", "description", "created_ms"}) {
    j = ThroughText(ToJson(TestToken()));
    j.erase(key);
    EXPECT_EQ(ApiTokenFromJson(j).status().message(),
              "api_token." + std::string(key) + ": missing");
  }
  EXPECT_FALSE(ApiTokenFromJson(json(7)).ok());
}

TEST(CodecTest, AuditEntryRoundTrips) {
  AuditEntry e = TestAudit();
  Result<AuditEntry> back = AuditEntryFromJson(ThroughText(ToJson(e)));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, e);
  EXPECT_EQ(ToJson(e)["time_ms"], 1'764'400'000'123);

  back = AuditEntryFromJson(ThroughText(ToJson(AuditEntry{})));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, AuditEntry{});
}

TEST(CodecTest, AuditEntryErrorsNameThePath) {
  json j = ThroughText(ToJson(TestAudit()));
  j["status"] = int64_t{1} << 40;
  EXPECT_THAT(AuditEntryFromJson(j).status().message(),
              HasSubstr("audit_entry.status: expected an integer between"));
  for (const char* key : {"seq", "time_ms", "actor", "token_id", "tenant", "action", "object",
                          "source", "status", "message"}) {
    j = ThroughText(ToJson(TestAudit()));
    j.erase(key);
    EXPECT_EQ(AuditEntryFromJson(j).status().message(),
              "audit_entry." + std::string(key) + ": missing");
  }
  EXPECT_FALSE(AuditEntryFromJson(json(nullptr)).ok());
}

RC_GTEST_PROP(CodecProperty, NodeRoundTripsInMemory,
              (const std::string& name, const std::string& model, int64_t memory,
               int64_t milli_cpus, const std::map<std::string, std::string>& labels)) {
  Node node;
  node.name = name;
  node.labels = labels;
  node.gpus.push_back(Gpu{0, "uuid", model, memory, "d0"});
  node.milli_cpus = milli_cpus;
  node.memory_bytes = memory;
  node.state = *rc::gen::element(NodeState::kReady, NodeState::kDown, NodeState::kDraining);
  Result<Node> back = NodeFromJson(ToJson(node));
  RC_ASSERT(back.ok());
  RC_ASSERT(*back == node);
}

}  // namespace
}  // namespace trainyard
