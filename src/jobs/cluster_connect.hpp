// A party's connection to its cluster: the options from a cluster config
// (deadline, security mode, pinned public keys of every party and this
// party's secret key, dropped strangers logged to stderr), then the TCP
// transport over the mesh with the emulated link if one is chosen. Shared by
// run_party (`mpcache party`, mpcache-party) and `mpcache generate --config`.
// Include after `import mpcache;`.
#pragma once
#include <optional>
#include <string>
#include "cluster_config.hpp"
#include "network_choice.hpp"

namespace mpcache::jobs {

// Party `id` of the cluster in `config` (read from `config_path`), connected
// and attached to `endpoint` as `network` chooses; `timeout_ms` is the
// set-up and peer silence deadline. Throws naming a bad transport or link,
// or the config file and the party whose key is missing.
class ClusterConnection {
 public:
  ClusterConnection(Scheduler& scheduler, Endpoint& endpoint, const ClusterConfig& config,
                    const std::string& config_path, PartyId id, const NetworkChoice& network, int timeout_ms);
  TcpTransport& transport() noexcept { return transport_; }

 private:
  TcpTransport transport_;
  std::optional<LinkEmulator> emulator_;
};

}  // namespace mpcache::jobs
