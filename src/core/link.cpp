module mpcache.core;
import mpcache.std;

namespace mpcache {

Link lan_link() { return {"lan", 0.3e-3, 377e6}; }
Link wan_link() { return {"wan", 40e-3, 300e6 / 8}; }

Link link_named(const std::string& name) {
  if (name == "lan") return lan_link();
  if (name == "wan") return wan_link();
  if (name == "none" || name.empty()) return {};
  const auto colon = name.find(':');
  if (colon != std::string::npos) {
    try {
      const std::string rtt = name.substr(0, colon), bandwidth = name.substr(colon + 1);
      std::size_t rtt_used = 0, bandwidth_used = 0;
      const double rtt_ms = std::stod(rtt, &rtt_used);
      const double mbytes_per_s = std::stod(bandwidth, &bandwidth_used);
      if (rtt_used == rtt.size() && bandwidth_used == bandwidth.size() && rtt_ms >= 0 && mbytes_per_s >= 0)
        return {name, rtt_ms * 1e-3, mbytes_per_s * 1e6};
    } catch (const std::exception&) {
      // not a number: reported below with the accepted forms
    }
  }
  throw Error(ErrorCode::invalid_argument,
              "unknown link '" + name + "' (lan, wan, none or RTT_MS:MBYTES_PER_S such as 10:100)");
}

Link planning_link(const Link& link) { return link.rtt_s == 0 && link.bytes_per_s == 0 ? lan_link() : link; }

}  // namespace mpcache
