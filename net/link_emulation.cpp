// Link emulation (see modules/net/link_emulation.cppm).
module mpcache.net;
import mpcache.std;
import mpcache.core;

namespace mpcache {

void LinkEmulator::write(PartyId from, PartyId to, std::vector<Frame>&& batch) {
  std::uint64_t bytes = 0;
  for (const auto& f : batch) bytes += frame_header_bytes + f.payload.size();
  const auto now = SteadyClock::now();
  auto& free = free_at_[{from, to}];
  const auto start = std::max(free, now);
  const auto serialize = link_.bytes_per_s > 0
                             ? std::chrono::duration<double>(static_cast<double>(bytes) / link_.bytes_per_s)
                             : std::chrono::duration<double>(0);
  const auto depart = start + std::chrono::duration_cast<SteadyClock::duration>(serialize);
  free = depart;
  const auto arrive =
      depart + std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(link_.rtt_s / 2));
  auto shared = make_shared<std::vector<Frame>>(std::move(batch));
  timers_.at(arrive, [this, from, to, shared] { inner_.write(from, to, std::move(*shared)); });
}

}  // namespace mpcache
