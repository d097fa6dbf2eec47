// Which sessions go into which batched decode step (continuous batching,
// ServeOptions::max_batch > 1): the leader's plans, and what every server
// keeps of the steps running. Plain bookkeeping over session numbers, no
// MPC, so that its rules are tested on their own
// (tests/serve/batch_planner_test.cpp); the server's batcher runs the MPC.
//
// A session decodes in the batches once all three servers have it (its
// prefill done there: joined). The leader plans each step of a lane:
//   - first the departures it may tell now: a session in a running step
//     leaves after that step, so that no step loses a row it computes;
//   - then the sessions that step: joined at all three, in no running step,
//     least recently stepped first (fair turns: a newcomer goes first, and
//     no session waits while another steps twice), at most max_batch, and
//     at most this lane's even share of all joined sessions (so that every
//     lane has work).
// Servers 1 and 2 get each plan (BatchStep) and start it once its lane and
// its sessions are free there: a lane runs one step at a time, a session is
// in one step at a time.
export module mpcache.serve:batch_planner;
import mpcache.std;
import mpcache.core;
import :messages;

export namespace mpcache::serve {

class BatchPlanner {
 public:
  // At most `max_batch` rows per step, over `lanes` steps in flight at once;
  // both at least 1 (Error(invalid_argument) otherwise).
  BatchPlanner(std::size_t max_batch, std::size_t lanes);

  // ---- the leader: sessions and plans ----
  // `server` (0, 1 or 2) holds the session for the batches; once all three
  // do, it is planned.
  void joined(std::uint64_t session, PartyId server);
  // A speculating session: each step it starts uses up its readiness at
  // every server (joined() again once its next rows came there).
  void speculating(std::uint64_t session);
  // Whether it is joined at all three (and so may be planned once free).
  bool ready(std::uint64_t session) const;
  // A speculating session, in no step, whose next rows have not yet come
  // to all three servers (nor is it leaving).
  bool awaiting_rows(std::uint64_t session) const;
  // Out of the batches (done, stopped, failed): never planned again. Its
  // departures, if any, are still told.
  void ended(std::uint64_t session);
  // The session leaves the batches, `why`: told to servers 1 and 2 with the
  // first plan made while it is in no running step. In the order given; a
  // session may be given twice (each server that failed it says so).
  void depart(std::uint64_t session, std::string why);
  bool departing(std::uint64_t session) const;
  // Whether plan() would now give a step with sessions or departures.
  bool has_work() const;
  // The next step of `lane` (< lanes): the departures that may be told now
  // (their sessions end, as by ended()), then the sessions that step, in
  // their rows' order, started (start()). Both empty: nothing to do.
  BatchStep plan(std::size_t lane);

  // ---- every server: steps running ----
  // Whether the leader's `step` may start here: its lane's last step has
  // ended, and so have the steps of every session it names (to step or to
  // depart). Servers 1 and 2 wait for this; the leader's plans are so.
  bool may_start(const BatchStep& step) const;
  // A step of `sessions` runs in `lane` (nothing if `sessions` is empty);
  // it counts as their last turn.
  void start(std::size_t lane, const std::vector<std::uint64_t>& sessions);
  // That step has ended (whatever became of its sessions meanwhile).
  void finish(std::size_t lane, const std::vector<std::uint64_t>& sessions);
  bool stepping(std::uint64_t session) const { return stepping_.contains(session); }
  bool lane_busy(std::size_t lane) const { return lane < lane_busy_.size() && lane_busy_[lane]; }

 private:
  static constexpr unsigned all_servers = 0b111;
  struct Member {
    unsigned servers = 0;         // bit i: server i holds it
    std::uint64_t last_turn = 0;  // the step it last started in; 0: none yet
    bool each_step = false;       // speculating: joined anew for each step
  };
  std::vector<std::uint64_t> next_sessions() const;

  std::size_t max_batch_, lanes_;
  std::map<std::uint64_t, Member> members_;
  std::vector<std::pair<std::uint64_t, std::string>> departing_;
  std::set<std::uint64_t> stepping_;
  std::vector<bool> lane_busy_;
  std::uint64_t steps_started_ = 0;
};

}  // namespace mpcache::serve
