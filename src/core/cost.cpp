module mpcache.core;
import mpcache.std;

namespace mpcache {

PeerTraffic& PeerTraffic::operator-=(const PeerTraffic& o) {
  payload_bytes_sent -= o.payload_bytes_sent;
  frame_bytes_sent -= o.frame_bytes_sent;
  messages_sent -= o.messages_sent;
  writes -= o.writes;
  payload_bytes_received -= o.payload_bytes_received;
  messages_received -= o.messages_received;
  return *this;
}

namespace {
template <class F>
std::uint64_t sum(const std::vector<PeerTraffic>& peers, F field) {
  std::uint64_t total = 0;
  for (const auto& p : peers) total += field(p);
  return total;
}
}  // namespace

std::uint64_t CostCounters::payload_bytes_sent() const {
  return sum(per_peer, [](const PeerTraffic& p) { return p.payload_bytes_sent; });
}
std::uint64_t CostCounters::frame_bytes_sent() const {
  return sum(per_peer, [](const PeerTraffic& p) { return p.frame_bytes_sent; });
}
std::uint64_t CostCounters::messages_sent() const {
  return sum(per_peer, [](const PeerTraffic& p) { return p.messages_sent; });
}
std::uint64_t CostCounters::writes() const {
  return sum(per_peer, [](const PeerTraffic& p) { return p.writes; });
}

CostCounters operator-(CostCounters later, const CostCounters& earlier) {
  for (std::size_t i = 0; i < later.per_peer.size() && i < earlier.per_peer.size(); ++i)
    later.per_peer[i] -= earlier.per_peer[i];
  later.rounds -= earlier.rounds;
  for (std::size_t t = 0; t < cost_tag_count; ++t) {
    later.by_tag[t].rounds -= earlier.by_tag[t].rounds;
    later.by_tag[t].payload_bytes_sent -= earlier.by_tag[t].payload_bytes_sent;
    later.by_tag[t].seconds -= earlier.by_tag[t].seconds;
  }
  return later;
}

PartyCost party_cost_between(const CostCounters& before, const CostCounters& after) {
  const CostCounters d = after - before;
  return {.bytes_sent = d.payload_bytes_sent(), .clock_before = before.rounds, .clock_after = after.rounds,
          .by_tag = d.by_tag};
}

MergedCost merge_party_costs(std::span<const PartyCost> parties) {
  MergedCost m;
  CriticalPath path;
  std::optional<double> first_in, last_out;
  std::array<std::vector<std::uint64_t>, cost_tag_count> tag_rounds;
  std::array<std::vector<double>, cost_tag_count> tag_seconds;
  for (const PartyCost& p : parties) {
    if (p.offline) {
      m.offline_bytes += p.bytes_sent;
      continue;
    }
    path.add(p.clock_before, p.clock_after);
    first_in = std::min(first_in.value_or(p.start_s), p.start_s);
    last_out = std::max(last_out.value_or(p.end_s), p.end_s);
    m.bytes_max_party = std::max(m.bytes_max_party, p.bytes_sent);
    m.bytes_total += p.bytes_sent;
    for (std::size_t t = 0; t < cost_tag_count; ++t) {
      m.by_tag[t].payload_bytes_sent = std::max(m.by_tag[t].payload_bytes_sent, p.by_tag[t].payload_bytes_sent);
      tag_rounds[t].push_back(p.by_tag[t].rounds);
      tag_seconds[t].push_back(p.by_tag[t].seconds);
    }
  }
  m.rounds = path.rounds();
  if (first_in) m.latency_s = *last_out - *first_in;
  for (std::size_t t = 0; t < cost_tag_count; ++t) {
    if (tag_rounds[t].empty()) continue;
    std::sort(tag_rounds[t].begin(), tag_rounds[t].end());
    std::sort(tag_seconds[t].begin(), tag_seconds[t].end());
    m.by_tag[t].rounds = tag_rounds[t][tag_rounds[t].size() / 2];
    m.by_tag[t].seconds = tag_seconds[t][tag_seconds[t].size() / 2];
  }
  return m;
}

std::string_view cost_tag_name(CostTag tag) {
  static constexpr std::array<std::string_view, cost_tag_count> names = {
      "other", "linear", "attention", "softmax", "norm", "activation",
      "summary", "similarity", "topk", "gather", "eviction", "argmax"};
  const auto i = static_cast<std::size_t>(tag);
  return i < names.size() ? names[i] : "invalid";
}

}  // namespace mpcache
