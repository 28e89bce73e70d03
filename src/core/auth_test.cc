#include "core/auth.h"

#include <gtest/gtest.h>

namespace trainyard {
namespace {

using std::chrono::seconds;

Timestamp T(int64_t s) { return Timestamp(seconds(s)); }

Principal P(std::string user, std::string tenant, Role role) {
  Principal p;
  p.user = std::move(user);
  p.tenant = std::move(tenant);
  p.role = role;
  return p;
}

TEST(AuthTest, RolesRoundTripAndUnknownRoleNamesTheValidOnes) {
  for (Role r : {Role::kViewer, Role::kMember, Role::kTenantAdmin, Role::kClusterAdmin}) {
    auto parsed = ParseRole(RoleName(r));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, r);
  }
  auto bad = ParseRole("root");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("\"root\""), std::string::npos);
  EXPECT_NE(bad.status().message().find("tenant-admin"), std::string::npos);
}

TEST(AuthTest, UserValidation) {
  User u{"alice", "vision", Role::kMember, {}, T(1), "bootstrap"};
  EXPECT_TRUE(ValidateUser(u).ok());
  User admin{"root", "", Role::kClusterAdmin, {}, T(1), "bootstrap"};
  EXPECT_TRUE(ValidateUser(admin).ok());

  User bad = u;
  bad.name = "Alice";
  EXPECT_FALSE(ValidateUser(bad).ok());
  bad.name = "";
  EXPECT_FALSE(ValidateUser(bad).ok());
  bad.name = std::string(64, 'a');
  EXPECT_FALSE(ValidateUser(bad).ok());
  bad = u;
  bad.tenant = "";
  EXPECT_NE(ValidateUser(bad).message().find("tenant: required"), std::string::npos);
  bad = admin;
  bad.tenant = "vision";
  EXPECT_NE(ValidateUser(bad).message().find("no tenant"), std::string::npos);
  bad = u;
  bad.priority_classes = {"p0", "Not A Name"};
  EXPECT_FALSE(ValidateUser(bad).ok());

  // A user's own identity: both ids or none, in range, never root's.
  User mapped = u;
  mapped.run_as_uid = 3001;
  mapped.run_as_gid = 3001;
  EXPECT_TRUE(ValidateUser(mapped).ok());
  bad = mapped;
  bad.run_as_gid = -1;
  EXPECT_NE(ValidateUser(bad).message().find("user alice: run_as: must be UID:GID"),
            std::string::npos);
  bad = mapped;
  bad.run_as_uid = 0;
  EXPECT_NE(ValidateUser(bad).message().find("0:3001 is root's"), std::string::npos);
}

TEST(AuthTest, TokenTextParsesAndNeverEchoesWhatWasGiven) {
  const std::string id = "0123456789ab";
  const std::string secret(64, 'f');
  const std::string text = FormatTokenText({id, secret});
  EXPECT_EQ(text, "tyt_" + id + "_" + secret);
  auto parts = ParseTokenText(text);
  ASSERT_TRUE(parts.ok());
  EXPECT_EQ(parts->id, id);
  EXPECT_EQ(parts->secret, secret);

  for (const std::string& bad : std::vector<std::string>{
           "", "tyt_", "tyt_" + id, "xyz_" + id + "_" + secret, "tyt_" + id + "_" + secret + "0",
           "tyt_" + id + "-" + secret, "tyt_0123456789AB_" + secret,
           "tyt_" + id + "_" + std::string(64, 'g'),
           "tyt_" + id + "_super-secret-value-" + std::string(45, 'a')}) {
    auto r = ParseTokenText(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kUnauthenticated);
    if (bad.size() > 4) {
      EXPECT_EQ(r.status().message().find(bad.substr(4)), std::string::npos) << "echoed: " << bad;
    }
  }
}

TEST(AuthTest, Sha256OfKnownVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(AuthTest, ConstantTimeEqual) {
  EXPECT_TRUE(ConstantTimeEqual("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEqual("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEqual("abc", "abcd"));
  EXPECT_TRUE(ConstantTimeEqual("", ""));
}

TEST(AuthTest, TokenValidationAndUsability) {
  ApiToken t{"0123456789ab", "alice", Sha256Hex("s"), "laptop", T(100), T(200), std::nullopt};
  EXPECT_TRUE(ValidateApiToken(t).ok());
  EXPECT_TRUE(CheckTokenUsable(t, T(150)).ok());
  Status expired = CheckTokenUsable(t, T(200));
  EXPECT_EQ(expired.code(), StatusCode::kUnauthenticated);
  EXPECT_NE(expired.message().find("expired"), std::string::npos);
  t.revoked = T(120);
  Status revoked = CheckTokenUsable(t, T(150));
  EXPECT_NE(revoked.message().find("revoked"), std::string::npos);

  ApiToken bad = t;
  bad.id = "xyz";
  EXPECT_FALSE(ValidateApiToken(bad).ok());
  bad = t;
  bad.secret_hash = "plain-secret";
  EXPECT_FALSE(ValidateApiToken(bad).ok());
  bad = t;
  bad.expires = T(50);
  EXPECT_NE(ValidateApiToken(bad).message().find("after its creation"), std::string::npos);
  bad = t;
  bad.description = std::string(201, 'x');
  EXPECT_FALSE(ValidateApiToken(bad).ok());
  bad.description = "a\nb";
  EXPECT_FALSE(ValidateApiToken(bad).ok());
}

TEST(AuthTest, MembersManageOnlyTheirOwnJobsInTheirTenant) {
  const Principal alice = P("alice", "vision", Role::kMember);
  EXPECT_TRUE(Authorize(alice, Action::kManageJob, {"vision", "alice"}).ok());
  Status other_user = Authorize(alice, Action::kManageJob, {"vision", "bob"});
  EXPECT_EQ(other_user.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(other_user.message().find("tenant-admin"), std::string::npos);
  EXPECT_FALSE(Authorize(alice, Action::kManageJob, {"nlp", "alice"}).ok());
  EXPECT_TRUE(Authorize(alice, Action::kReadJobs, {"vision", "bob"}).ok());
  EXPECT_FALSE(Authorize(alice, Action::kReadJobs, {"nlp", "carol"}).ok());
  EXPECT_TRUE(Authorize(alice, Action::kSubmitJobs, {"vision"}).ok());
  EXPECT_FALSE(Authorize(alice, Action::kSubmitJobs, {"nlp"}).ok());
  EXPECT_FALSE(Authorize(alice, Action::kManageNodes, {}).ok());
  EXPECT_FALSE(Authorize(alice, Action::kReadAudit, {"vision"}).ok());
}

TEST(AuthTest, TenantAdminsManageTheirTenantButCannotMintClusterAdmins) {
  const Principal ta = P("tina", "vision", Role::kTenantAdmin);
  EXPECT_TRUE(Authorize(ta, Action::kManageJob, {"vision", "bob"}).ok());
  EXPECT_FALSE(Authorize(ta, Action::kManageJob, {"nlp", "bob"}).ok());
  EXPECT_TRUE(Authorize(ta, Action::kManageUsers, {"vision", "", Role::kMember}).ok());
  EXPECT_TRUE(Authorize(ta, Action::kManageUsers, {"vision", "", Role::kTenantAdmin}).ok());
  EXPECT_FALSE(Authorize(ta, Action::kManageUsers, {"vision", "", Role::kClusterAdmin}).ok());
  EXPECT_FALSE(Authorize(ta, Action::kManageUsers, {"nlp", "", Role::kMember}).ok());
  EXPECT_TRUE(Authorize(ta, Action::kManageTokens, {"vision", "bob", Role::kMember}).ok());
  EXPECT_FALSE(Authorize(ta, Action::kManageTokens, {"nlp", "carol", Role::kMember}).ok());
  EXPECT_TRUE(Authorize(ta, Action::kReadAudit, {"vision"}).ok());
  EXPECT_FALSE(Authorize(ta, Action::kReadAudit, {"nlp"}).ok());
  EXPECT_FALSE(Authorize(ta, Action::kManageNodes, {}).ok());
}

TEST(AuthTest, ViewersOnlyRead) {
  const Principal v = P("val", "vision", Role::kViewer);
  EXPECT_TRUE(Authorize(v, Action::kReadJobs, {"vision"}).ok());
  EXPECT_TRUE(Authorize(v, Action::kReadCluster, {}).ok());
  EXPECT_FALSE(Authorize(v, Action::kSubmitJobs, {"vision"}).ok());
  EXPECT_FALSE(Authorize(v, Action::kManageJob, {"vision", "val"}).ok());
  EXPECT_TRUE(Authorize(v, Action::kManageOwnTokens, {"vision", "val"}).ok());
  EXPECT_FALSE(Authorize(v, Action::kManageOwnTokens, {"vision", "bob"}).ok());
}

TEST(AuthTest, TenantAdminsManageTheirQueuesButNeverATenantsQuota) {
  const Principal ta = P("tina", "vision", Role::kTenantAdmin);
  EXPECT_TRUE(Authorize(ta, Action::kManageQueues, {"vision"}).ok());
  Status other = Authorize(ta, Action::kManageQueues, {"nlp"});
  EXPECT_EQ(other.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(other.message().find("manage-queues in tenant \"nlp\""), std::string::npos)
      << other.message();
  // Its own tenant's quota is the cluster admin's to set.
  Status quota = Authorize(ta, Action::kManageTenants, {"vision"});
  EXPECT_EQ(quota.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(quota.message().find("needs role cluster-admin"), std::string::npos) << quota.message();
  for (Role r : {Role::kViewer, Role::kMember}) {
    const Principal u = P("u", "vision", r);
    EXPECT_FALSE(Authorize(u, Action::kManageQueues, {"vision"}).ok()) << RoleName(r);
    EXPECT_FALSE(Authorize(u, Action::kManageTenants, {"vision"}).ok()) << RoleName(r);
  }
  EXPECT_EQ(ActionName(Action::kManageQueues), "manage-queues");
  EXPECT_EQ(ActionName(Action::kManageTenants), "manage-tenants");
}

TEST(AuthTest, ClusterAdminsMayDoEverything) {
  const Principal root = P("root", "", Role::kClusterAdmin);
  for (Action a :
       {Action::kReadCluster, Action::kReadJobs, Action::kSubmitJobs, Action::kManageJob,
        Action::kManageNodes, Action::kReadUsers, Action::kManageUsers, Action::kManageOwnTokens,
        Action::kManageTokens, Action::kReadAudit, Action::kManageTenants, Action::kManageQueues}) {
    EXPECT_TRUE(Authorize(root, a, {"nlp", "carol", Role::kClusterAdmin}).ok()) << ActionName(a);
  }
  EXPECT_TRUE(CanSeeTenant(root, "anything"));
  EXPECT_TRUE(CanSeeTenant(P("a", "x", Role::kViewer), "x"));
  EXPECT_FALSE(CanSeeTenant(P("a", "x", Role::kViewer), "y"));
  EXPECT_FALSE(CanSeeTenant(P("a", "x", Role::kViewer), ""));
}

TEST(AuthTest, PriorityClassesAboveTheDefaultNeedAGrant) {
  Principal alice = P("alice", "vision", Role::kMember);
  EXPECT_TRUE(AuthorizePriorityClass(alice, "normal", 100, 100).ok());
  EXPECT_TRUE(AuthorizePriorityClass(alice, "best-effort", 0, 100).ok());
  Status p0 = AuthorizePriorityClass(alice, "p0", 1000, 100);
  EXPECT_EQ(p0.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(p0.message().find("\"p0\""), std::string::npos);
  alice.priority_classes = {"p0"};
  EXPECT_TRUE(AuthorizePriorityClass(alice, "p0", 1000, 100).ok());
  EXPECT_FALSE(AuthorizePriorityClass(alice, "production", 500, 100).ok());
  EXPECT_TRUE(
      AuthorizePriorityClass(P("root", "", Role::kClusterAdmin), "production", 500, 100).ok());
}

}  // namespace
}  // namespace trainyard
