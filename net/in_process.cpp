module mpcache.net;
import mpcache.std;
import mpcache.core;
import mpcache.async;

namespace mpcache {

InProcessNetwork::InProcessNetwork(Scheduler& scheduler, std::size_t parties)
    : cut_(parties, std::vector<bool>(parties, false)) {
  for (std::size_t i = 0; i < parties; ++i) {
    endpoints_.push_back(std::make_unique<Endpoint>(scheduler, static_cast<PartyId>(i), parties));
    endpoints_.back()->attach(this);
  }
}

Endpoint& InProcessNetwork::endpoint(PartyId id) {
  if (id >= endpoints_.size())
    throw Error(ErrorCode::bad_party, "no party " + std::to_string(id) + " in a network of " +
                                          std::to_string(endpoints_.size()));
  return *endpoints_[id];
}

void InProcessNetwork::write(PartyId from, PartyId to, std::vector<Frame>&& batch) {
  if (cut_[from][to]) return;
  endpoint(to).deliver(from, std::move(batch));
}

void InProcessNetwork::cut(PartyId from, PartyId to) {
  endpoint(from);
  endpoint(to).fail(from, "peer " + std::to_string(from) + " stopped (link cut)");
  cut_[from][to] = true;
}

}  // namespace mpcache
