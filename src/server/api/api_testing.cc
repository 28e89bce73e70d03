#include "server/api/api_testing.h"

#include <unistd.h>

#include <filesystem>

#include "core/spec_codec.h"
#include "server/cluster_testing.h"

namespace trainyard::server {

std::string Answer::Header(const std::string& name) const {
  auto it = headers.find(name);
  return it == headers.end() ? "" : it->second;
}

Answer ApiFixture::Answered(const std::string& method, const std::string& path,
                            const httplib::Result& res) {
  Answer a;
  a.status = res ? res->status : 0;
  asked_.push_back({method, path.substr(0, path.find('?')), a.status});
  if (!res) return a;
  a.text = res->body;
  a.body = nlohmann::json::parse(res->body, nullptr, false);
  a.headers = res->headers;
  return a;
}

void ApiFixture::SetUp() {
  const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = std::string(test->test_suite_name()) + "_" + test->name();
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  dir_ = ::testing::TempDir() + "/api_routes_" + std::to_string(getpid()) + "_" + name;
  std::filesystem::remove_all(dir_);
  std::filesystem::create_directories(dir_);
  auto c = Cluster::Open(&store_, &clock_, {});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  cluster_ = std::move(*c);
  logs_ = std::make_unique<LogStore>(dir_ + "/logs");
  auto a = AccessControl::Open(&store_, &clock_, {.rate_per_second = 0});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  access_ = std::move(*a);
  auto boot = access_->Bootstrap("admin");
  ASSERT_TRUE(boot.ok() && boot->has_value());
  admin_token_ = (*boot)->text;
  ASSERT_TRUE(cluster_->EnsureTenant(kTenant, "test").ok());
  Principal admin;
  admin.user = "admin";
  admin.role = Role::kClusterAdmin;
  User alice;
  alice.name = "alice";
  alice.tenant = kTenant;
  alice.role = Role::kMember;
  ASSERT_TRUE(access_->CreateUser(admin, alice).ok());
  auto t = access_->CreateToken(admin, "alice", "", std::nullopt);
  ASSERT_TRUE(t.ok());
  member_token_ = t->text;

  auto series = track::SeriesStore::Open(dir_ + "/series.db");
  ASSERT_TRUE(series.ok()) << series.status().ToString();
  series_ = std::move(*series);
  profiles_ = std::make_unique<ProfileStore>(dir_ + "/profiles", &clock_);
  AlertingOptions ao;
  auto rules = monitor::LoadRules("", R"(rules:
  - name: Hot
    signal: gpu.temp_c
    condition: {threshold_above: 85}
    for: 0s
    severity: warning
    annotations: {summary: "GPU {{gpu}} on {{node}} is at {{value}} C"}
  - name: LossHigh
    signal: job.loss
    condition: {threshold_above: 10}
    for: 0s
    severity: critical
)",
                                  "test-rules.yaml");
  ASSERT_TRUE(rules.ok()) << rules.status().ToString();
  ao.rules = std::move(*rules);
  auto alerting = Alerting::Open(cluster_.get(), &clock_, std::move(ao));
  ASSERT_TRUE(alerting.ok()) << alerting.status().ToString();
  alerting_ = std::move(*alerting);

  Registration node;
  node.node.name = "n1";
  node.node.gpus.push_back({0, "GPU-0", "H100", 80LL << 30, ""});
  node.node.gpus.push_back({1, "GPU-1", "H100", 80LL << 30, ""});
  node.node.milli_cpus = 16000;
  node.node.memory_bytes = 64LL << 30;
  node.address = "10.0.0.1";
  node.simulated = true;
  ASSERT_TRUE(cluster_->Register(node).ok());

  auto datasets = DatasetRegistry::Open(&store_, &clock_);
  ASSERT_TRUE(datasets.ok()) << datasets.status().message();
  datasets_ = std::move(*datasets);
  routes_ = InstallApi(
      http_, *cluster_, *logs_, *access_,
      ApiOptions{kJoinToken, series_.get(), profiles_.get(), alerting_.get(), "", datasets_.get()});
  port_ = serving_.Start(http_);
  ASSERT_GT(port_, 0);
  client_ = std::make_unique<httplib::Client>("127.0.0.1", port_);
}

void ApiFixture::TearDown() {
  cluster_->Shutdown();
  serving_.Stop();
  std::filesystem::remove_all(dir_);
}

Answer ApiFixture::Call(const std::string& method, const std::string& path, const std::string& body,
                        const httplib::Headers& headers) {
  return CallAs(admin_token_, method, path, body, headers);
}

Answer ApiFixture::CallAs(const std::string& token, const std::string& method,
                          const std::string& path, const std::string& body,
                          const httplib::Headers& headers) {
  httplib::Headers h = headers;
  if (!token.empty()) h.emplace("Authorization", "Bearer " + token);
  const char* type = "application/json";
  if (auto it = h.find("Content-Type"); it != h.end()) {
    type = it->second.c_str();
  }
  const std::string content_type = type;
  h.erase("Content-Type");
  httplib::Result res = method == "GET"     ? client_->Get(path.c_str(), h)
                        : method == "POST"  ? client_->Post(path.c_str(), h, body, content_type)
                        : method == "PUT"   ? client_->Put(path.c_str(), h, body, content_type)
                        : method == "PATCH" ? client_->Patch(path.c_str(), h, body, content_type)
                                            : client_->Delete(path.c_str(), h);
  return Answered(method, path, res);
}

Answer ApiFixture::Agent(const std::string& path, const std::string& body) {
  httplib::Headers h = {{"Authorization", std::string("Bearer ") + kJoinToken}};
  auto res = client_->Post(path.c_str(), h, body, "application/json");
  return Answered("POST", path, res);
}

JobId ApiFixture::Submit(const std::string& spec) {
  Answer a = Call("POST", "/api/v1/jobs", spec);
  EXPECT_EQ(a.status, 201) << a.text;
  return a.status == 201 ? a.body["id"].get<JobId>() : 0;
}

JobId ApiFixture::Running(const std::string& spec) {
  const JobId id = Submit(spec);
  auto started = StartRanksOn(*cluster_, "n1");
  EXPECT_TRUE(started.ok()) << started.status().ToString();
  EXPECT_EQ(cluster_->GetJob(id)->job.state, JobState::kRunning);
  return id;
}

}  // namespace trainyard::server
