// Link emulation: a transport decorator that makes any transport behave as
// if it ran over a given Link (core's link model).
export module mpcache.net:link_emulation;
import mpcache.std;
import mpcache.core;
import :frame;
import :endpoint;
import :timers;

export namespace mpcache {

// Holds each batch until it would have crossed the link (serialized at
// `bytes_per_s` behind earlier batches on the same direction, then RTT/2;
// every party pair has its own two directions), then hands it to the inner
// transport. Timer-driven through the event loop's TimerQueue: nothing
// sleeps while other work is runnable.
class LinkEmulator final : public Transport {
 public:
  LinkEmulator(Transport& inner, TimerQueue& timers, Link link)
      : inner_(inner), timers_(timers), link_(std::move(link)) {}
  void write(PartyId from, PartyId to, std::vector<Frame>&& batch) override;
  std::string name() const override { return inner_.name() + "+emulated-" + link_.name; }
  const Link& link() const noexcept { return link_; }

 private:
  Transport& inner_;
  TimerQueue& timers_;
  Link link_;
  std::map<std::pair<PartyId, PartyId>, SteadyClock::time_point> free_at_;
};

}  // namespace mpcache
