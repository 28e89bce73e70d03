#include "monitor/webhook.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>

namespace trainyard::monitor {
namespace {

using Json = nlohmann::ordered_json;

Json LabelsJson(const Labels& labels) {
  Json j = Json::object();
  for (const auto& [k, v] : labels) j[k] = v;
  return j;
}

// The pairs every map in `maps` holds with the same value.
Labels Common(const std::vector<const Labels*>& maps) {
  if (maps.empty()) return {};
  Labels out = *maps[0];
  for (size_t i = 1; i < maps.size() && !out.empty(); ++i) {
    std::erase_if(out, [&](const auto& kv) {
      auto it = maps[i]->find(kv.first);
      return it == maps[i]->end() || it->second != kv.second;
    });
  }
  return out;
}

Labels GroupLabels(const Alert& alert, const std::vector<std::string>& group_by) {
  Labels out;
  for (const std::string& name : group_by) {
    if (auto it = alert.labels.find(name); it != alert.labels.end()) out[name] = it->second;
  }
  return out;
}

// Go's strconv.Quote, for the characters label values hold in practice.
std::string GoQuote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

// Prometheus' LabelSet.String(): {a="1", b="2"}.
std::string LabelSetString(const Labels& labels) {
  std::string out = "{";
  for (const auto& [k, v] : labels) {
    if (out.size() > 1) out += ", ";
    out += k + "=" + GoQuote(v);
  }
  return out + "}";
}

std::string PercentEncode(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    const bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                            (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' || c == '~';
    if (unreserved) {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

}  // namespace

std::string FormatRfc3339(Timestamp t) {
  const int64_t ms = t.time_since_epoch().count();
  std::time_t secs = static_cast<std::time_t>(ms / 1000);
  int64_t frac = ms % 1000;
  if (frac < 0) {
    frac += 1000;
    secs -= 1;
  }
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
  std::string out = buf;
  if (frac != 0) {
    std::snprintf(buf, sizeof buf, ".%03" PRId64, frac);
    std::string f = buf;
    while (f.back() == '0') f.pop_back();
    out += f;
  }
  return out + "Z";
}

std::vector<std::vector<Alert>> GroupAlerts(const std::vector<Alert>& alerts,
                                            const std::vector<std::string>& group_by) {
  std::map<Labels, std::vector<Alert>> groups;
  for (const Alert& a : alerts) {
    if (a.state == AlertState::kPending) continue;
    groups[GroupLabels(a, group_by)].push_back(a);
  }
  std::vector<std::vector<Alert>> out;
  for (auto& [key, group] : groups) out.push_back(std::move(group));
  return out;
}

std::string RenderWebhook(const std::vector<Alert>& group, const WebhookOptions& options) {
  std::vector<const Alert*> alerts;
  for (const Alert& a : group) {
    TY_CHECK_MSG(a.state != AlertState::kPending, "pending alerts are not sent");
    alerts.push_back(&a);
  }
  std::stable_sort(alerts.begin(), alerts.end(),
                   [](const Alert* a, const Alert* b) { return a->labels < b->labels; });
  // As Alertmanager: sort, cut to max_alerts, then derive the group's fields from
  // what is left.
  size_t truncated = 0;
  if (options.max_alerts > 0 && alerts.size() > options.max_alerts) {
    truncated = alerts.size() - options.max_alerts;
    alerts.resize(options.max_alerts);
  }
  const bool firing = std::any_of(alerts.begin(), alerts.end(),
                                  [](const Alert* a) { return a->state == AlertState::kFiring; });
  std::vector<const Labels*> labels, annotations;
  for (const Alert* a : alerts) {
    labels.push_back(&a->labels);
    annotations.push_back(&a->annotations);
  }
  const Labels group_labels =
      alerts.empty() ? Labels{} : GroupLabels(*alerts.front(), options.group_by);

  Json body = Json::object();
  body["version"] = "4";
  body["groupKey"] = options.route_key + ":" + LabelSetString(group_labels);
  body["truncatedAlerts"] = truncated;
  body["status"] = firing ? "firing" : "resolved";
  body["receiver"] = options.receiver;
  body["groupLabels"] = LabelsJson(group_labels);
  body["commonLabels"] = LabelsJson(Common(labels));
  body["commonAnnotations"] = LabelsJson(Common(annotations));
  body["externalURL"] = options.external_url;
  Json list = Json::array();
  for (const Alert* a : alerts) {
    const bool a_firing = a->state == AlertState::kFiring;
    Json j = Json::object();
    j["status"] = a_firing ? "firing" : "resolved";
    j["labels"] = LabelsJson(a->labels);
    j["annotations"] = LabelsJson(a->annotations);
    j["startsAt"] = FormatRfc3339(a->starts_at);
    j["endsAt"] = a_firing ? std::string(kZeroTime) : FormatRfc3339(a->ends_at);
    j["generatorURL"] = options.generator_url_prefix.empty()
                            ? std::string()
                            : options.generator_url_prefix + PercentEncode(a->rule);
    j["fingerprint"] = a->fingerprint;
    list.push_back(std::move(j));
  }
  body["alerts"] = std::move(list);
  return body.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace trainyard::monitor
