// JSON forms of the core value types: jobs (with their attempts and latest
// checkpoint), nodes (with GPUs and topology), tenants, queues, priority classes,
// users, API tokens and audit entries.
//
// These are the documents the store keeps and the API returns. An ApiToken's
// document holds its secret_hash: it is for the store; an API rendering a token
// leaves that field out. Field names are the
// struct's member names; timestamps are integer milliseconds since the Unix epoch and
// durations integer milliseconds, both under keys ending in "_ms"; enums are written
// by name ("Running", "Ready", "preempted"). An optional value that is absent is
// written as null.
//
// Decoders are strict about what they read and quiet about what they do not: every
// field the writer produces must be present with the right JSON type (a null or
// missing key is accepted only for optional values), unknown keys are ignored. They
// check structure, not policy: ValidateNode / ValidateQueue / ... remain the caller's
// job. The exception is a job's spec, which is read back through ParseSpec (the one
// validating spec reader), so a stored spec comes back normalised and validated.
// Errors name the field by its path and show the offending value:
//   job.attempts[0].start_time_ms: expected an integer, got string "soon"
// Decoders never throw.
//
// Thread-safety: free functions on values; safe to call from any thread.
#pragma once

#include <nlohmann/json.hpp>

#include "core/auth.h"
#include "core/dataset.h"
#include "core/job.h"
#include "core/node.h"
#include "core/status.h"
#include "core/tenancy.h"

namespace trainyard {

nlohmann::ordered_json ToJson(const Job& job);
Result<Job> JobFromJson(const nlohmann::json& j);

nlohmann::ordered_json ToJson(const Node& node);
Result<Node> NodeFromJson(const nlohmann::json& j);

nlohmann::ordered_json ToJson(const Tenant& tenant);
Result<Tenant> TenantFromJson(const nlohmann::json& j);

nlohmann::ordered_json ToJson(const Queue& queue);
Result<Queue> QueueFromJson(const nlohmann::json& j);

nlohmann::ordered_json ToJson(const PriorityClass& priority_class);
Result<PriorityClass> PriorityClassFromJson(const nlohmann::json& j);

nlohmann::ordered_json ToJson(const User& user);
Result<User> UserFromJson(const nlohmann::json& j);

nlohmann::ordered_json ToJson(const Dataset& dataset);
Result<Dataset> DatasetFromJson(const nlohmann::json& j);

nlohmann::ordered_json ToJson(const ApiToken& token);
Result<ApiToken> ApiTokenFromJson(const nlohmann::json& j);

nlohmann::ordered_json ToJson(const AuditEntry& entry);
Result<AuditEntry> AuditEntryFromJson(const nlohmann::json& j);

}  // namespace trainyard
