// See cluster_connect.hpp.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <cstdio>
import mpcache;
#include "cluster_connect.hpp"

namespace mpcache::jobs {
namespace {

ConnectOptions cluster_connect_options(const ClusterConfig& config, const std::string& config_path, PartyId id,
                                       bool insecure, int timeout_ms) {
  ConnectOptions connect;
  connect.timeout = std::chrono::milliseconds(timeout_ms);
  connect.on_dropped = [](const std::string& line) { std::fprintf(stderr, "mpcache %s\n", line.c_str()); };
  connect.encrypted = !insecure;
  if (!connect.encrypted) return connect;
  for (std::size_t i = 0; i < config.parties.size(); ++i) {
    if (config.parties[i].public_key.empty())
      throw Error(ErrorCode::invalid_argument, config_path + ": party " + std::to_string(i) +
                                                   " has no public_key (encrypted channels need pinned keys; or --insecure)");
    connect.public_keys_pem.push_back(
        read_text_file(config.parties[i].public_key, "public key of party " + std::to_string(i)));
  }
  connect.secret_key_pem =
      read_text_file(config.parties[id].secret_key, "secret key of party " + std::to_string(id));
  return connect;
}

Connections connect_as(const ClusterConfig& config, const std::string& config_path, PartyId id,
                       const NetworkChoice& network, int timeout_ms) {
  network.check();  // a bad transport or link fails before any connection
  std::vector<PartyAddress> addresses;
  for (const auto& p : config.parties) addresses.push_back({p.host, p.port});
  return connect_cluster(id, addresses, cluster_connect_options(config, config_path, id, network.insecure, timeout_ms));
}
}  // namespace

ClusterConnection::ClusterConnection(Scheduler& scheduler, Endpoint& endpoint, const ClusterConfig& config,
                                     const std::string& config_path, PartyId id, const NetworkChoice& network,
                                     int timeout_ms)
    : transport_(scheduler, endpoint, connect_as(config, config_path, id, network, timeout_ms),
                 network.tcp_options(std::chrono::milliseconds(timeout_ms))) {
  const Link link = link_named(network.link);
  if (link.name != "none") {
    emulator_.emplace(transport_, transport_.timers(), link);
    endpoint.attach(&*emulator_);
  }
}

}  // namespace mpcache::jobs
