// The authorization matrix: every user endpoint x every role x whose object
// (the caller's own, another user's of the same tenant, another tenant's) against the
// expected allow/deny, through a real HTTP server with real tokens.
//
// The endpoints come from InstallApi's own list, and each needs a rule in kRules
// below: a new endpoint without one fails RouteWithoutARuleFails... (the test
// EveryUserRouteHasARule) rather than going untested.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <functional>
#include <map>
#include <thread>

#include "core/spec_codec.h"
#include "data/manifest.h"
#include "server/api.h"
#include "server/cluster_testing.h"
#include "server/http_testing.h"
#include "store/memory_store.h"
#include "track/series_store.h"

namespace trainyard::server {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

enum class Scope { kNone, kSelf, kOwnTenant, kOtherTenant };

std::string ScopeName(Scope s) {
  switch (s) {
    case Scope::kNone:
      return "cluster-wide";
    case Scope::kSelf:
      return "own object";
    case Scope::kOwnTenant:
      return "same tenant, another user's";
    case Scope::kOtherTenant:
      return "another tenant's";
  }
  return "?";
}

constexpr const char* kTenant = "vision";
constexpr const char* kOther = "nlp";

struct Caller {
  std::string name;
  Role role;
};

const std::vector<Caller> kCallers = {{"vision-viewer", Role::kViewer},
                                      {"vision-member", Role::kMember},
                                      {"vision-admin", Role::kTenantAdmin},
                                      {"admin", Role::kClusterAdmin}};

struct Request {
  std::string path;
  std::string body;
};

class AuthzTest;

struct Rule {
  std::vector<Scope> scopes;
  std::function<Request(AuthzTest&, const Caller&, Scope)> make;
  std::function<bool(Role, Scope)> allow;
};

bool AtLeast(Role r, Role min) { return static_cast<int>(r) >= static_cast<int>(min); }

class AuthzTest : public ::testing::Test {
 protected:
  void SetUp() override {
    clock_.Set(Timestamp(std::chrono::hours(24 * 365 * 50)));
    auto c = Cluster::Open(&store_, &clock_, {});
    ASSERT_TRUE(c.ok());
    cluster_ = std::move(*c);
    logs_ = std::make_unique<LogStore>(::testing::TempDir() + "/authz_test_logs");
    auto a = AccessControl::Open(&store_, &clock_, {.rate_per_second = 0});
    ASSERT_TRUE(a.ok());
    access_ = std::move(*a);
    auto boot = access_->Bootstrap("admin");
    ASSERT_TRUE(boot.ok() && boot->has_value());
    tokens_["admin"] = (*boot)->text;
    admin_.user = "admin";
    admin_.role = Role::kClusterAdmin;
    for (const char* t : {kTenant, kOther}) ASSERT_TRUE(cluster_->EnsureTenant(t, "test").ok());
    AddUser("vision-viewer", kTenant, Role::kViewer);
    AddUser("vision-member", kTenant, Role::kMember);
    AddUser("vision-member2", kTenant, Role::kMember);
    AddUser("vision-admin", kTenant, Role::kTenantAdmin);
    AddUser("nlp-member", kOther, Role::kMember);
    Registration node;
    node.node.name = "node-0";
    node.node.gpus.push_back({0, "GPU-0", "H100", 80LL << 30, ""});
    node.node.milli_cpus = 8000;
    node.node.memory_bytes = 64LL << 30;
    node.simulated = true;
    ASSERT_TRUE(cluster_->Register(node).ok());

    const std::string db =
        ::testing::TempDir() + "/authz_test_series_" + std::to_string(getpid()) + ".db";
    std::filesystem::remove(db);
    auto opened = track::SeriesStore::Open(db);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    series_ = std::move(*opened);
    profiles_dir_ = ::testing::TempDir() + "/authz_test_profiles_" + std::to_string(getpid());
    std::filesystem::remove_all(profiles_dir_);
    profiles_ = std::make_unique<ProfileStore>(profiles_dir_, &clock_);
    AlertingOptions ao;
    auto alerting = Alerting::Open(cluster_.get(), &clock_, ao);
    ASSERT_TRUE(alerting.ok()) << alerting.status().ToString();
    alerting_ = std::move(*alerting);
    auto datasets = DatasetRegistry::Open(&store_, &clock_);
    ASSERT_TRUE(datasets.ok()) << datasets.status().ToString();
    datasets_ = std::move(*datasets);
    routes_ = InstallApi(http_, *cluster_, *logs_, *access_,
                         ApiOptions{"join-secret", series_.get(), profiles_.get(), alerting_.get(),
                                    "", datasets_.get()});
    port_ = serving_.Start(http_);
    ASSERT_GT(port_, 0);
    client_ = std::make_unique<httplib::Client>("127.0.0.1", port_);
  }
  void TearDown() override {
    cluster_->Shutdown();
    serving_.Stop();
    std::filesystem::remove_all(profiles_dir_);
  }

  void AddUser(const std::string& name, const std::string& tenant, Role role) {
    User u;
    u.name = name;
    u.tenant = tenant;
    u.role = role;
    ASSERT_TRUE(access_->CreateUser(admin_, u).ok()) << name;
    auto t = access_->CreateToken(admin_, name, "", std::nullopt);
    ASSERT_TRUE(t.ok());
    tokens_[name] = t->text;
  }

 public:
  // The user owning an object of `scope` for `caller`.
  std::string Owner(const Caller& caller, Scope scope) {
    switch (scope) {
      case Scope::kSelf:
        return caller.name;
      case Scope::kOwnTenant:
        return "vision-member2";
      default:
        return "nlp-member";
    }
  }
  static std::string TenantOf(Scope scope) {
    return scope == Scope::kOtherTenant ? kOther : kTenant;
  }
  // A new pending job of `scope` (submitted straight to the cluster, as its owner).
  std::string NewJob(const Caller& caller, Scope scope) {
    SpecParseResult r = ParseSpec("name: j\ncommand: [x]\nresources: {gpus: 1}\n", "t.yaml");
    JobSpec spec = *r.spec;
    spec.tenant = TenantOf(scope);
    auto ids = cluster_->Submit({spec}, "user:" + Owner(caller, scope));
    EXPECT_TRUE(ids.ok());
    return ids.ok() ? std::to_string(ids->front()) : "0";
  }
  // A new user of `scope`'s tenant to change or delete.
  std::string NewUser(Scope scope) {
    const std::string name = "victim-" + std::to_string(++serial_);
    User u;
    u.name = name;
    u.tenant = TenantOf(scope);
    u.role = Role::kMember;
    EXPECT_TRUE(access_->CreateUser(admin_, u).ok());
    return name;
  }
  // A new token of the object owner (for the caller itself: a second one).
  std::string NewToken(const Caller& caller, Scope scope) {
    auto t = access_->CreateToken(admin_, Owner(caller, scope), "", std::nullopt);
    EXPECT_TRUE(t.ok());
    return t.ok() ? t->token.id : "";
  }
  std::string Fresh() { return "new-" + std::to_string(++serial_); }
  // A fault injected into node-0; returns its id.
  std::string NewFault() {
    auto f = cluster_->InjectFault("node-0", "slow", -1, Duration(0), "test");
    EXPECT_TRUE(f.ok());
    return f.ok() ? f->fault.id : "";
  }
  // A new job of `scope` that has logged a few points of "loss".
  std::string NewJobWithLoss(const Caller& caller, Scope scope) {
    const std::string id = NewJob(caller, scope);
    EXPECT_TRUE(
        series_->Append({{std::stoll(id), 0, "loss", {{1, 1000, 2.5}, {2, 2000, 2.4}}}}).ok());
    return id;
  }
  // A new job of `scope` with a profile whose rank 0 stored its trace; returns the
  // trace's path.
  std::string NewJobWithProfile(const Caller& caller, Scope scope) {
    const std::string id = NewJob(caller, scope);
    auto r = profiles_->Create(std::stoll(id), 0, 5, {{0, "node-0"}}, "test");
    EXPECT_TRUE(r.ok());
    if (!r.ok()) return "";
    ProfileReport chunk;
    chunk.node = "node-0";
    chunk.job = std::stoll(id);
    chunk.id = r->id;
    chunk.data = R"({"traceEvents": []})";
    chunk.total_bytes = static_cast<int64_t>(chunk.data.size());
    EXPECT_TRUE(profiles_->Report(chunk).ok());
    return "/api/v1/jobs/" + id + "/profiles/" + r->id;
  }
  // A manifest the registry accepts (of no files).
  static std::string EmptyManifest() { return data::ManifestToText(data::Manifest{}); }
  // A new dataset of `scope`'s tenant; its name.
  std::string NewDataset(Scope scope) {
    const std::string name = Fresh();
    RegisterDataset r{name, TenantOf(scope), "/shared/" + name, "", EmptyManifest()};
    EXPECT_TRUE(datasets_->Register(admin_, r).ok());
    return name;
  }
  // A new empty queue of `scope`'s tenant, to change or delete.
  std::string NewQueue(Scope scope) {
    const std::string name = Fresh();
    EXPECT_TRUE(cluster_->PutQueue(Queue{name, TenantOf(scope), "", 1, 2, 1.0}, "test").ok());
    return TenantOf(scope) + "/" + name;
  }

  int Call(const std::string& method, const std::string& token, const Request& r,
           std::string* body = nullptr) {
    httplib::Headers h;
    if (!token.empty()) h.emplace("Authorization", "Bearer " + token);
    httplib::Result res =
        method == "GET"     ? client_->Get(r.path.c_str(), h)
        : method == "POST"  ? client_->Post(r.path.c_str(), h, r.body, "application/json")
        : method == "PATCH" ? client_->Patch(r.path.c_str(), h, r.body, "application/json")
        : method == "PUT"   ? client_->Put(r.path.c_str(), h, r.body, "application/json")
                            : client_->Delete(r.path.c_str(), h);
    if (!res) return 0;
    if (body != nullptr) *body = res->body;
    return res->status;
  }

  store::MemoryStore store_;
  FakeClock clock_;
  std::unique_ptr<Cluster> cluster_;
  std::unique_ptr<LogStore> logs_;
  std::unique_ptr<track::SeriesStore> series_;
  std::string profiles_dir_;
  std::unique_ptr<ProfileStore> profiles_;
  std::unique_ptr<Alerting> alerting_;
  std::unique_ptr<AccessControl> access_;
  std::unique_ptr<DatasetRegistry> datasets_;
  Principal admin_;
  std::map<std::string, std::string> tokens_;  // user -> token text
  std::vector<RouteInfo> routes_;
  http::Server http_;
  LoopbackServer serving_;
  int port_ = 0;
  std::unique_ptr<httplib::Client> client_;
  int serial_ = 0;
};

const std::vector<Scope> kCluster = {Scope::kNone};
const std::vector<Scope> kAll = {Scope::kSelf, Scope::kOwnTenant, Scope::kOtherTenant};
const std::vector<Scope> kTenants = {Scope::kOwnTenant, Scope::kOtherTenant};

bool Anyone(Role, Scope) { return true; }
bool AdminOnly(Role r, Scope) { return r == Role::kClusterAdmin; }
// Reading a tenant's things: its users, and cluster admins.
bool TenantReader(Role r, Scope s) { return r == Role::kClusterAdmin || s != Scope::kOtherTenant; }
// Managing a job: its owner (member or above), its tenant's admin, cluster admins.
bool JobManager(Role r, Scope s) {
  if (r == Role::kClusterAdmin) return true;
  if (s == Scope::kOtherTenant || r == Role::kViewer) return false;
  return s == Scope::kSelf || r == Role::kTenantAdmin;
}
// Tenant-admin work: on its own tenant; cluster admins everywhere.
bool TenantAdmin(Role r, Scope s) {
  return r == Role::kClusterAdmin || (r == Role::kTenantAdmin && s != Scope::kOtherTenant);
}
// One's own things, plus what TenantAdmin allows.
bool SelfOrTenantAdmin(Role r, Scope s) { return s == Scope::kSelf || TenantAdmin(r, s); }

Rule JobRead(const std::string& suffix) {
  return {kAll,
          [suffix](AuthzTest& t, const Caller& c, Scope s) {
            return Request{"/api/v1/jobs/" + t.NewJob(c, s) + suffix, ""};
          },
          TenantReader};
}
Rule JobManage(const std::string& verb, const std::string& body = "") {
  return {kAll,
          [verb, body](AuthzTest& t, const Caller& c, Scope s) {
            return Request{"/api/v1/jobs/" + t.NewJob(c, s) + "/" + verb, body};
          },
          JobManager};
}
Rule ClusterRead(const std::string& path) {
  return {kCluster, [path](AuthzTest&, const Caller&, Scope) { return Request{path, ""}; }, Anyone};
}
Rule NodeManage(const std::string& verb) {
  return {kCluster,
          [verb](AuthzTest&, const Caller&, Scope) {
            return Request{"/api/v1/nodes/node-0/" + verb, ""};
          },
          AdminOnly};
}

// The one table: "METHOD pattern" -> how to call it and who may.
const std::map<std::string, Rule>& Rules() {
  static const auto* rules = new std::map<std::string, Rule>{
      {"GET /api/v1/whoami", ClusterRead("/api/v1/whoami")},
      {"POST /api/v1/jobs",
       {kTenants,
        [](AuthzTest&, const Caller&, Scope s) {
          return Request{"/api/v1/jobs", "{\"name\": \"x\", \"command\": [\"x\"], \"tenant\": \"" +
                                             AuthzTest::TenantOf(s) + "\"}"};
        },
        [](Role r, Scope s) {
          return r == Role::kClusterAdmin || (r != Role::kViewer && s == Scope::kOwnTenant);
        }}},
      {"GET /api/v1/jobs",
       {kTenants,
        [](AuthzTest&, const Caller&, Scope s) {
          return Request{"/api/v1/jobs?tenant=" + AuthzTest::TenantOf(s), ""};
        },
        TenantReader}},
      {"GET /api/v1/jobs/([^/]+)", JobRead("")},
      {"GET /api/v1/jobs/([^/]+)/events", JobRead("/events")},
      {"GET /api/v1/jobs/([^/]+)/logs", JobRead("/logs")},
      {"GET /api/v1/jobs/([^/]+)/logs/search", JobRead("/logs/search?pattern=x")},
      {"POST /api/v1/jobs/([^/]+)/cancel", JobManage("cancel")},
      {"POST /api/v1/jobs/([^/]+)/hold", JobManage("hold")},
      {"POST /api/v1/jobs/([^/]+)/release", JobManage("release")},
      {"POST /api/v1/jobs/([^/]+)/checkpoint",
       JobManage("checkpoint", R"({"path": "/ck/1", "step": 1})")},
      {"GET /api/v1/jobs/([^/]+)/trace", JobRead("/trace")},
      // Profiling a Pending job is refused (409) after the caller is authorized.
      {"POST /api/v1/jobs/([^/]+)/profile", JobManage("profile", R"({"steps": 5})")},
      {"GET /api/v1/jobs/([^/]+)/profiles", JobRead("/profiles")},
      {"GET /api/v1/jobs/([^/]+)/profiles/([^/]+)",
       {kAll,
        [](AuthzTest& t, const Caller& c, Scope s) {
          return Request{t.NewJobWithProfile(c, s), ""};
        },
        TenantReader}},
      {"GET /api/v1/runs",
       {kTenants,
        [](AuthzTest&, const Caller&, Scope s) {
          return Request{"/api/v1/runs?tenant=" + AuthzTest::TenantOf(s), ""};
        },
        TenantReader}},
      {"GET /api/v1/runs/compare",
       {kAll,
        [](AuthzTest& t, const Caller& c, Scope s) {
          return Request{"/api/v1/runs/compare?ids=" + t.NewJob(c, s) + "," + t.NewJob(c, s), ""};
        },
        TenantReader}},
      {"GET /api/v1/runs/([^/]+)",
       {kAll,
        [](AuthzTest& t, const Caller& c, Scope s) {
          return Request{"/api/v1/runs/" + t.NewJob(c, s), ""};
        },
        TenantReader}},
      {"GET /api/v1/runs/([^/]+)/metrics",
       {kAll,
        [](AuthzTest& t, const Caller& c, Scope s) {
          return Request{"/api/v1/runs/" + t.NewJob(c, s) + "/metrics", ""};
        },
        TenantReader}},
      {"GET /api/v1/runs/([^/]+)/metrics/(.+)",
       {kAll,
        [](AuthzTest& t, const Caller& c, Scope s) {
          return Request{"/api/v1/runs/" + t.NewJobWithLoss(c, s) + "/metrics/loss?buckets=10", ""};
        },
        TenantReader}},
      {"POST /api/v1/runs/([^/]+)/metrics",
       {kAll,
        [](AuthzTest& t, const Caller& c, Scope s) {
          return Request{"/api/v1/runs/" + t.NewJob(c, s) + "/metrics",
                         R"({"series": [{"key": "loss", "steps": [1], "values": [2.5]}]})"};
        },
        JobManager}},
      {"GET /metrics", ClusterRead("/metrics")},
      {"GET /api/v1/alerts", ClusterRead("/api/v1/alerts?state=firing")},
      {"GET /api/v1/alerts/events", ClusterRead("/api/v1/alerts/events")},
      {"GET /api/v1/alerts/rules", ClusterRead("/api/v1/alerts/rules")},
      {"GET /api/v1/jobs/([^/]+)/diagnosis", JobRead("/diagnosis")},
      {"GET /api/v1/faults",
       {kCluster,
        [](AuthzTest&, const Caller&, Scope) {
          return Request{"/api/v1/faults", ""};
        },
        AdminOnly}},
      {"DELETE /api/v1/faults",
       {kCluster,
        [](AuthzTest&, const Caller&, Scope) {
          return Request{"/api/v1/faults", ""};
        },
        AdminOnly}},
      {"POST /api/v1/nodes/([^/]+)/faults",
       {kCluster,
        [](AuthzTest&, const Caller&, Scope) {
          return Request{"/api/v1/nodes/node-0/faults", R"({"kind": "thermal", "gpu": 0})"};
        },
        AdminOnly}},
      {"DELETE /api/v1/nodes/([^/]+)/faults", NodeManage("faults")},
      {"DELETE /api/v1/nodes/([^/]+)/faults/([^/]+)",
       {kCluster,
        [](AuthzTest& t, const Caller&, Scope) {
          return Request{"/api/v1/nodes/node-0/faults/" + t.NewFault(), ""};
        },
        AdminOnly}},
      {"GET /api/v1/nodes", ClusterRead("/api/v1/nodes")},
      {"GET /api/v1/nodes/([^/]+)", ClusterRead("/api/v1/nodes/node-0")},
      {"POST /api/v1/nodes/([^/]+)/cordon", NodeManage("cordon")},
      {"POST /api/v1/nodes/([^/]+)/drain", NodeManage("drain")},
      {"POST /api/v1/nodes/([^/]+)/uncordon", NodeManage("uncordon")},
      {"GET /api/v1/queues", ClusterRead("/api/v1/queues")},
      {"GET /api/v1/tenants", ClusterRead("/api/v1/tenants")},
      {"GET /api/v1/priority-classes", ClusterRead("/api/v1/priority-classes")},
      {"PUT /api/v1/tenants/([^/]+)/quota",
       {kTenants,
        [](AuthzTest&, const Caller&, Scope s) {
          return Request{"/api/v1/tenants/" + AuthzTest::TenantOf(s) + "/quota",
                         R"({"guaranteed_gpus": 1000, "limit_gpus": 1000})"};
        },
        AdminOnly}},
      {"PUT /api/v1/tenants/([^/]+)/run-as",
       {kTenants,
        [](AuthzTest&, const Caller&, Scope s) {
          return Request{"/api/v1/tenants/" + AuthzTest::TenantOf(s) + "/run-as",
                         R"({"run_as": "2001:2001"})"};
        },
        AdminOnly}},
      {"PUT /api/v1/queues/([^/]+)/([^/]+)",
       {kTenants,
        [](AuthzTest& t, const Caller&, Scope s) {
          return Request{"/api/v1/queues/" + AuthzTest::TenantOf(s) + "/" + t.Fresh(),
                         R"({"guaranteed_gpus": 1, "limit_gpus": 4, "weight": 2})"};
        },
        TenantAdmin}},
      {"DELETE /api/v1/queues/([^/]+)/([^/]+)",
       {kTenants,
        [](AuthzTest& t, const Caller&, Scope s) {
          return Request{"/api/v1/queues/" + t.NewQueue(s), ""};
        },
        TenantAdmin}},
      {"GET /api/v1/users",
       {kCluster,
        [](AuthzTest&, const Caller&, Scope) {
          return Request{"/api/v1/users", ""};
        },
        [](Role r, Scope) { return AtLeast(r, Role::kTenantAdmin); }}},
      {"POST /api/v1/users",
       {kTenants,
        [](AuthzTest& t, const Caller&, Scope s) {
          return Request{"/api/v1/users", "{\"name\": \"" + t.Fresh() + "\", \"tenant\": \"" +
                                              AuthzTest::TenantOf(s) + "\"}"};
        },
        TenantAdmin}},
      {"GET /api/v1/users/([^/]+)",
       {kAll,
        [](AuthzTest& t, const Caller& c, Scope s) {
          return Request{"/api/v1/users/" + t.Owner(c, s), ""};
        },
        SelfOrTenantAdmin}},
      {"PATCH /api/v1/users/([^/]+)",
       {kTenants,
        [](AuthzTest& t, const Caller&, Scope s) {
          return Request{"/api/v1/users/" + t.NewUser(s), R"({"role": "viewer"})"};
        },
        TenantAdmin}},
      {"DELETE /api/v1/users/([^/]+)",
       {kTenants,
        [](AuthzTest& t, const Caller&, Scope s) {
          return Request{"/api/v1/users/" + t.NewUser(s), ""};
        },
        TenantAdmin}},
      {"GET /api/v1/tokens",
       {kAll,
        [](AuthzTest& t, const Caller& c, Scope s) {
          return Request{
              s == Scope::kSelf ? "/api/v1/tokens" : "/api/v1/tokens?user=" + t.Owner(c, s), ""};
        },
        SelfOrTenantAdmin}},
      {"POST /api/v1/tokens",
       {kAll,
        [](AuthzTest& t, const Caller& c, Scope s) {
          return Request{"/api/v1/tokens",
                         s == Scope::kSelf ? "{}" : "{\"user\": \"" + t.Owner(c, s) + "\"}"};
        },
        SelfOrTenantAdmin}},
      {"DELETE /api/v1/tokens/([^/]+)",
       {kAll,
        [](AuthzTest& t, const Caller& c, Scope s) {
          return Request{"/api/v1/tokens/" + t.NewToken(c, s), ""};
        },
        SelfOrTenantAdmin}},
      {"GET /api/v1/datasets", ClusterRead("/api/v1/datasets")},
      {"POST /api/v1/datasets",
       {kTenants,
        [](AuthzTest& t, const Caller&, Scope s) {
          const std::string name = t.Fresh();
          return Request{"/api/v1/datasets", json{{"name", name},
                                                  {"tenant", AuthzTest::TenantOf(s)},
                                                  {"source", "/shared/" + name},
                                                  {"manifest", AuthzTest::EmptyManifest()}}
                                                 .dump()};
        },
        // As submitting: a tenant's members register its data.
        [](Role r, Scope s) {
          return r == Role::kClusterAdmin || (r != Role::kViewer && s == Scope::kOwnTenant);
        }}},
      {"GET /api/v1/datasets/([^/]+)",
       {kTenants,
        [](AuthzTest& t, const Caller&, Scope s) {
          return Request{"/api/v1/datasets/" + t.NewDataset(s), ""};
        },
        TenantReader}},
      {"GET /api/v1/datasets/([^/]+)/manifest",
       {kTenants,
        [](AuthzTest& t, const Caller&, Scope s) {
          return Request{"/api/v1/datasets/" + t.NewDataset(s) + "/manifest", ""};
        },
        TenantReader}},
      {"DELETE /api/v1/datasets/([^/]+)",
       {kTenants,
        [](AuthzTest& t, const Caller&, Scope s) {
          return Request{"/api/v1/datasets/" + t.NewDataset(s), ""};
        },
        TenantAdmin}},
      {"GET /api/v1/audit",
       {kTenants,
        [](AuthzTest&, const Caller&, Scope s) {
          return Request{"/api/v1/audit?tenant=" + AuthzTest::TenantOf(s), ""};
        },
        TenantAdmin}},
  };
  return *rules;
}

std::string Error(const std::string& body) {
  json j = json::parse(body, nullptr, false);
  return j.is_object() && j.contains("error") ? j["error"].get<std::string>() : body;
}

std::string Key(const RouteInfo& r) { return r.method + " " + r.pattern; }

TEST_F(AuthzTest, EveryUserRouteHasARuleAndEveryRuleARoute) {
  std::set<std::string> keys;
  for (const RouteInfo& r : routes_) {
    if (r.access != RouteAccess::kUser) continue;
    keys.insert(Key(r));
    EXPECT_TRUE(Rules().contains(Key(r)))
        << Key(r) << " has no rule in the authorization matrix (authz_test.cc, Rules())";
  }
  for (const auto& [key, rule] : Rules()) {
    EXPECT_TRUE(keys.contains(key)) << "rule for " << key << " names no user route";
  }
}

// "/api/v1/jobs/([^/]+)/cancel" and "/jobs/{id}/cancel" both become "/jobs/{}/cancel".
std::string Shape(std::string path) {
  if (path.starts_with("/api/v1")) path.erase(0, 7);
  for (size_t at; (at = path.find("([^/]+)")) != std::string::npos;) path.replace(at, 7, "{}");
  for (size_t at; (at = path.find("(.+)")) != std::string::npos;) path.replace(at, 4, "{}");
  for (size_t at = 0; (at = path.find('{', at)) != std::string::npos; ++at) {
    const size_t end = path.find('}', at);
    if (end != std::string::npos) path.replace(at + 1, end - at - 1, "");
  }
  return path;
}

TEST_F(AuthzTest, OpenApiDescribesEveryRoute) {
  const YAML::Node doc = YAML::LoadFile(TRAINYARD_OPENAPI_FILE);
  std::set<std::string> documented;
  for (const auto& path : doc["paths"]) {
    for (const auto& op : path.second) {
      std::string method = op.first.as<std::string>();
      if (method == "parameters") continue;
      for (char& c : method) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      documented.insert(method + " " + Shape(path.first.as<std::string>()));
    }
  }
  EXPECT_GT(documented.size(), 30u);
  for (const RouteInfo& r : routes_) {
    if (r.access == RouteAccess::kAgent) continue;  // docs/agent-protocol.md
    EXPECT_TRUE(documented.contains(r.method + " " + Shape(r.pattern)))
        << r.method << " " << r.pattern << " is not in docs/openapi.yaml";
  }
}

TEST_F(AuthzTest, Matrix) {
  int cases = 0;
  for (const RouteInfo& route : routes_) {
    if (route.access != RouteAccess::kUser) continue;
    auto it = Rules().find(Key(route));
    if (it == Rules().end()) continue;  // reported by the test above
    const Rule& rule = it->second;
    for (const Caller& caller : kCallers) {
      for (Scope scope : rule.scopes) {
        if (route.method == "DELETE" && route.pattern.find("/users/") != std::string::npos &&
            scope == Scope::kSelf) {
          continue;
        }
        const Request req = rule.make(*this, caller, scope);
        std::string body;
        const int status = Call(route.method, tokens_[caller.name], req, &body);
        const bool allowed = status != 401 && status != 403 && status != 404 && status != 0;
        const bool expect = rule.allow(caller.role, scope);
        EXPECT_EQ(allowed, expect)
            << Key(route) << " as " << caller.name << " (" << RoleName(caller.role) << ") on "
            << ScopeName(scope) << ": " << route.method << " " << req.path << " -> " << status
            << " " << body;
        if (!expect) {
          EXPECT_THAT(body,
                      ::testing::AnyOf(HasSubstr("may not"), HasSubstr("no "), HasSubstr("needs")))
              << Key(route) << ": a denial says why";
        }
        ++cases;
      }
    }
    // Without a token, and with a malformed one: 401, whoever the object belongs to.
    const Request req = rule.make(*this, kCallers[3], rule.scopes.front());
    EXPECT_EQ(Call(route.method, "", req), 401) << Key(route);
    EXPECT_EQ(Call(route.method, "tyt_nope", req), 401) << Key(route);
  }
  EXPECT_GT(cases, 200);
}

TEST_F(AuthzTest, PublicAndAgentRoutesAreKeptApart) {
  for (const RouteInfo& r : routes_) {
    std::string body;
    if (r.access == RouteAccess::kPublic) {
      EXPECT_EQ(Call(r.method, "", {r.pattern, ""}), 200) << Key(r);
    } else if (r.access == RouteAccess::kAgent) {
      // A user's token, even a cluster admin's, is not a join token.
      EXPECT_EQ(Call(r.method, tokens_["admin"], {r.pattern, "{}"}, &body), 401) << Key(r);
      EXPECT_EQ(Call(r.method, "", {r.pattern, "{}"}), 401) << Key(r);
      EXPECT_NE(Call(r.method, "join-secret", {r.pattern, "{}"}), 401) << Key(r);
    }
  }
  // And the join token is not a user token.
  EXPECT_EQ(Call("GET", "join-secret", {"/api/v1/jobs", ""}), 401);
}

TEST_F(AuthzTest, RevokedAndExpiredTokensAreRefusedWithAClearMessage) {
  auto t = access_->CreateToken(admin_, "vision-member", "laptop", Duration(60'000));
  ASSERT_TRUE(t.ok());
  std::string body;
  EXPECT_EQ(Call("GET", t->text, {"/api/v1/whoami", ""}, &body), 200) << body;
  EXPECT_THAT(body, HasSubstr("vision-member"));
  clock_.Advance(Duration(60'000));
  EXPECT_EQ(Call("GET", t->text, {"/api/v1/whoami", ""}, &body), 401);
  EXPECT_THAT(body, HasSubstr("expired"));

  auto u = access_->CreateToken(admin_, "vision-member", "ci", std::nullopt);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(Call("DELETE", tokens_["vision-member"], {"/api/v1/tokens/" + u->token.id, ""}), 200);
  EXPECT_EQ(Call("GET", u->text, {"/api/v1/whoami", ""}, &body), 401);
  EXPECT_THAT(body, HasSubstr("revoked"));
  EXPECT_THAT(body, ::testing::Not(HasSubstr(u->text.substr(17))));

  // A wrong secret for a real id reads like an unknown token.
  std::string forged = u->text;
  forged.back() = forged.back() == '0' ? '1' : '0';
  EXPECT_EQ(Call("GET", forged, {"/api/v1/whoami", ""}, &body), 401);
  EXPECT_THAT(body, HasSubstr("not valid"));

  // Deleting a user ends its tokens.
  auto v = access_->CreateToken(admin_, "vision-member2", "", std::nullopt);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(Call("DELETE", tokens_["admin"], {"/api/v1/users/vision-member2", ""}), 200);
  EXPECT_EQ(Call("GET", v->text, {"/api/v1/whoami", ""}), 401);
}

TEST_F(AuthzTest, TokensAreStoredHashedAndShownOnce) {
  std::string body;
  ASSERT_EQ(
      Call("POST", tokens_["vision-member"], {"/api/v1/tokens", R"({"expires_in": "30d"})"}, &body),
      201)
      << body;
  const json created = json::parse(body);
  const std::string text = created["token"];
  ASSERT_TRUE(ParseTokenText(text).ok());
  auto stored = store_.ListTokens();
  ASSERT_TRUE(stored.ok());
  bool found = false;
  for (const ApiToken& t : *stored) {
    if (t.id != created["id"]) continue;
    found = true;
    EXPECT_EQ(t.secret_hash, Sha256Hex(ParseTokenText(text)->secret));
    EXPECT_EQ(t.expires, clock_.Now() + Duration(30LL * 24 * 3600 * 1000));
  }
  EXPECT_TRUE(found);
  ASSERT_EQ(Call("GET", tokens_["vision-member"], {"/api/v1/tokens", ""}, &body), 200);
  EXPECT_THAT(body, ::testing::Not(HasSubstr(ParseTokenText(text)->secret)));
  EXPECT_THAT(body, ::testing::Not(HasSubstr("secret_hash")));
}

TEST_F(AuthzTest, MembersSubmitToTheirTenantAndOnlyGrantedPriorityClasses) {
  std::string body;
  ASSERT_EQ(Call("POST", tokens_["vision-member"],
                 {"/api/v1/jobs", R"({"name": "a", "command": ["x"]})"}, &body),
            201)
      << body;
  const int64_t id = json::parse(body)["id"];
  auto job = cluster_->GetJob(id);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->job.spec.tenant, kTenant);  // the caller's, not "default"
  EXPECT_EQ(job->job.submitted_by, "user:vision-member");

  EXPECT_EQ(Call("POST", tokens_["vision-member"],
                 {"/api/v1/jobs", R"({"name": "a", "command": ["x"], "priority": "p0"})"}, &body),
            403);
  EXPECT_THAT(Error(body), HasSubstr("priority class \"p0\""));
  // A new queue is a cluster admin's to make.
  EXPECT_EQ(Call("POST", tokens_["vision-member"],
                 {"/api/v1/jobs", R"({"name": "a", "command": ["x"], "queue": "mine"})"}, &body),
            400);
  EXPECT_THAT(Error(body), HasSubstr("has no queue \"mine\""));

  Principal admin = admin_;
  ASSERT_TRUE(access_
                  ->UpdateUser(admin, "vision-member",
                               UserChange{.priority_classes = std::vector<std::string>{"p0"}})
                  .ok());
  EXPECT_EQ(Call("POST", tokens_["vision-member"],
                 {"/api/v1/jobs", R"({"name": "a", "command": ["x"], "priority": "p0"})"}, &body),
            201)
      << body;
}

TEST_F(AuthzTest, AUsersOwnIdentityIsAClusterAdminsToSetAndGoesWithItsJobs) {
  std::string body;
  const Request set{"/api/v1/users/vision-member", R"({"run_as": "3001:3002"})"};
  // A tenant admin manages its users, but not which Unix identity they run as.
  EXPECT_EQ(Call("PATCH", tokens_["vision-admin"], set, &body), 403);
  EXPECT_THAT(Error(body), HasSubstr("only a cluster-admin maps users to Unix identities"));
  // Bad identities name the field and value.
  EXPECT_EQ(Call("PATCH", tokens_["admin"],
                 {"/api/v1/users/vision-member", R"({"run_as": "3001"})"}, &body),
            400);
  EXPECT_THAT(Error(body), HasSubstr("user.run_as: must be \"UID:GID\""));
  EXPECT_THAT(Error(body), HasSubstr("got \"3001\""));
  EXPECT_EQ(Call("PATCH", tokens_["admin"], {"/api/v1/users/vision-member", R"({"run_as": "0:0"})"},
                 &body),
            400);
  EXPECT_THAT(Error(body), HasSubstr("a user may not run as root"));

  ASSERT_EQ(Call("PATCH", tokens_["admin"], set, &body), 200) << body;
  EXPECT_EQ(json::parse(body)["run_as"], "3001:3002");
  ASSERT_EQ(Call("POST", tokens_["vision-member"],
                 {"/api/v1/jobs", R"({"name": "a", "command": ["x"]})"}, &body),
            201)
      << body;
  auto job = cluster_->GetJob(json::parse(body)["id"].get<int64_t>());
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->job.run_as_uid, 3001);
  EXPECT_EQ(job->job.run_as_gid, 3002);
  // Kept by the store (what a restarted server reads back).
  auto stored = store_.GetJob(job->job.id);
  ASSERT_TRUE(stored.ok() && stored->has_value());
  EXPECT_EQ((*stored)->run_as_uid, 3001);

  // "" hands the user back to its tenant's identity; its next jobs carry none.
  ASSERT_EQ(
      Call("PATCH", tokens_["admin"], {"/api/v1/users/vision-member", R"({"run_as": ""})"}, &body),
      200)
      << body;
  EXPECT_TRUE(json::parse(body)["run_as"].is_null());
  ASSERT_EQ(Call("POST", tokens_["vision-member"],
                 {"/api/v1/jobs", R"({"name": "b", "command": ["x"]})"}, &body),
            201);
  job = cluster_->GetJob(json::parse(body)["id"].get<int64_t>());
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->job.run_as_uid, -1);
}

TEST_F(AuthzTest, ListingsShowOnlyTheCallersTenant) {
  const std::string mine = NewJob(kCallers[1], Scope::kSelf);
  const std::string theirs = NewJob(kCallers[1], Scope::kOtherTenant);
  std::string body;
  ASSERT_EQ(Call("GET", tokens_["vision-viewer"], {"/api/v1/jobs", ""}, &body), 200) << body;
  std::set<std::string> ids;
  const json page = json::parse(body);
  for (const auto& j : page.at("jobs")) ids.insert(std::to_string(j.at("id").get<int64_t>()));
  EXPECT_TRUE(ids.contains(mine)) << mine << " " << body;
  EXPECT_FALSE(ids.contains(theirs));
  ASSERT_EQ(Call("GET", tokens_["admin"], {"/api/v1/jobs", ""}, &body), 200);
  ids.clear();
  const json all = json::parse(body);
  for (const auto& j : all.at("jobs")) ids.insert(std::to_string(j.at("id").get<int64_t>()));
  EXPECT_TRUE(ids.contains(mine));
  EXPECT_TRUE(ids.contains(theirs));
}

TEST_F(AuthzTest, NodesShowOnlyTheJobsTheCallerMaySee) {
  const std::string theirs = NewJob(kCallers[1], Scope::kOtherTenant);
  auto pass = cluster_->SchedulePass();
  ASSERT_TRUE(pass.ok());
  ASSERT_EQ(pass->binds, 1);
  std::string body;
  ASSERT_EQ(Call("GET", tokens_["admin"], {"/api/v1/nodes/node-0", ""}, &body), 200);
  EXPECT_EQ(json::parse(body)["jobs"], json::array({std::stoll(theirs)})) << body;
  // Each GPU says which job runs on it: its id for the admin, "hidden" for the viewer.
  auto busy_gpus = [](const json& node, const json& shown) {
    int busy = 0, free = 0;
    for (const json& g : node.at("gpu_jobs")) {
      if (g.is_null()) {
        ++free;
      } else {
        EXPECT_EQ(g, shown) << node.dump();
        ++busy;
      }
    }
    EXPECT_EQ(busy + free, node.at("gpus_total").get<int>());
    return busy;
  };
  EXPECT_EQ(busy_gpus(json::parse(body), json(std::stoll(theirs))), 1);
  ASSERT_EQ(Call("GET", tokens_["vision-viewer"], {"/api/v1/nodes/node-0", ""}, &body), 200);
  EXPECT_EQ(json::parse(body)["jobs"], json::array()) << body;
  EXPECT_EQ(json::parse(body)["gpus_used"], 1) << body;
  EXPECT_EQ(busy_gpus(json::parse(body), json("hidden")), 1);
  ASSERT_EQ(Call("GET", tokens_["vision-viewer"], {"/api/v1/nodes", ""}, &body), 200);
  EXPECT_EQ(json::parse(body)["nodes"][0]["jobs"], json::array()) << body;
}

// Queues of this test's tenant, from the cluster.
std::map<std::string, Queue> QueuesOf(Cluster& cluster, const std::string& tenant) {
  std::map<std::string, Queue> out;
  for (const QueueView& v : cluster.ListQueues()) {
    if (v.queue.tenant == tenant) out[v.queue.name] = v.queue;
  }
  return out;
}

TEST_F(AuthzTest, TenantAdminsManageTheirQueuesWithinTheQuotaAClusterAdminSets) {
  std::string body;
  // The cluster admin gives vision 8 guaranteed GPUs, at most 16 per queue.
  ASSERT_EQ(
      Call("PUT", tokens_["admin"],
           {"/api/v1/tenants/vision/quota", R"({"guaranteed_gpus": 8, "limit_gpus": 16})"}, &body),
      200)
      << body;
  EXPECT_EQ(json::parse(body)["guaranteed_gpus"], 8);
  // The default queue's unbounded limit came down to the tenant's.
  EXPECT_EQ(QueuesOf(*cluster_, kTenant).at("default").limit_gpus, 16);
  ASSERT_EQ(Call("GET", tokens_["vision-viewer"], {"/api/v1/tenants", ""}, &body), 200);
  bool shown = false;
  const json listed = json::parse(body);
  for (const auto& t : listed["tenants"]) {
    if (t["name"] != kTenant) continue;
    shown = true;
    EXPECT_EQ(t["guaranteed_gpus"], 8) << body;
    EXPECT_EQ(t["limit_gpus"], 16) << body;
  }
  EXPECT_TRUE(shown) << body;

  // Its tenant admin makes a queue within it (201), then changes it (200).
  ASSERT_EQ(
      Call("PUT", tokens_["vision-admin"],
           {"/api/v1/queues/vision/train", R"({"guaranteed_gpus": 6, "limit_gpus": 12})"}, &body),
      201)
      << body;
  EXPECT_EQ(json::parse(body)["limit_gpus"], 12);
  ASSERT_EQ(Call("PUT", tokens_["vision-admin"],
                 {"/api/v1/queues/vision/train",
                  R"({"guaranteed_gpus": 5, "limit_gpus": 12, "weight": 3})"},
                 &body),
            200)
      << body;
  EXPECT_EQ(QueuesOf(*cluster_, kTenant).at("train"), (Queue{"train", kTenant, "", 5, 12, 3.0}));
  // A child queue: its parent must exist.
  EXPECT_EQ(Call("PUT", tokens_["vision-admin"],
                 {"/api/v1/queues/vision/eval",
                  R"({"guaranteed_gpus": 1, "limit_gpus": 4, "parent": "ghost"})"},
                 &body),
            400);
  EXPECT_THAT(Error(body), HasSubstr("queue.parent"));
  ASSERT_EQ(Call("PUT", tokens_["vision-admin"],
                 {"/api/v1/queues/vision/eval",
                  R"({"guaranteed_gpus": 1, "limit_gpus": 4, "parent": "train"})"},
                 &body),
            201)
      << body;

  // Beyond the tenant's guarantee: refused, naming the numbers; nothing stored.
  EXPECT_EQ(
      Call("PUT", tokens_["vision-admin"],
           {"/api/v1/queues/vision/big", R"({"guaranteed_gpus": 3, "limit_gpus": 4})"}, &body),
      409);
  EXPECT_THAT(Error(body), HasSubstr("guaranteed_gpus 3 plus the 6 GPUs"));
  EXPECT_THAT(Error(body), HasSubstr("guaranteed_gpus of 8; at most 2 is left"));
  // Beyond the tenant's limit per queue.
  EXPECT_EQ(
      Call("PUT", tokens_["vision-admin"],
           {"/api/v1/queues/vision/big", R"({"guaranteed_gpus": 0, "limit_gpus": 17})"}, &body),
      409);
  EXPECT_THAT(Error(body), HasSubstr("limit_gpus 17 is above tenant \"vision\"'s limit of 16"));
  EXPECT_FALSE(QueuesOf(*cluster_, kTenant).contains("big"));
  auto stored = store_.ListQueues();
  ASSERT_TRUE(stored.ok());
  for (const Queue& q : *stored) EXPECT_NE(q.name, "big");

  // Members make no queues; a tenant admin cannot raise its own tenant's quota.
  EXPECT_EQ(
      Call("PUT", tokens_["vision-member"],
           {"/api/v1/queues/vision/mine", R"({"guaranteed_gpus": 0, "limit_gpus": 1})"}, &body),
      403);
  EXPECT_THAT(Error(body), HasSubstr("may not manage-queues"));
  EXPECT_EQ(
      Call("PUT", tokens_["vision-admin"],
           {"/api/v1/tenants/vision/quota", R"({"guaranteed_gpus": 99, "limit_gpus": 99})"}, &body),
      403);
  EXPECT_THAT(Error(body), HasSubstr("needs role cluster-admin"));
  for (const Tenant& t : cluster_->ListTenants()) {
    if (t.name == kTenant) {
      EXPECT_EQ(t.guaranteed_gpus, 8);
    }
  }

  // Lowering the quota below what the queues hold is refused.
  EXPECT_EQ(
      Call("PUT", tokens_["admin"],
           {"/api/v1/tenants/vision/quota", R"({"guaranteed_gpus": 5, "limit_gpus": 16})"}, &body),
      409);
  EXPECT_THAT(Error(body), HasSubstr("guaranteed_gpus 5 is below the 6 GPUs"));

  // Deleting: not while it has a child queue or unfinished jobs.
  EXPECT_EQ(Call("DELETE", tokens_["vision-admin"], {"/api/v1/queues/vision/train", ""}, &body),
            409);
  EXPECT_THAT(Error(body), HasSubstr("child queues (eval)"));
  SpecParseResult r = ParseSpec("name: j\ncommand: [x]\nqueue: eval\n", "t.yaml");
  JobSpec spec = *r.spec;
  spec.tenant = kTenant;
  auto ids = cluster_->Submit({spec}, "user:vision-member");
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  EXPECT_EQ(Call("DELETE", tokens_["vision-admin"], {"/api/v1/queues/vision/eval", ""}, &body),
            409);
  EXPECT_THAT(Error(body), HasSubstr("1 unfinished job(s) (" + std::to_string(ids->front())));
  ASSERT_TRUE(cluster_->Cancel(ids->front(), "test").ok());
  EXPECT_EQ(Call("DELETE", tokens_["vision-admin"], {"/api/v1/queues/vision/eval", ""}, &body), 200)
      << body;
  EXPECT_EQ(Call("DELETE", tokens_["vision-admin"], {"/api/v1/queues/vision/eval", ""}, &body),
            404);
  EXPECT_FALSE(QueuesOf(*cluster_, kTenant).contains("eval"));
}

TEST_F(AuthzTest, BadQueueAndQuotaBodiesNameTheField) {
  std::string body;
  const std::string admin = tokens_["admin"];
  EXPECT_EQ(Call("PUT", admin, {"/api/v1/queues/vision/q", R"({"guaranteed_gpus": 1})"}, &body),
            400);
  EXPECT_THAT(Error(body), HasSubstr("queue.limit_gpus: required"));
  EXPECT_EQ(Call("PUT", admin, {"/api/v1/queues/vision/q", R"({"guaranteed_gpus": 1, "limit": 2})"},
                 &body),
            400);
  EXPECT_THAT(Error(body), HasSubstr("unknown field \"limit\""));
  EXPECT_EQ(
      Call("PUT", admin,
           {"/api/v1/queues/vision/q", R"({"guaranteed_gpus": "1", "limit_gpus": 2})"}, &body),
      400);
  EXPECT_THAT(Error(body), HasSubstr("queue.guaranteed_gpus: expected an integer"));
  EXPECT_EQ(Call("PUT", admin,
                 {"/api/v1/queues/vision/q", R"({"guaranteed_gpus": 4, "limit_gpus": 2})"}, &body),
            400);
  EXPECT_THAT(Error(body), HasSubstr("queue.limit_gpus: must be >= guaranteed_gpus (4)"));
  EXPECT_EQ(
      Call("PUT", admin,
           {"/api/v1/queues/vision/q", R"({"guaranteed_gpus": 1, "limit_gpus": 2, "weight": 0})"},
           &body),
      400);
  EXPECT_THAT(Error(body), HasSubstr("queue.weight"));
  EXPECT_EQ(Call("PUT", admin, {"/api/v1/queues/Vision/q", R"({})"}, &body), 400);
  EXPECT_EQ(Call("PUT", admin,
                 {"/api/v1/queues/ghost/q", R"({"guaranteed_gpus": 0, "limit_gpus": 1})"}, &body),
            404);
  EXPECT_THAT(Error(body), HasSubstr("tenant \"ghost\" does not exist"));
  EXPECT_EQ(Call("PUT", admin, {"/api/v1/tenants/vision/quota", R"({"guaranteed_gpus": -1,
                 "limit_gpus": 2})"},
                 &body),
            400);
  EXPECT_THAT(Error(body), HasSubstr("tenant.guaranteed_gpus: must be between 0"));
  EXPECT_EQ(Call("PUT", admin, {"/api/v1/tenants/vision/quota", "[]"}, &body), 400);
  // A quota for a tenant that does not exist yet creates it, with its default queue.
  ASSERT_EQ(
      Call("PUT", admin,
           {"/api/v1/tenants/speech/quota", R"({"guaranteed_gpus": 4, "limit_gpus": 8})"}, &body),
      200)
      << body;
  EXPECT_EQ(QueuesOf(*cluster_, "speech").at("default"),
            (Queue{"default", "speech", "", 0, 8, 1.0}));
  auto tenants = store_.ListTenants();
  ASSERT_TRUE(tenants.ok());
  bool found = false;
  for (const Tenant& t : *tenants) {
    if (t.name != "speech") continue;
    found = true;
    EXPECT_EQ(t.guaranteed_gpus, 4);
    EXPECT_EQ(t.limit_gpus, 8);
  }
  EXPECT_TRUE(found);
}

TEST_F(AuthzTest, SecretValuesAppearNowhereTheApiAnswers) {
  const std::string secret = "hf_s3cr3t_value_42";
  const std::string spec = "name: secretive\ntenant: " + std::string(kTenant) +
                           "\ncommand: [x]\nresources: {gpus: 1}\nenv: {HF_TOKEN: " + secret +
                           ", LR: '0.1'}\nsecret_env: [HF_TOKEN]\n";
  std::string body;
  ASSERT_EQ(Call("POST", tokens_["admin"], {"/api/v1/jobs", spec}, &body), 201) << body;
  const std::string id = std::to_string(json::parse(body).at("id").get<int64_t>());
  // Running, with progress, so that /metrics has per-job series for it.
  auto starts = StartRanksOn(*cluster_, "node-0");
  ASSERT_TRUE(starts.ok()) << starts.status().ToString();
  ASSERT_EQ(starts->size(), 1u);
  ASSERT_TRUE(
      series_->Append({{std::stoll(id), 0, "loss", {{1, 1000, 2.5}, {2, 2000, 2.4}}}}).ok());
  // A refused submission that carries the secret too.
  ASSERT_EQ(Call("POST", tokens_["admin"], {"/api/v1/jobs", spec + "replicas: 0\n"}, &body), 400);
  EXPECT_EQ(body.find(secret), std::string::npos) << body;
  for (const std::string& path : std::vector<std::string>{
           "/metrics", "/api/v1/jobs/" + id, "/api/v1/jobs/" + id + "/events", "/api/v1/jobs",
           "/api/v1/nodes/node-0", "/api/v1/audit?limit=100", "/api/v1/alerts/events"}) {
    ASSERT_EQ(Call("GET", tokens_["admin"], {path, ""}, &body), 200) << path << ": " << body;
    EXPECT_EQ(body.find(secret), std::string::npos) << path << ": " << body;
  }
  ASSERT_EQ(Call("GET", tokens_["admin"], {"/metrics", ""}, &body), 200);
  EXPECT_NE(body.find("job_id=\"" + id + "\""), std::string::npos) << body;  // it is there
  // What the agent gets to start the rank does hold it: the rank needs it.
  EXPECT_EQ(starts->front().start.env.count("HF_TOKEN"), 1u);
}

TEST_F(AuthzTest, ChangesAndRefusalsAreAudited) {
  const std::string theirs = NewJob(kCallers[1], Scope::kOtherTenant);
  EXPECT_EQ(Call("POST", tokens_["vision-member"], {"/api/v1/jobs/" + theirs + "/cancel", ""}),
            403);
  const std::string mine = NewJob(kCallers[1], Scope::kSelf);
  EXPECT_EQ(Call("POST", tokens_["vision-member"], {"/api/v1/jobs/" + mine + "/cancel", ""}), 200);
  EXPECT_EQ(Call("POST", "", {"/api/v1/jobs/" + mine + "/hold", ""}), 401);
  std::string body;
  ASSERT_EQ(Call("GET", tokens_["admin"], {"/api/v1/audit?limit=100", ""}, &body), 200) << body;
  const json entries = json::parse(body)["entries"];
  ASSERT_EQ(entries.size(), 3u) << body;
  EXPECT_EQ(entries[0]["actor"], "user:vision-member");
  EXPECT_EQ(entries[0]["object"], "job/" + theirs);
  EXPECT_EQ(entries[0]["tenant"], kOther);
  EXPECT_EQ(entries[0]["status"], 403);
  EXPECT_THAT(entries[0]["message"].get<std::string>(), HasSubstr("may not"));
  EXPECT_THAT(entries[0]["source"].get<std::string>(), HasSubstr("127.0.0.1:"));
  EXPECT_EQ(entries[1]["status"], 200);
  EXPECT_EQ(entries[1]["action"], "POST /api/v1/jobs/" + mine + "/cancel");
  EXPECT_EQ(entries[2]["actor"], "anonymous");
  EXPECT_EQ(entries[2]["status"], 401);
  // A tenant admin sees its tenant's entries only.
  ASSERT_EQ(Call("GET", tokens_["vision-admin"], {"/api/v1/audit", ""}, &body), 200) << body;
  const json tenant_entries = json::parse(body)["entries"];
  for (const auto& e : tenant_entries) EXPECT_EQ(e["tenant"], kTenant);
  EXPECT_EQ(json::parse(body)["entries"].size(), 1u);
}

// A submission's entry is committed with its jobs (one commit, not two), and reads the
// same as any other: who, what, which job, from where, how it ended.
TEST_F(AuthzTest, ASubmissionIsAuditedOnceWithItsJob) {
  std::string body;
  ASSERT_EQ(Call("POST", tokens_["vision-member"],
                 {"/api/v1/jobs", R"({"name": "a", "command": ["x"]})"}, &body),
            201)
      << body;
  const std::string id = std::to_string(json::parse(body)["id"].get<int64_t>());
  EXPECT_EQ(Call("POST", tokens_["vision-member"],
                 {"/api/v1/jobs", R"({"name": "a", "command": ["x"], "replicas": 0})"}),
            400);
  ASSERT_EQ(Call("GET", tokens_["admin"], {"/api/v1/audit?limit=100", ""}, &body), 200) << body;
  const json entries = json::parse(body)["entries"];
  ASSERT_EQ(entries.size(), 2u) << body;
  EXPECT_EQ(entries[0]["actor"], "user:vision-member");
  EXPECT_EQ(entries[0]["action"], "POST /api/v1/jobs");
  EXPECT_EQ(entries[0]["object"], "job/" + id);
  EXPECT_EQ(entries[0]["tenant"], kTenant);
  EXPECT_EQ(entries[0]["status"], 201);
  EXPECT_EQ(entries[0]["message"], "");
  EXPECT_THAT(entries[0]["source"].get<std::string>(), HasSubstr("127.0.0.1:"));
  EXPECT_EQ(entries[1]["actor"], "user:vision-member");
  EXPECT_EQ(entries[1]["status"], 400);
  EXPECT_THAT(entries[1]["message"].get<std::string>(), HasSubstr("replicas"));
}

TEST_F(AuthzTest, BadUserAndTokenRequestsNameTheField) {
  std::string body;
  EXPECT_EQ(Call("POST", tokens_["admin"], {"/api/v1/users", R"({"name": "Bad Name"})"}, &body),
            400);
  EXPECT_THAT(body, HasSubstr("user name"));
  EXPECT_EQ(Call("POST", tokens_["admin"],
                 {"/api/v1/users", R"({"name": "x", "tenant": "t", "role": "god"})"}, &body),
            400);
  EXPECT_THAT(body, HasSubstr("valid: viewer, member, tenant-admin, cluster-admin"));
  EXPECT_EQ(
      Call("POST", tokens_["admin"], {"/api/v1/users", R"({"name": "x", "rol": "viewer"})"}, &body),
      400);
  EXPECT_THAT(Error(body), HasSubstr("unknown field \"rol\""));
  EXPECT_EQ(Call("POST", tokens_["admin"], {"/api/v1/tokens", R"({"expires_in": "-5s"})"}, &body),
            400);
  EXPECT_THAT(body, HasSubstr("token.expires_in"));
  EXPECT_EQ(Call("POST", tokens_["admin"], {"/api/v1/tokens", R"({"user": "ghost"})"}, &body), 404);
  EXPECT_EQ(Call("DELETE", tokens_["admin"], {"/api/v1/users/admin", ""}, &body), 409);
  EXPECT_THAT(body, HasSubstr("last cluster-admin"));
  EXPECT_EQ(
      Call("PATCH", tokens_["admin"], {"/api/v1/users/admin", R"({"role": "viewer"})"}, &body),
      409);
  EXPECT_THAT(body, HasSubstr("last cluster-admin"));
  // Tenant admins cannot make cluster admins, nor raise themselves to one.
  EXPECT_EQ(Call("POST", tokens_["vision-admin"],
                 {"/api/v1/users", R"({"name": "boss", "role": "cluster-admin"})"}, &body),
            403);
  EXPECT_EQ(Call("PATCH", tokens_["vision-admin"],
                 {"/api/v1/users/vision-admin", R"({"role": "cluster-admin"})"}, &body),
            403);
  EXPECT_EQ(Call("PATCH", tokens_["vision-admin"],
                 {"/api/v1/users/vision-member", R"({"priority_classes": ["p0"]})"}, &body),
            403);
  // Nothing of it was stored.
  auto users = store_.ListUsers();
  ASSERT_TRUE(users.ok());
  EXPECT_EQ(users->size(), 6u);
}

TEST(AccessRateLimitTest, ATokenOverItsRateIsToldToSlowDown) {
  store::MemoryStore store;
  FakeClock clock;
  auto a = AccessControl::Open(&store, &clock, {.rate_per_second = 10, .rate_burst = 20});
  ASSERT_TRUE(a.ok());
  Principal p;
  p.user = "x";
  p.token_id = "0123456789ab";
  for (int i = 0; i < 20; ++i) ASSERT_TRUE((*a)->Admit(p).ok()) << i;
  Status s = (*a)->Admit(p);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("rate limit"));
  clock.Advance(Duration(100));  // one more request's worth
  EXPECT_TRUE((*a)->Admit(p).ok());
  EXPECT_FALSE((*a)->Admit(p).ok());
  Principal other = p;
  other.token_id = "ba9876543210";
  EXPECT_TRUE((*a)->Admit(other).ok());
  // Requests without a valid token are limited per client address.
  for (int i = 0; i < 20; ++i) ASSERT_TRUE((*a)->AdmitUnauthenticated("10.0.0.1").ok()) << i;
  Status anon = (*a)->AdmitUnauthenticated("10.0.0.1");
  EXPECT_EQ(anon.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(anon.message(), HasSubstr("10.0.0.1"));
  EXPECT_TRUE((*a)->AdmitUnauthenticated("10.0.0.2").ok());
}

}  // namespace
}  // namespace trainyard::server
