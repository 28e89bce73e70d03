// The agent protocol's messages, task states and fault kinds as the server names them.
// They are defined once, in protocol/ (docs/agent-protocol.md), and linked by the agent
// as well: the server parses with the code the agent encodes with, and the other way
// round. This header only brings those names into trainyard::server.
#pragma once

#include "protocol/base64.h"
#include "protocol/faults.h"
#include "protocol/messages.h"

namespace trainyard::server {

using protocol::Command;
using protocol::DecodeBase64;
using protocol::DiskTelemetry;
using protocol::FaultKind;
using protocol::FaultSpec;
using protocol::GpuTelemetry;
using protocol::HealthCheckResult;
using protocol::Heartbeat;
using protocol::IsFaultKind;
using protocol::kFaultKinds;
using protocol::LinkTelemetry;
using protocol::ParseFaultKind;
using protocol::ParseHeartbeat;
using protocol::ParseRegistration;
using protocol::RegisterReply;
using protocol::Registration;
using protocol::TaskId;
using protocol::TaskStart;
using protocol::TaskState;
using protocol::TaskStatus;

}  // namespace trainyard::server
