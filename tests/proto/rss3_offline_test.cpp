// rss3 dcf comparisons with an offline store (Rss3Party::prepare_comparisons)
// and inline deals in slices (src/proto/rss3_dcf.cpp, rss3_offline.cpp).
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache.core;
import mpcache.async;
import mpcache.net;
import mpcache.proto;
#include "../support/parties.hpp"
#include "../support/signed_edges.hpp"
#include "../support/pinned_costs.hpp"

using namespace mpcache;
using mpcache::testing::random_ring;
using mpcache::testing::share_of;
using mpcache::testing::signed_edges;

namespace {

Rss3Options offline_options(std::uint64_t budget, std::uint64_t slice_bytes = rss3_default_dcf_slice_bytes) {
  return {.comparisons = Rss3Comparisons::dcf, .insecure_seed = 11, .offline_budget = budget,
          .dcf_slice_bytes = slice_bytes};
}

// One party's view of a measured op: the revealed signs, the op's rounds
// and bytes (clocks aligned first), and its dcf counters afterwards.
struct Measured {
  RingTensor signs;
  OpCost cost;
  std::array<Rss3DcfStats, 3> stats;
  std::array<std::uint64_t, 3> dealt{};
  std::array<std::size_t, 3> prepared{};
};

// Prepares `prepare` correlations at `width` (when > 0), then measures
// msb_bits of x at `width` (or msb_arith, with correlations of its slot).
Measured measure(const RingTensor& x, int width, std::size_t prepare, Rss3Options options,
                 Rss3DcfOutput output = Rss3DcfOutput::bit) {
  Scheduler scheduler;
  InProcessNetwork network(scheduler, 3);
  std::array<CostCounters, 3> before, after;
  Measured out;
  std::array<RingTensor, 3> signs;
  run_parties(scheduler, network, [&](PartyId id) -> Task<void> {
    auto party = co_await Rss3Party::setup(network.endpoint(id), options);
    Rss3 p = party->session();
    auto s = co_await share_of(p, 0, x);
    if (prepare > 0) out.prepared[id] = co_await party->prepare_comparisons(rss3_dcf_slot(width, output), prepare);
    co_await mpcache::testing::align_clocks(network.endpoint(id));
    before[id] = network.endpoint(id).costs();
    if (output == Rss3DcfOutput::arith) {
      const Rss3Share sign = co_await p.msb_arith(s, width);
      after[id] = network.endpoint(id).costs();
      signs[id] = co_await p.reveal(sign);
    } else {
      const Rss3Bits bits = co_await p.msb_bits(s, width);
      after[id] = network.endpoint(id).costs();
      signs[id] = co_await p.reveal_bits(bits);
    }
    out.stats[id] = party->dcf_stats();
    out.dealt[id] = party->dealt_bytes();
  });
  for (std::size_t i = 0; i < 3; ++i) out.cost.bytes[i] = (after[i] - before[i]).payload_bytes_sent();
  out.cost.rounds = mpcache::testing::critical_rounds(before, after);
  out.signs = signs[0];
  CHECK(signs[1] == signs[0]);
  CHECK(signs[2] == signs[0]);
  return out;
}

void check_signs(const RingTensor& x, int width, const RingTensor& signs) {
  for (std::size_t i = 0; i < x.size(); ++i) {
    INFO("width " << width << ", element " << i << ", value " << static_cast<std::int64_t>(x(i)));
    CHECK(signs(i) == ((x(i) >> (width - 1)) & 1));
  }
}

constexpr std::uint64_t megabyte = std::uint64_t{1} << 20;

}  // namespace

TEST_CASE("rss3 offline: the store gives the same signs as inline keys on edge values, filled, partial or dry") {
  for (const int width : {2, 27, 64}) {
    const RingTensor x = signed_edges(width, 70 + static_cast<std::uint64_t>(width));  // 159 elements: one dealer
    const Measured inline_keys = measure(x, width, 0, offline_options(0));
    check_signs(x, width, inline_keys.signs);
    for (const std::size_t prepared : {std::size_t{0}, std::size_t{100}, x.size(), std::size_t{500}}) {
      INFO("width " << width << ", prepared " << prepared);
      const Measured stored = measure(x, width, prepared, offline_options(64 * megabyte));
      CHECK(stored.signs == inline_keys.signs);
      // Party 2 deals the first call: the store served min(prepared, n), the rest inline.
      CHECK(stored.stats[2].from_store == std::min(prepared, x.size()));
      CHECK(stored.stats[2].inline_elements == x.size() - std::min(prepared, x.size()));
      CHECK(stored.stats[2].ran_dry == (prepared < x.size() ? 1u : 0u));
    }
  }
}

TEST_CASE("rss3 offline: a filled store takes the keys off the online phase; the offline bytes are the keys") {
  constexpr std::size_t n = 1000;  // 16 words: one dealer (party 2)
  const RingTensor x = random_ring({n}, 5);
  for (const int width : {27, 64}) {
    INFO("width " << width);
    const Measured dry = measure(x, width, 0, offline_options(64 * megabyte));
    const Measured filled = measure(x, width, n, offline_options(64 * megabyte));
    check_signs(x, width, filled.signs);
    CHECK(filled.prepared == std::array<std::size_t, 3>{n, n, n});
    CHECK(dry.cost.rounds == 2);
    CHECK(filled.cost.rounds == 2);
    CHECK(dry.cost.bytes == rss3_dcf_cost(width, n, rss3_default_dcf_slice_bytes, Rss3DcfStoreUse::dry).bytes);
    CHECK(filled.cost.bytes == rss3_dcf_cost(width, n, rss3_default_dcf_slice_bytes, Rss3DcfStoreUse::filled).bytes);
    // Online: the dealer sends a 16-byte header and r - r* (ceil(w/8) bytes an
    // element) to each of the pair instead of the keys; the pair pays the same.
    const std::uint64_t keys = 2 * dcf_correction_bytes(width - 1, 1, n) + n / 8;
    const std::uint64_t offsets = 2 * (16 + static_cast<std::uint64_t>((width + 7) / 8) * n);
    CHECK(dry.cost.bytes[2] == 32 + keys);
    CHECK(filled.cost.bytes[2] == offsets);
    CHECK(filled.cost.bytes[0] == dry.cost.bytes[0]);
    CHECK(filled.cost.bytes[1] == dry.cost.bytes[1]);
    CHECK(filled.dealt == std::array<std::uint64_t, 3>{0, 0, 0});
    CHECK(dry.dealt == std::array<std::uint64_t, 3>{0, 0, keys});
    // Offline every party dealt n correlations for its pair: the same keys.
    for (std::size_t id = 0; id < 3; ++id) {
      CHECK(filled.stats[id].offline_bytes == keys);
      CHECK(filled.stats[id].prepared == n);
    }
    // Afterwards dealer 2's lane is empty, the other two hold n each:
    // party 0 is A of dealer 2 (used) and B of dealer 1 (n held).
    CHECK(filled.stats[0].store_bytes == n * rss3_dcf_stored_bytes(width) + n * 8);
    CHECK(filled.stats[0].store_peak ==
          2 * n * rss3_dcf_stored_bytes(width) + n * 8);
  }
}

TEST_CASE("rss3 offline: the store never holds more than the budget, and fills it as far as it goes") {
  const int width = 27;
  const std::uint64_t per_party = 2 * rss3_dcf_stored_bytes(width) + 8;  // A for one dealer, B for another, own masks
  const std::uint64_t budget = 1'000'000;
  const RingTensor x = random_ring({2000}, 8);
  const Measured m = measure(x, width, 100'000, offline_options(budget));
  const std::size_t fits = budget / per_party;
  CHECK(m.prepared == std::array<std::size_t, 3>{fits, fits, fits});
  for (const auto& s : m.stats) {
    CHECK(s.store_peak <= budget);
    CHECK(s.store_peak == fits * per_party);
  }
  // 2000 elements: three dealers (chunks of 640, 640 and 720), each served from
  // its 1,136 stored correlations (436 bytes each at A and at B, 8 at the dealer).
  testing::check_pinned("proto.rss3_dcf.stored_bytes_w27", rss3_dcf_stored_bytes(width));
  CHECK(fits == 1136);
  check_signs(x, width, m.signs);
  for (const auto& s : m.stats) CHECK(s.ran_dry == 0);
}

TEST_CASE("rss3 offline: a large inline deal goes in slices, two in flight, with the same signs") {
  const RingTensor x = signed_edges(64, 91);
  RingTensor big = ring_concat_last(ring_concat_last(x, x), ring_concat_last(x, x));  // 636 elements, one dealer
  big = ring_concat_last(big, x);                                                     // 795
  const std::uint64_t slice_bytes = 70'000;  // 64 elements at w = 64: 13 slices
  REQUIRE(rss3_dcf_slice_elements(64, slice_bytes) == 64);
  const Measured whole = measure(big, 64, 0, offline_options(0));
  const Measured sliced = measure(big, 64, 0, offline_options(0, slice_bytes));
  CHECK(sliced.signs == whole.signs);
  check_signs(big, 64, sliced.signs);
  const Rss3DcfCost model = rss3_dcf_cost(64, big.size(), slice_bytes);
  CHECK(whole.cost.rounds == 2);
  CHECK(model.rounds == 2 + 2 * 6);  // 13 slices: the first pair, then six more pairs
  CHECK(sliced.cost.rounds == model.rounds);
  CHECK(sliced.cost.bytes == model.bytes);
  CHECK(sliced.dealt == model.dealt);
  // The keys are the same bytes; each of the pair acknowledges 11 slices.
  CHECK(sliced.cost.bytes[0] == whole.cost.bytes[0] + 11);
  // Part stored, the rest in slices.
  const Measured mixed = measure(big, 64, 300, offline_options(64 * megabyte, slice_bytes));
  CHECK(mixed.signs == whole.signs);
  CHECK(mixed.stats[2].from_store == 300);
  CHECK(mixed.cost.rounds == 2 + 2 * 3);  // 495 inline: 8 slices
}

TEST_CASE("rss3 offline: concurrent calls take stored correlations in whatever order the dealer picks") {
  // Two calls at once on forks, and a third after them: the pair may reach
  // the calls in different orders; the dealer's header says which
  // correlations each call uses.
  const RingTensor x = random_ring({300}, 21), y = random_ring({200}, 22);
  auto run = mpcache::testing::run_rss3(
      [&](Rss3& p) -> Task<std::array<RingTensor, 3>> {
        auto sx = co_await share_of(p, 0, x);
        auto sy = co_await share_of(p, 1, y);
        Rss3 f = p.fork(), g = p.fork();
        auto [bx, by] = co_await when_all(f.msb_bits(sx, 40), g.msb_bits(sy, 40));
        const Rss3Bits again = co_await p.msb_bits(sx, 40);
        co_return std::array<RingTensor, 3>{co_await p.reveal_bits(bx), co_await p.reveal_bits(by),
                                            co_await p.reveal_bits(again)};
      },
      offline_options(64 * megabyte));
  // (run_rss3 gives no hook before the calls, so this run is dry; the
  // filled case follows with an explicit prepare.)
  check_signs(x, 40, run.results[0][0]);
  check_signs(y, 40, run.results[0][1]);
  check_signs(x, 40, run.results[0][2]);

  Scheduler scheduler;
  InProcessNetwork network(scheduler, 3);
  std::array<std::array<RingTensor, 3>, 3> out;
  std::array<Rss3DcfStats, 3> stats;
  run_parties(scheduler, network, [&](PartyId id) -> Task<void> {
    auto party = co_await Rss3Party::setup(network.endpoint(id), offline_options(64 * megabyte));
    Rss3 p = party->session();
    auto sx = co_await share_of(p, 0, x);
    auto sy = co_await share_of(p, 1, y);
    (void)co_await party->prepare_comparisons(40, 1000);
    Rss3 f = p.fork(), g = p.fork();
    auto [bx, by] = co_await when_all(f.msb_bits(sx, 40), g.msb_bits(sy, 40));
    const Rss3Bits again = co_await p.msb_bits(sx, 40);
    out[id] = {co_await p.reveal_bits(bx), co_await p.reveal_bits(by), co_await p.reveal_bits(again)};
    stats[id] = party->dcf_stats();
  });
  check_signs(x, 40, out[0][0]);
  check_signs(y, 40, out[0][1]);
  check_signs(x, 40, out[0][2]);
  std::uint64_t served = 0;
  for (const auto& s : stats) {
    CHECK(s.ran_dry == 0);
    served += s.from_store;
  }
  CHECK(served == 800);
  // Every party counted every call's elements per dealer alike.
  CHECK(stats[0].demand == stats[1].demand);
  CHECK(stats[0].demand == stats[2].demand);
}

TEST_CASE("rss3 offline: prepare_comparisons names what is wrong") {
  auto message = [](Rss3Options options, int width) {
    std::string what;
    try {
      Scheduler scheduler;
      InProcessNetwork network(scheduler, 3);
      run_parties(scheduler, network, [&](PartyId id) -> Task<void> {
        auto party = co_await Rss3Party::setup(network.endpoint(id), options);
        (void)co_await party->prepare_comparisons(width, 10);
      });
    } catch (const Error& e) {
      what = e.what();
    }
    return what;
  };
  CHECK(message(offline_options(0), 27).find("offline_budget is 0") != std::string::npos);
  CHECK(message({.insecure_seed = 1, .offline_budget = megabyte}, 27).find("comparisons are not dcf") != std::string::npos);
  CHECK(message(offline_options(megabyte), 1).find("width 1 is outside [2, 64]") != std::string::npos);
}

TEST_CASE("rss3 offline: arithmetic-output correlations are stored under their own slot, filled, partial or dry") {
  CHECK(rss3_dcf_slot(27, Rss3DcfOutput::arith) == 91);
  CHECK(rss3_dcf_slot(27, Rss3DcfOutput::bit) == 27);
  // Root 16, 26 levels of 16 + 8 bytes, the final 8, and rho or the offset 8.
  CHECK(rss3_dcf_stored_bytes(91) == 16 + 26 * 24 + 8 + 8);
  for (const int width : {2, 27, 64}) {
    const RingTensor x = signed_edges(width, 90 + static_cast<std::uint64_t>(width));  // one dealer
    for (const std::size_t prepared : {std::size_t{0}, std::size_t{100}, x.size(), std::size_t{500}}) {
      INFO("width " << width << ", prepared " << prepared);
      const Measured stored = measure(x, width, prepared, offline_options(64 * megabyte), Rss3DcfOutput::arith);
      check_signs(x, width, stored.signs);
      CHECK(stored.stats[2].from_store == std::min(prepared, x.size()));
      CHECK(stored.stats[2].inline_elements == x.size() - std::min(prepared, x.size()));
    }
  }
  // Filled: no keys online, the header and offsets from the dealer, the
  // opening and 8 bytes of resharing from each of the pair; 2 rounds.
  constexpr std::size_t n = 1000;
  const RingTensor x = random_ring({n}, 6);
  const Measured filled = measure(x, 27, n, offline_options(64 * megabyte), Rss3DcfOutput::arith);
  check_signs(x, 27, filled.signs);
  const Rss3DcfCost model =
      rss3_dcf_cost(27, n, rss3_default_dcf_slice_bytes, Rss3DcfStoreUse::filled, Rss3DcfOutput::arith);
  CHECK(filled.cost.rounds == 2);
  CHECK(filled.cost.bytes == model.bytes);
  CHECK(model.bytes == std::array<std::uint64_t, 3>{12'000, 12'000, 32 + 2 * 4 * n});
  // Offline, party 2 dealt both keys and B's offsets.
  CHECK(filled.stats[2].offline_bytes == 2 * dcf_correction_bytes(26, 64, n) + 8 * n);
  // A mixed slot is refused with the accepted ranges.
  Scheduler scheduler;
  InProcessNetwork network(scheduler, 3);
  auto errors = run_parties(scheduler, network, [&](PartyId id) -> Task<std::string> {
    auto party = co_await Rss3Party::setup(network.endpoint(id), offline_options(megabyte));
    try {
      (void)co_await party->prepare_comparisons(65, 10);
    } catch (const Error& e) {
      co_return e.what();
    }
    co_return "";
  });
  CHECK(errors[0].find("width 65 is outside [2, 64] (bit output) or [66, 128] (arithmetic, width + 64)") !=
        std::string::npos);
}
