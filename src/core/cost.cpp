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

std::string_view cost_tag_name(CostTag tag) {
  static constexpr std::array<std::string_view, cost_tag_count> names = {
      "other", "linear", "attention", "softmax", "norm", "activation",
      "summary", "similarity", "topk", "gather", "eviction", "argmax"};
  const auto i = static_cast<std::size_t>(tag);
  return i < names.size() ? names[i] : "invalid";
}

}  // namespace mpcache
