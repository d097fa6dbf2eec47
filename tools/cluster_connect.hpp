// A party's connection options from a cluster config: deadline, security
// mode, pinned public keys of every party and this party's secret key, and
// dropped strangers logged to stderr. Shared by `mpcache party` and
// `mpcache generate --config`. Include after `import mpcache;`.
#pragma once
#include <string>
#include "cluster_config.hpp"

namespace mpcache::tools {

// Throws naming the config file and the party whose key is missing.
ConnectOptions cluster_connect_options(const ClusterConfig& config, const std::string& config_path, PartyId id,
                                       bool insecure, int timeout_ms);

}  // namespace mpcache::tools
