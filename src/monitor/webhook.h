// The JSON body Alertmanager POSTs to webhook receivers (webhook_config, payload
// version "4"), rendered from engine alerts, so that anything that already takes
// Alertmanager webhooks (chat bridges, paging services, EDA) takes Trainyard's alerts
// unchanged:
//
//   {"receiver": ..., "status": "firing"|"resolved", "alerts": [{"status", "labels",
//    "annotations", "startsAt", "endsAt", "generatorURL", "fingerprint"}, ...],
//    "groupLabels": {...}, "commonLabels": {...}, "commonAnnotations": {...},
//    "externalURL": ..., "version": "4", "groupKey": ..., "truncatedAlerts": 0}
//
// As in Alertmanager: the group is "firing" when any of its alerts fires; a firing
// alert's endsAt is "0001-01-01T00:00:00Z"; times are RFC 3339 in UTC with as many
// fractional digits as needed; commonLabels / commonAnnotations hold the pairs every
// alert of the group shares; groupKey is `<route key>:<group labels>`, e.g.
// `{}:{alertname="GpuTooHot"}`; alerts are ordered by their label sets; with
// max_alerts the rest are cut and counted in truncatedAlerts. Pending alerts are not
// sent (Alertmanager never sees them).
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/units.h"
#include "monitor/engine.h"

namespace trainyard::monitor {

struct WebhookOptions {
  std::string receiver = "trainyard";
  std::string external_url;                           // backlink to the Trainyard server
  std::vector<std::string> group_by = {"alertname"};  // labels that form a group
  std::string route_key = "{}";                       // Alertmanager's key of the root route
  // generatorURL of each alert: this prefix followed by the rule's name,
  // percent-encoded; empty gives "".
  std::string generator_url_prefix;
  size_t max_alerts = 0;  // 0: every alert of the group
};

// Splits firing and resolved alerts into groups with equal group_by labels, in the
// order of those labels. Pending alerts are left out.
std::vector<std::vector<Alert>> GroupAlerts(const std::vector<Alert>& alerts,
                                            const std::vector<std::string>& group_by);

// The webhook body for one group (alerts that share the group_by labels); compact JSON.
// REQUIRES: no alert in `group` is pending.
std::string RenderWebhook(const std::vector<Alert>& group, const WebhookOptions& options);

// RFC 3339 in UTC as Go's time.RFC3339Nano writes it: "2026-11-29T09:00:00Z",
// "2026-11-29T09:00:00.25Z".
std::string FormatRfc3339(Timestamp t);
// What Alertmanager sends as endsAt while an alert fires (Go's zero time).
inline constexpr std::string_view kZeroTime = "0001-01-01T00:00:00Z";

}  // namespace trainyard::monitor
