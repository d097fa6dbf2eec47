// In-process transport: all parties in one process and one scheduler. A
// batch written at the end of a tick is delivered at once; the woken
// receivers run in the next tick. Used by tests and single-host benches.
export module mpcache.net:in_process;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import :frame;
import :endpoint;

export namespace mpcache {

class InProcessNetwork final : public Transport {
 public:
  InProcessNetwork(Scheduler& scheduler, std::size_t parties);
  Endpoint& endpoint(PartyId id);
  std::size_t parties() const noexcept { return endpoints_.size(); }

  void write(PartyId from, PartyId to, std::vector<Frame>&& batch) override;
  std::string name() const override { return "in-process"; }

  // Test hook: from now on frames from `from` to `to` are dropped and `to`
  // sees the link as failed (a dead peer).
  void cut(PartyId from, PartyId to);

 private:
  std::vector<std::unique_ptr<Endpoint>> endpoints_;
  std::vector<std::vector<bool>> cut_;
};

namespace detail {
template <class R>
using PartyResult = std::conditional_t<std::is_void_v<R>, std::monostate, R>;
}

// Runs party_main(id) -> Task<R> for every party of `network` concurrently.
// A party whose task throws behaves like a process that died: its links are
// cut, so the others fail fast with a network error instead of waiting. The
// error rethrown is the first one in time (the root cause). Parties are
// separate processes in all but name: one party's failure reaches the others
// through the network only, never as a when_all stop of their receives.
template <class Fn>
auto run_parties(Scheduler& scheduler, InProcessNetwork& network, Fn party_main) {
  using R = typename decltype(party_main(PartyId{0}))::value_type;
  using Result = detail::PartyResult<R>;
  std::exception_ptr first_error;
  // Never throws: a failure is kept in first_error, not handed to when_all.
  auto guarded = [&](PartyId id) -> Task<std::optional<Result>> {
    std::exception_ptr error;
    try {
      if constexpr (std::is_void_v<R>) {
        co_await party_main(id);
        co_return Result{};
      } else {
        co_return co_await party_main(id);
      }
    } catch (...) {
      error = std::current_exception();
    }
    if (!first_error) first_error = error;
    for (PartyId peer = 0; peer < network.parties(); ++peer)
      if (peer != id) network.cut(id, peer);
    co_return std::nullopt;
  };
  std::vector<Task<std::optional<Result>>> tasks;
  for (PartyId id = 0; id < network.parties(); ++id) tasks.push_back(guarded(id));
  std::vector<std::optional<Result>> done;
  try {
    done = sync_wait(scheduler, when_all(std::move(tasks)));
  } catch (...) {
    if (first_error) std::rethrow_exception(first_error);
    throw;
  }
  if (first_error) std::rethrow_exception(first_error);
  std::vector<Result> results;
  results.reserve(done.size());
  for (auto& r : done) results.push_back(std::move(*r));
  return results;
}

}  // namespace mpcache
