// A network link between every pair of parties, and the one cost formula
// built on it: rounds x RTT + bytes / bandwidth. Cost models pick algorithms
// with it (ops), the bench reports model times with it, and net emulates it.
export module mpcache.core:link;
import mpcache.std;

export namespace mpcache {

struct Link {
  std::string name = "none";
  double rtt_s = 0;
  double bytes_per_s = 0;  // per direction; 0: unlimited

  // The time `rounds` dependent round trips and `bytes` sent one way take.
  double seconds(double rounds, double bytes) const noexcept {
    return rounds * rtt_s + (bytes_per_s > 0 ? bytes / bytes_per_s : 0);
  }
};

// What one protocol step costs: rounds on its critical path and payload
// bytes each party sends (parties 0, 1, 2). Steps run one after another
// add. Backends describe their building blocks in these terms (see
// CostModel in mpcache.proto) and ops plan with them.
struct OpCost {
  std::uint64_t rounds = 0;
  std::array<std::uint64_t, 3> bytes{};

  std::uint64_t max_bytes() const noexcept { return std::max({bytes[0], bytes[1], bytes[2]}); }
  double seconds(const Link& link) const noexcept {
    return link.seconds(static_cast<double>(rounds), static_cast<double>(max_bytes()));
  }
  OpCost& operator+=(const OpCost& o) noexcept {
    rounds += o.rounds;
    for (std::size_t i = 0; i < 3; ++i) bytes[i] += o.bytes[i];
    return *this;
  }
  friend OpCost operator+(OpCost a, const OpCost& b) noexcept { return a += b; }
  // The step run `times` times in a row.
  OpCost repeated(std::uint64_t times) const noexcept {
    OpCost out;
    out.rounds = rounds * times;
    for (std::size_t i = 0; i < 3; ++i) out.bytes[i] = bytes[i] * times;
    return out;
  }
};

// The paper's LAN: 0.3 ms RTT, 377 MB/s.
Link lan_link();
// The paper's WAN: 40 ms RTT, 300 Mbit/s.
Link wan_link();

// "lan", "wan", "none" (or ""), or a custom "RTT_MS:MBYTES_PER_S" such as
// "10:100". Anything else throws Error(invalid_argument) naming the value.
Link link_named(const std::string& name);

// The link to plan for: `link`, or the LAN when there is none (on a free
// link every method costs nothing and the choice would be arbitrary).
Link planning_link(const Link& link);

}  // namespace mpcache
