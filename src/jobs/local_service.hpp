// A private inference service on this host: `mpcache serve --local` (fresh
// keys, a loopback cluster.json with client ports, three servers, a client
// key; the commands to use it printed; Ctrl-C stops all three), and the
// parts the bench's preset serve shares with it. Include after
// `import mpcache;`.
#pragma once
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>
#include "serve_job.hpp"

namespace mpcache::jobs {

// Makes a LocalCluster's cluster.json a service's: each server gets a client
// port besides its mesh port (all free now and distinct), and the key paths
// stay relative to the config's folder.
void add_client_ports(const std::string& config_path);

// Polls until every server's log says "ready: model shared"; throws naming
// a server that ended (with its log's tail), or the deadline. `stopped`, if
// given, ends the wait early (returns false); true once all are ready.
bool wait_servers_ready(std::vector<std::unique_ptr<BackgroundProcess>>& servers, const std::vector<std::string>& logs,
                        std::chrono::milliseconds limit, const std::function<bool()>& stopped = {});

// The flags of `mpcache serve` that `job` holds, for a child server (all but
// --config, --id, --clients and the benches' --steps/--report).
std::vector<std::string> serve_args(const ServeJob& job);

// `mpcache serve --local`: the service in a fresh temporary folder (keys,
// cluster.json, clients/local.key, the servers' logs), its three servers
// `self serve ...` with `job`'s flags. Prints the client and gateway
// commands once the model is shared, then serves until SIGINT, SIGTERM or
// SIGHUP (passed on to the servers, which drain) or a server's end (the
// others are stopped). Removes the folder. 0 after a stop, 1 on a failure.
int run_local_service(const ServeJob& job, const std::string& self);

}  // namespace mpcache::jobs
