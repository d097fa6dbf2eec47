// Test support: one thread per party, each with its own Scheduler, Endpoint
// and TcpTransport (as in separate processes), over sockets made by the
// caller. Include after the `import` lines.
#pragma once
#include <thread>

namespace mpcache::testing {

template <class R>
struct TcpPartyResult {
  std::optional<R> value;
  std::string error;      // what() of the exception that ended the party ("" if none)
  std::string transport;  // TcpTransport::name()
  CostCounters costs;
};

// One thread per party: connections(id) gives the party's Connections (in
// its thread, so connection set-up can block on the peers), then
// fn(PartyId, Endpoint&, TcpTransport&) -> Task<R> runs to completion.
template <class R, class Connect, class Fn>
std::vector<TcpPartyResult<R>> run_party_threads(std::size_t n, Connect connections,
                                                 TcpOptions options, Fn fn) {
  std::vector<TcpPartyResult<R>> results(n);
  std::vector<std::thread> threads;
  for (PartyId id = 0; id < n; ++id)
    threads.emplace_back([&, id] {
      auto& out = results[id];
      try {
        Scheduler scheduler;
        Endpoint endpoint(scheduler, id, n);
        TcpTransport transport(scheduler, endpoint, connections(id), options);
        out.transport = transport.name();
        out.value = sync_wait(scheduler, fn(id, endpoint, transport));
        out.costs = endpoint.costs();
      } catch (const std::exception& e) {
        out.error = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return results;
}

// fn(PartyId, Endpoint&) -> Task<R> over sockets made by the caller.
template <class R, class Fn>
std::vector<TcpPartyResult<R>> run_tcp_parties(std::vector<Connections> connections,
                                               TcpOptions options, Fn fn) {
  return run_party_threads<R>(
      connections.size(), [&](PartyId id) { return std::move(connections[id]); }, options,
      [&](PartyId id, Endpoint& endpoint, TcpTransport&) { return fn(id, endpoint); });
}

// Every party first sets up its connections over loopback TCP with
// connect_cluster(id, parties, connect[id]); fn(PartyId, Endpoint&,
// TcpTransport&) -> Task<R>.
template <class R, class Fn>
std::vector<TcpPartyResult<R>> run_cluster_parties(const std::vector<PartyAddress>& parties,
                                                   const std::vector<ConnectOptions>& connect,
                                                   TcpOptions options, Fn fn) {
  return run_party_threads<R>(
      parties.size(), [&](PartyId id) { return connect_cluster(id, parties, connect[id]); }, options,
      fn);
}

inline std::vector<PartyAddress> loopback_parties(std::size_t n) {
  std::vector<PartyAddress> out;
  for (auto port : free_tcp_ports(n)) out.push_back({"127.0.0.1", port});
  return out;
}

inline bool contains(const std::string& text, std::string_view part) {
  return text.find(part) != std::string::npos;
}

}  // namespace mpcache::testing
