// ApiServices: what the API's handlers call (server/api/<resource>.cc). Each object is
// thread-safe and outlives the routes; the optional ones may be null, and the routes
// that need one then answer 503 saying so.
#pragma once

#include <httplib.h>

#include <memory>

#include "server/access.h"
#include "server/alerting.h"
#include "server/api/routes.h"
#include "server/cluster.h"
#include "server/datasets.h"
#include "server/ingest.h"
#include "server/logs.h"
#include "server/profiles.h"

namespace trainyard::track {
class SeriesStore;
}

namespace trainyard::server {

struct ApiServices {
  Cluster& cluster;
  LogStore& logs;
  AccessControl& access;
  std::shared_ptr<Ingest> ingest;
  track::SeriesStore* series = nullptr;  // experiment tracking (the /runs routes)
  ProfileStore* profiles = nullptr;      // on-demand profiles
  Alerting* alerting = nullptr;          // alert rules and diagnosis
  DatasetRegistry* datasets = nullptr;   // datasets (the /datasets routes, jobs' data)
};

// A route's handler as a function of the services: Bind(services, GetJob).
using UserServiceHandler = Result<Reply> (*)(const ApiServices&, const httplib::Request&, Call&);
using ServiceHandler = Result<Reply> (*)(const ApiServices&, const httplib::Request&);
inline Routes::UserHandler Bind(const ApiServices& services, UserServiceHandler handler) {
  return [services, handler](const httplib::Request& req, Call& call) {
    return handler(services, req, call);
  };
}
inline Routes::Handler Bind(const ApiServices& services, ServiceHandler handler) {
  return [services, handler](const httplib::Request& req) { return handler(services, req); };
}

}  // namespace trainyard::server
