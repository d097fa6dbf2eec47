// The JSON cluster config of a multi-process job (plain C++, nlohmann-json):
//
// {
//   "parties": [
//     {"host": "127.0.0.1", "port": 7100, "public_key": "p0.pub", "secret_key": "p0.key"},
//     {"host": "127.0.0.1", "port": 7101, "public_key": "p1.pub", "secret_key": "p1.key"},
//     {"host": "127.0.0.1", "port": 7102, "public_key": "p2.pub", "secret_key": "p2.key"}
//   ],
//   "timeout_ms": 10000
// }
//
// A service's servers (`mpcache serve`) also give "client_port": the port
// on `host` where clients connect; a client reads the same file (it needs
// only host, client_port and public_key of each server).
//
// Party i is parties[i]. Key paths are relative to the config file; every
// party needs all public keys (pinned) and only its own secret key. Without
// keys the job can only run with --insecure.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace mpcache::jobs {

struct ClusterParty {
  std::string host;
  std::uint16_t port = 0;
  std::string public_key;  // path, resolved against the config's folder ("" if none)
  std::string secret_key;
  std::uint16_t client_port = 0;  // 0: none (not a service's server)
};

// Set-up and silence deadline limits: 1 ms .. 1 hour.
inline constexpr long long max_timeout_ms = 3'600'000;

struct ClusterConfig {
  std::vector<ClusterParty> parties;
  int timeout_ms = 10000;
};

// Throws std::runtime_error naming the file and the offending key: ports must
// be 1..65535, timeout_ms 1..max_timeout_ms, no two parties on one address.
ClusterConfig read_cluster_config(const std::string& path);
void write_cluster_config(const std::string& path, const ClusterConfig& config);
std::string read_text_file(const std::string& path, const std::string& what);
// `secret`: as write_key_file(path, text, 0600, false).
void write_text_file(const std::string& path, const std::string& text, bool secret);
// Creates a new file with `mode` (O_EXCL | O_NOFOLLOW: an existing file or a
// link at the path is an error unless `overwrite`, which removes it first).
void write_key_file(const std::string& path, const std::string& text, unsigned mode, bool overwrite);

}  // namespace mpcache::jobs
