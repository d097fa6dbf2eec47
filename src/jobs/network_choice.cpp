// See network_choice.hpp.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <CLI/CLI.hpp>
import mpcache;
#include "network_choice.hpp"

namespace mpcache::jobs {

void NetworkChoice::check() const {
  (void)link_named(link);
  (void)parse_backend(transport);
}

TcpOptions NetworkChoice::tcp_options(std::chrono::milliseconds silence) const {
  TcpOptions tcp;
  tcp.backend = parse_backend(transport);
  tcp.silence_timeout = silence;
  tcp.spin = std::chrono::microseconds(spin_us);
  return tcp;
}

std::vector<std::string> NetworkChoice::args() const {
  std::vector<std::string> out{"--transport", transport, "--link", link, "--spin-us", std::to_string(spin_us)};
  if (insecure) out.push_back("--insecure");
  return out;
}

namespace {

// A CLI check that runs `parse` on the value and reports what it throws.
template <class Parse>
CLI::Validator check_by(Parse parse, std::string description) {
  return CLI::Validator(
      [parse](std::string& s) -> std::string {
        try {
          (void)parse(s);
          return {};
        } catch (const std::exception& e) {
          return e.what();
        }
      },
      std::move(description));
}

}  // namespace

void add_network_options(CLI::App& command, NetworkChoice& choice) {
  const auto link_check = check_by([](const std::string& s) { return link_named(s); }, "lan|wan|none|RTT_MS:MBYTES_PER_S");
  // The drivers' table (net/sys/drivers.cpp) decides what is accepted.
  std::string drivers;
  for (const auto& name : tcp_backend_names()) drivers += (drivers.empty() ? "" : "|") + name;
  command.add_option("--transport", choice.transport,
                     "auto (the first driver that starts, in this order: " + drivers + "), a driver, or uring")
      ->check(check_by([](const std::string& s) { return parse_backend(s); }, drivers));
  command.add_option("--link", choice.link, "emulated link: lan, wan, none or RTT_MS:MBYTES_PER_S")->check(link_check);
  command
      .add_option("--spin-us", choice.spin_us,
                  "before sleeping, poll the network for up to this many microseconds, yielding the CPU between "
                  "polls (0: off; more, e.g. 200-1000: the low-latency mode; costs up to that much CPU time per wait)")
      ->check(CLI::Range(0, 100000));
  command.add_flag("--insecure", choice.insecure, "plain TCP: no authentication, no encryption");
}

}  // namespace mpcache::jobs
