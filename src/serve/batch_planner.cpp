// BatchPlanner (modules/serve/batch_planner.cppm): fair turns, max batch and
// lane shares for the leader's plans; lanes and sessions busy at every server.
module mpcache.serve;
import mpcache.std;
import mpcache.core;

namespace mpcache::serve {

BatchPlanner::BatchPlanner(std::size_t max_batch, std::size_t lanes) : max_batch_(max_batch), lanes_(lanes) {
  if (max_batch == 0 || lanes == 0)
    throw Error(ErrorCode::invalid_argument, "batch planner: max_batch (" + std::to_string(max_batch) + ") and lanes (" +
                                                 std::to_string(lanes) + ") must be at least 1");
}

void BatchPlanner::joined(std::uint64_t session, PartyId server) {
  if (server > 2) throw Error(ErrorCode::bad_party, "batch planner: server " + std::to_string(server) + " of 3");
  members_[session].servers |= 1u << server;
}

void BatchPlanner::speculating(std::uint64_t session) { members_[session].each_step = true; }

bool BatchPlanner::ready(std::uint64_t session) const {
  auto it = members_.find(session);
  return it != members_.end() && it->second.servers == all_servers;
}

bool BatchPlanner::awaiting_rows(std::uint64_t session) const {
  auto it = members_.find(session);
  return it != members_.end() && it->second.each_step && it->second.servers != all_servers && !stepping(session) &&
         !departing(session);
}

void BatchPlanner::ended(std::uint64_t session) { members_.erase(session); }

void BatchPlanner::depart(std::uint64_t session, std::string why) { departing_.emplace_back(session, std::move(why)); }

bool BatchPlanner::departing(std::uint64_t session) const {
  return std::ranges::any_of(departing_, [&](const auto& d) { return d.first == session; });
}

bool BatchPlanner::has_work() const {
  return std::ranges::any_of(departing_, [&](const auto& d) { return !stepping(d.first); }) || !next_sessions().empty();
}

// Joined at all three and free, least recently stepped first (ties: the
// lower session number), at most max_batch and at most a lane's even share
// of every joined session, free or stepping.
std::vector<std::uint64_t> BatchPlanner::next_sessions() const {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> order;  // (last turn, session)
  std::size_t joined = 0;
  for (const auto& [session, member] : members_)
    if (member.servers == all_servers) {
      ++joined;
      if (!stepping(session)) order.emplace_back(member.last_turn, session);
    }
  std::sort(order.begin(), order.end());
  const std::size_t share = std::min(max_batch_, (joined + lanes_ - 1) / lanes_);
  std::vector<std::uint64_t> sessions;
  for (std::size_t i = 0; i < order.size() && i < share; ++i) sessions.push_back(order[i].second);
  return sessions;
}

BatchStep BatchPlanner::plan(std::size_t lane) {
  if (lane >= lanes_)
    throw Error(ErrorCode::invalid_argument,
                "batch planner: lane " + std::to_string(lane) + " of " + std::to_string(lanes_));
  BatchStep step;
  step.lane = lane;
  std::erase_if(departing_, [&](auto& d) {
    if (stepping(d.first)) return false;
    step.departures.push_back(std::move(d));
    return true;
  });
  for (const auto& [session, why] : step.departures) ended(session);
  step.sessions = next_sessions();
  start(lane, step.sessions);
  return step;
}

bool BatchPlanner::may_start(const BatchStep& step) const {
  return !lane_busy(step.lane) && std::ranges::none_of(step.sessions, [&](auto s) { return stepping(s); }) &&
         std::ranges::none_of(step.departures, [&](const auto& d) { return stepping(d.first); });
}

void BatchPlanner::start(std::size_t lane, const std::vector<std::uint64_t>& sessions) {
  if (sessions.empty()) return;
  if (lane_busy_.size() <= lane) lane_busy_.resize(lane + 1, false);
  lane_busy_[lane] = true;
  ++steps_started_;
  for (auto session : sessions) {
    stepping_.insert(session);
    if (auto it = members_.find(session); it != members_.end()) {
      it->second.last_turn = steps_started_;
      if (it->second.each_step) it->second.servers = 0;
    }
  }
}

void BatchPlanner::finish(std::size_t lane, const std::vector<std::uint64_t>& sessions) {
  if (lane < lane_busy_.size()) lane_busy_[lane] = false;
  for (auto session : sessions) stepping_.erase(session);
}

}  // namespace mpcache::serve
