// In-process transport: all parties in one process and one scheduler. A
// batch written at the end of a tick is delivered at once; the woken
// receivers run in the next tick. Used by tests and single-host benches.
module;
#include "prelude.hpp"
export module mpcache.net:in_process;
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

}  // namespace mpcache
