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

// fn(PartyId, Endpoint&) -> Task<R>, run at every party in its own thread.
template <class R, class Fn>
std::vector<TcpPartyResult<R>> run_tcp_parties(std::vector<Connections> connections,
                                               TcpOptions options, Fn fn) {
  const std::size_t n = connections.size();
  std::vector<TcpPartyResult<R>> results(n);
  std::vector<std::thread> threads;
  for (PartyId id = 0; id < n; ++id)
    threads.emplace_back([&, id] {
      auto& out = results[id];
      try {
        Scheduler scheduler;
        Endpoint endpoint(scheduler, id, n);
        TcpTransport transport(scheduler, endpoint, std::move(connections[id]), options);
        out.transport = transport.name();
        out.value = sync_wait(scheduler, fn(id, endpoint));
        out.costs = endpoint.costs();
      } catch (const std::exception& e) {
        out.error = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return results;
}

inline bool contains(const std::string& text, std::string_view part) {
  return text.find(part) != std::string::npos;
}

}  // namespace mpcache::testing
