// A server's client door, kept by threads the job owns (not the library):
// one thread takes connections, and each connection's hello and key
// exchange run on a thread of their own, so a silent or slow stranger
// delays no other client. Handshakes in progress are bounded, in all and
// per remote host; a connection over a bound is told why (the door's
// refusal: mpcache::turn_away), closed and logged.
// Include after `import mpcache;`.
#pragma once
#include <chrono>
#include <cstddef>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace mpcache::jobs {

struct DoorLimits {
  std::size_t max_handshakes = 64;  // in progress at once
  std::size_t per_host = 16;        // in progress at once from one remote address
  std::chrono::milliseconds handshake_within{2000};
};

class DoorKeeper {
 public:
  // `admitted` gets each client that proved its key, on its handshake's
  // thread (post it to the loop); `log` gets every refusal with its reason.
  DoorKeeper(ClientDoor& door, DoorLimits limits, std::function<void(ClientChannel)> admitted,
             std::function<void(const std::string&)> log);
  // Stops taking connections and joins every thread (a handshake in
  // progress ends by its deadline).
  ~DoorKeeper();
  DoorKeeper(const DoorKeeper&) = delete;
  DoorKeeper& operator=(const DoorKeeper&) = delete;

 private:
  struct Handshake {
    std::thread thread;
    bool finished = false;
  };
  void take_connections(const std::stop_token& stop);
  void start_handshake(PendingClient connection);
  void join_finished();
  // A connection over a bound: told why, then closed once the client has
  // read it (its end closes) or after a second, whichever comes first.
  // Closed at once, unread input would reset the connection and could
  // discard the reason before the client read it.
  void turn_away(const PendingClient& connection, const std::string& why);
  void close_turned_away(bool all);

  struct TurnedAway {
    int fd = -1;
    std::chrono::steady_clock::time_point until;
  };
  std::list<TurnedAway> turned_away_;  // the taker thread's own
  ClientDoor& door_;
  const DoorLimits limits_;
  const std::function<void(ClientChannel)> admitted_;
  const std::function<void(const std::string&)> log_;
  std::mutex mutex_;  // guards the three below
  std::list<Handshake> handshakes_;
  std::size_t in_progress_ = 0;
  std::map<std::string, std::size_t> in_progress_by_host_;
  std::jthread taker_;  // last: it starts once the rest is ready
};

}  // namespace mpcache::jobs
