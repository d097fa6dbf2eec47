// Preset `net`: the TCP transport on loopback.
//  * throughput of 64 MiB messages (io_uring, poll, asio; plain and AES-GCM),
//  * small-message round trip (io_uring, poll, asio, each also in the low-latency
//    mode, and a blocking-socket ping-pong baseline without any framework),
//    each the median of interleaved runs; `--load N` keeps N more threads
//    busy meanwhile,
//  * mul-1M, fixed-mul-1M, matvec as three processes (rss3_preset with
//    --processes 3: mpcache-jobs' run_local_job), with and without
//    encryption, with and without `lan` emulation; with
//    emulation, model_s is rounds x RTT + bytes / bandwidth + the measured
//    latency of the same run without emulation.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <cstdio>
#include <thread>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>
#include <nlohmann/json.hpp>
import mpcache;
#include "bench_case.hpp"
#include "raw_ring_rtt.hpp"

namespace mpcache::bench {
std::vector<CaseResult> rss3_preset(const std::string& preset, const Options& options);

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Two parties over loopback TCP, one thread each; fn(id, endpoint) -> Task<double>
// (seconds measured by party 0). spin_us[id]: that party's low-latency mode.
template <class Fn>
double two_parties(const std::string& backend, bool encrypted, std::array<int, 2> spin_us, Fn fn) {
  const auto ports = free_tcp_ports(2);
  std::vector<PartyAddress> parties = {{"127.0.0.1", ports[0]}, {"127.0.0.1", ports[1]}};
  std::vector<std::pair<std::string, std::string>> keys;
  if (encrypted) keys = {generate_party_key(), generate_party_key()};
  double measured = 0;
  std::string error;
  std::vector<std::thread> threads;
  for (PartyId id = 0; id < 2; ++id)
    threads.emplace_back([&, id] {
      try {
        ConnectOptions c;
        c.encrypted = encrypted;
        if (encrypted) c.secret_key_pem = keys[id].first, c.public_keys_pem = {keys[0].second, keys[1].second};
        Scheduler s;
        Endpoint e(s, id, 2);
        TcpTransport t(s, e, connect_cluster(id, parties, c),
                       {.backend = backend, .spin = std::chrono::microseconds(spin_us[id])});
        const double r = sync_wait(s, fn(id, e));
        if (id == 0) measured = r;
      } catch (const std::exception& ex) {
        error = ex.what();
      }
    });
  for (auto& t : threads) t.join();
  if (!error.empty()) throw Error(ErrorCode::network, error);
  return measured;
}

CaseResult row(const std::string& name, const std::string& transport, double latency,
               const std::string& note) {
  CaseResult c;
  c.name = name;
  c.protocol = "-";
  c.transport = transport;
  c.latency_s = latency;
  c.note = note;
  c.repeat = 1;
  return c;
}

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

std::vector<CaseResult> throughput_rows(const Options& options) {
  std::vector<CaseResult> out;
  const std::size_t size = std::size_t{64} << 20;
  const int messages = std::max(2, options.repeat);
  for (bool encrypted : {false, true})
    for (std::string backend : {"io_uring", "poll", "asio"}) {
      const double s = two_parties(backend, encrypted, {0, 0}, [&](PartyId id, Endpoint& e) -> Task<double> {
        // One message per round trip (each acknowledged), after a warm-up
        // message that sizes the buffers. The payloads exist before the
        // clock starts: the transport is measured, not the allocator.
        std::vector<std::vector<std::byte>> payloads;
        if (id == 0)
          for (int i = 0; i <= messages; ++i) payloads.emplace_back(size, std::byte(i));
        auto one = [&]() -> Task<void> {
          if (id == 0) {
            e.send(1, 1, std::move(payloads.back()));
            payloads.pop_back();
            (void)co_await e.recv(1, 2);
          } else {
            auto m = co_await e.recv(0, 1);
            if (m.size() != size) throw Error(ErrorCode::protocol, "short message");
            e.send(0, 2, std::vector<std::byte>(1));
          }
        };
        co_await one();
        const auto t0 = Clock::now();
        for (int i = 0; i < messages; ++i) co_await one();
        co_return seconds_since(t0);
      });
      const std::string tname = backend + (encrypted ? "+aead" : "");
      out.push_back(row("throughput-64MiB", tname, s / messages,
                        fmt("%.0f MB/s", static_cast<double>(size) * messages / s / 1e6)));
    }
  return out;
}

// Round trips of 8 bytes: party 0 sends, party 1 echoes.
constexpr int round_trips = 2000;
// The low-latency mode's spin budget in these rows.
constexpr int low_latency_spin_us = 200;

struct RttCase {
  std::string transport;
  std::string backend;
  bool encrypted;
  std::array<int, 2> spin_us;
};

double transport_rtt(const RttCase& c) {
  const double s = two_parties(c.backend, c.encrypted, c.spin_us, [&](PartyId id, Endpoint& e) -> Task<double> {
    const auto t0 = Clock::now();
    for (int i = 0; i < round_trips; ++i) {
      if (id == 0) {
        e.send(1, 1, std::vector<std::byte>(8));
        (void)co_await e.recv(1, 1);
      } else {
        (void)co_await e.recv(0, 1);
        e.send(0, 1, std::vector<std::byte>(8));
      }
    }
    co_return seconds_since(t0);
  });
  return s / round_trips;
}

// Two ends of one loopback TCP connection, set up as the transport's are.
std::array<int, 2> loopback_pair() {
  const auto ports = free_tcp_ports(2);
  std::vector<PartyAddress> parties = {{"127.0.0.1", ports[0]}, {"127.0.0.1", ports[1]}};
  std::array<int, 2> fd{-1, -1};
  std::vector<std::thread> threads;
  for (PartyId id = 0; id < 2; ++id)
    threads.emplace_back([&, id] {
      ConnectOptions c;
      c.encrypted = false;
      auto conn = connect_cluster(id, parties, c);
      fd[id] = conn.fds[1 - id];
    });
  for (auto& t : threads) t.join();
  return fd;
}

// The ring's floor: bare io_uring on each side (raw_ring_rtt.hpp).
double ring_rtt(RingWait wait) {
  const auto fd = loopback_pair();
  const double s = raw_ring_rtt(fd[0], fd[1], round_trips, wait);
  for (int f : fd) ::close(f);
  return s;
}

// Baseline: blocking sockets, no framework, same loopback TCP connection.
double blocking_rtt() {
  const auto fd = loopback_pair();
  for (int f : fd) ::fcntl(f, F_SETFL, ::fcntl(f, F_GETFL) & ~O_NONBLOCK);
  auto exact = [](int f, bool send_side, char* buf) {
    std::size_t done = 0;
    while (done < 8) {
      const ssize_t r = send_side ? ::send(f, buf + done, 8 - done, MSG_NOSIGNAL) : ::recv(f, buf + done, 8 - done, 0);
      if (r <= 0) return;
      done += static_cast<std::size_t>(r);
    }
  };
  const auto t0 = Clock::now();
  std::thread echo([&] {
    char b[8];
    for (int i = 0; i < round_trips; ++i) exact(fd[1], false, b), exact(fd[1], true, b);
  });
  char b[8] = {};
  for (int i = 0; i < round_trips; ++i) exact(fd[0], true, b), exact(fd[0], false, b);
  const double s = seconds_since(t0);
  echo.join();
  for (int f : fd) ::close(f);
  return s / round_trips;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Every case runs `runs` times, interleaved with the others, so that all
// see the same machine; the median is reported, with the range and the
// ratio to the blocking baseline. Where the scheduler puts the two threads
// (one core or two) moves every figure, so single runs mislead.
std::vector<CaseResult> rtt_rows(const Options& options) {
  const int fallback = static_cast<int>(default_spin.count());
  const std::array<int, 2> none{0, 0}, standard{fallback, fallback},
      both{low_latency_spin_us, low_latency_spin_us}, first_only{low_latency_spin_us, fallback};
  const std::vector<RttCase> cases = {
      {"io_uring", "io_uring", false, standard},
      {"io_uring no spin", "io_uring", false, none},
      {"io_uring low-latency", "io_uring", false, both},
      {"io_uring low-latency party 0 only", "io_uring", false, first_only},
      {"io_uring+aead", "io_uring", true, standard},
      {"io_uring+aead low-latency", "io_uring", true, both},
      {"poll", "poll", false, standard},
      {"poll low-latency", "poll", false, both},
      {"asio", "asio", false, standard},
      {"asio low-latency", "asio", false, both},
  };
  const int runs = std::max(3, options.repeat);
  std::vector<std::vector<double>> seconds(cases.size()), ring(3);
  std::vector<double> blocking;
  for (int r = 0; r < runs; ++r) {
    blocking.push_back(blocking_rtt());
    ring[0].push_back(ring_rtt(RingWait::ring));
    ring[1].push_back(ring_rtt(RingWait::poll));
    ring[2].push_back(ring_rtt(RingWait::socket));
    for (std::size_t k = 0; k < cases.size(); ++k) seconds[k].push_back(transport_rtt(cases[k]));
  }
  const double baseline = median(blocking);
  std::vector<CaseResult> out;
  auto add = [&](const std::string& transport, const std::vector<double>& v, const std::string& extra) {
    const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    const double m = median(v);
    char note[160];
    std::snprintf(note, sizeof note, "%.1f us per round trip (%.1f-%.1f over %zu runs), %.2fx blocking%s",
                  m * 1e6, *lo * 1e6, *hi * 1e6, v.size(), m / baseline, extra.c_str());
    CaseResult c = row("rtt-8B", transport, m, note);
    c.repeat = static_cast<int>(v.size());
    out.push_back(c);
  };
  add("blocking", blocking, " (baseline)");
  add("bare io_uring", ring[0], " (the ring alone: no transport)");
  add("bare io_uring polling", ring[1], " (the ring alone, polled as the low-latency mode does)");
  add("bare io_uring socket wait", ring[2], " (the ring alone, sleeping in poll(2) on the socket)");
  for (std::size_t k = 0; k < cases.size(); ++k)
    add(cases[k].transport, seconds[k],
        ", spin " + std::to_string(cases[k].spin_us[0]) + "/" + std::to_string(cases[k].spin_us[1]) + " us");
  if (options.load > 0)
    for (auto& c : out) c.note += ", " + std::to_string(options.load) + " busy thread(s) (--load)";
  return out;
}

// The micro cases as three processes (rss3_preset with --processes 3),
// plain and encrypted, without a link and over the emulated lan.
std::vector<CaseResult> process_rows(const Options& options) {
  std::vector<CaseResult> out;
  for (bool encrypted : {false, true})
    for (const char* link : {"none", "lan"}) {
      Options o = options;
      o.case_name.clear();  // --case named this group, not a micro case
      o.processes = 3;
      o.insecure = !encrypted;
      o.link = link_named(link);
      for (CaseResult r : rss3_preset("micro", o)) {
        r.name += "-3proc";
        r.link = link;
        out.push_back(r);
      }
    }
  return out;
}

}  // namespace

// Every group of rows, or only the one --case names.
std::vector<CaseResult> net_preset(const Options& options) {
  using Group = std::vector<CaseResult> (*)(const Options&);
  const std::vector<std::pair<std::string, Group>> groups = {
      {"throughput-64MiB", throughput_rows}, {"rtt-8B", rtt_rows}, {"3proc", process_rows}};
  std::vector<CaseResult> out;
  std::string names;
  for (const auto& [name, rows] : groups) {
    names += (names.empty() ? "" : ", ") + name;
    if (!options.case_name.empty() && options.case_name != name) continue;
    for (auto& r : rows(options)) out.push_back(r);
  }
  if (out.empty())
    throw Error(ErrorCode::invalid_argument, "preset 'net' has no case '" + options.case_name + "' (" + names + ")");
  return out;
}

}  // namespace mpcache::bench
