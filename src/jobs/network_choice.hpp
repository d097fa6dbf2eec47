// How a party process reaches its peers over TCP: the backend, the spin
// budget (the low-latency mode), encryption and the emulated link. One
// struct, one set of flags and one way to pass them on to a child party,
// for every command that runs parties over TCP (generate, party, local).
// Include after `import mpcache;`.
#pragma once
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace mpcache::jobs {

struct NetworkChoice {
  std::string transport = "auto";  // auto (io_uring, else poll) | uring | poll | asio
  std::string link = "none";       // emulated link: none | lan | wan | RTT_MS:MBYTES_PER_S
  int spin_us = static_cast<int>(default_spin.count());  // TcpOptions::spin (more: low-latency mode)
  bool insecure = false;           // plain TCP: no authentication, no encryption

  // Throws naming a bad transport or link before anything starts.
  void check() const;
  // The transport's options, with this peer silence deadline.
  TcpOptions tcp_options(std::chrono::milliseconds silence) const;
  // The same choice as flags of a child party (party_args) or `generate`.
  std::vector<std::string> args() const;
};

// --transport, --link, --spin-us and --insecure on `command`.
void add_network_options(CLI::App& command, NetworkChoice& choice);

}  // namespace mpcache::jobs
