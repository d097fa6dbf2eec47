// mpcache-bench --preset paper-fig10 | paper-fig11 | paper-fig13 | paper-table8 | gpt2-512 | long-context
// The paper's decode benchmarks at real model shapes (its Section 5.3,
// Figures 10 and 11, Appendix Table 8), under rss3 or add2 (--protocol;
// paper-fig13 is Figure 13's 2PC comparison: fig10's arms under add2), with
// random weights of the named shape and a per-operator breakdown of every
// row.
//
// How a row is measured (each row says so in its fields):
//  * The three parties run in this process ("parties":"in-process"). model_s
//    is a model, not a measurement: rounds x RTT + the busiest party's
//    bytes / bandwidth on the paper's LAN (0.3 ms, 377 MB/s) + this
//    process's wall time / 3 (the three parties compute one after another
//    on one thread, so a third of it is one party's compute). model_wan_s
//    is the same on the paper's WAN (40 ms, 300 Mbit/s).
//  * add2: rounds and bytes are the online parties' (0 and 1); the
//    dealer's bytes are "offline_bytes". Its compute is inside the wall
//    time, so model_s overstates add2's online time by up to a third.
//  * Layers are tied (tie_layers): every layer runs with one set of random
//    weights, so a 32-layer model needs one layer's memory. MPC costs do not
//    depend on values.
//  * "cache":"prefill": a real prefill of random token ids builds the KV
//    cache and the policy state (its row is "phase":"prefill").
//    "cache":"prepared": the cache holds random shares of the stated length
//    and the policy looks at it as after a prefill, with zero attention
//    weights for static eviction ("phase":"policy-prefill": the eviction's
//    own cost). Selection correctness is tested elsewhere; costs here do not
//    depend on values.
//  * Decode rows: per-token cost = one decode step + the argmax choosing the
//    next token; "steady" = mean over the steps after the first (LongCache
//    normalises the whole cache at its first step; the first step is its own
//    field).
//  * Breakdown: every message is tagged with the operator that sent it
//    (CostTag); rounds are charged to the tag of the message that advanced
//    the critical path, bytes to the sender's tag, compute to the tag whose
//    round ended the wait. Its model_s shares sum to the row's.
//  * Peak RSS: this process's peak (all three parties) over the run, reset
//    before each run; per party = a third of it.
//  * "comparisons" (--comparisons, a list run side by side): circuit (the
//    default), dcf (keys dealt inline: add2's dealer, or under rss3 the
//    party outside each pair) or dcf+offline (rss3: before each decode step
//    the parties fill their stores from the previous step's demand, within
//    --offline-budget, outside the step's window; the first step has no
//    previous one and runs dry; the prefill, or the policy's look at a
//    prepared cache, compares on the circuit, as generate_party does).
//    Store rows add the offline bytes (busiest dealer) and seconds
//    (slowest party) per token and the parts that ran dry.
//  * "truncation" (--truncation): probabilistic (the default, as the paper),
//    exact, or exact+offline (rss3: truncation pairs made after a real
//    prefill from its demand per prompt token, and before each decode step
//    from the previous one's; their bytes and seconds join the offline
//    fields, "pairs_ran_dry" and "pairs_two_round_elements" say what they
//    did not cover).
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <fstream>
#include <iostream>
#include <malloc.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
import mpcache;
#include "breakdown_svg.hpp"
#include "computed.hpp"
#include "dcf_store.hpp"
#include "protocol_mode_flags.hpp"
#include "paper_plan.hpp"
#include "fidelity_common.hpp"

namespace mpcache::bench {
namespace {
using namespace paper;

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;


// Costs of one phase at every party.
struct Mark {
  std::array<CostCounters, 3> costs;
  std::array<Clock::time_point, 3> time;
  std::array<Rss3DcfStats, 3> dcf;  // rss3
  std::array<Rss3TruncationStats, 3> pairs;  // rss3
};

struct Phase {
  std::uint64_t rounds = 0, bytes = 0;  // critical path; busiest online party's payload bytes
  std::uint64_t offline_bytes = 0;      // add2: what the dealer sent; rss3 store: the busiest dealer's before it
  double offline_s = 0;                 // rss3 store: the slowest party's prepare_comparisons before it
  std::uint64_t ran_dry = 0;            // rss3 store: deals it could not fully serve
  std::uint64_t pairs_ran_dry = 0;      // rss3 exact+offline: truncation pairs asked for and not held
  std::uint64_t pairs_two_round = 0;    // ... elements of fused truncations that took two rounds
  double wall_s = 0;                    // first party in to last party out
  std::array<TaggedCost, cost_tag_count> tags{};

  double model_s() const { return lan_link().seconds(double(rounds), double(bytes)) + wall_s / 3; }
  // The same on the paper's WAN (40 ms, 300 Mbit/s), where rounds dominate.
  double model_wan_s() const { return wan_link().seconds(double(rounds), double(bytes)) + wall_s / 3; }
};

// The parties' costs from mark `a` to mark `b`, merged (merge_party_costs).
// online: the parties whose costs count (3 under rss3; 2 under add2, whose
// dealer, party 2, works offline and runs ahead: its marks would stretch the
// window). All three run in this process: their marks share one clock.
Phase merged_phase(const Mark& a, const Mark& b, std::size_t online = 3) {
  std::array<PartyCost, 3> parties;
  auto since_a = [&a](Clock::time_point t) { return std::chrono::duration<double>(t - a.time[0]).count(); };
  for (std::size_t i = 0; i < 3; ++i) {
    parties[i] = party_cost_between(a.costs[i], b.costs[i]);
    parties[i].start_s = since_a(a.time[i]);
    parties[i].end_s = since_a(b.time[i]);
    parties[i].offline = i >= online;
  }
  const MergedCost m = merge_party_costs(parties);
  // Per operator, rounds and compute are the median party's view, which
  // need not sum to the critical path (the row says by how much:
  // rounds_unattributed).
  Phase ph;
  ph.rounds = m.rounds;
  ph.bytes = m.bytes_max_party;
  ph.offline_bytes = m.offline_bytes;
  ph.wall_s = m.latency_s;
  ph.tags = m.by_tag;
  return ph;
}

// Mean of phases (steady decode steps).
Phase mean(const std::vector<Phase>& phases) {
  Phase m;
  if (phases.empty()) return m;
  const double n = double(phases.size());
  double rounds = 0, bytes = 0, offline = 0, dry = 0, pairs_dry = 0, two_round = 0;
  std::array<double, cost_tag_count> tr{}, tb{};
  for (const auto& p : phases) {
    rounds += double(p.rounds), bytes += double(p.bytes), m.wall_s += p.wall_s / n;
    offline += double(p.offline_bytes), dry += double(p.ran_dry), m.offline_s += p.offline_s / n;
    pairs_dry += double(p.pairs_ran_dry), two_round += double(p.pairs_two_round);
    for (std::size_t t = 0; t < cost_tag_count; ++t) {
      tr[t] += double(p.tags[t].rounds), tb[t] += double(p.tags[t].payload_bytes_sent);
      m.tags[t].seconds += p.tags[t].seconds / n;
    }
  }
  m.rounds = std::uint64_t(std::llround(rounds / n));
  m.bytes = std::uint64_t(std::llround(bytes / n));
  m.offline_bytes = std::uint64_t(std::llround(offline / n));
  m.ran_dry = std::uint64_t(std::llround(dry / n));
  m.pairs_ran_dry = std::uint64_t(std::llround(pairs_dry / n));
  m.pairs_two_round = std::uint64_t(std::llround(two_round / n));
  for (std::size_t t = 0; t < cost_tag_count; ++t) {
    m.tags[t].rounds = std::uint64_t(std::llround(tr[t] / n));
    m.tags[t].payload_bytes_sent = std::uint64_t(std::llround(tb[t] / n));
  }
  return m;
}

// Per operator: rounds, bytes, model_s (its rounds and bytes on the LAN plus
// a third of its compute) and its share of the sum; model_wan_s and
// wan_share the same on the WAN, where rounds weigh 133 times more.
json breakdown(const Phase& ph) {
  json out = json::object();
  double total = 0, total_wan = 0;
  std::array<double, cost_tag_count> s{}, wan{};
  for (std::size_t t = 0; t < cost_tag_count; ++t) {
    const double rounds = double(ph.tags[t].rounds), bytes = double(ph.tags[t].payload_bytes_sent);
    s[t] = lan_link().seconds(rounds, bytes) + ph.tags[t].seconds / 3;
    wan[t] = wan_link().seconds(rounds, bytes) + ph.tags[t].seconds / 3;
    total += s[t];
    total_wan += wan[t];
  }
  for (std::size_t t = 0; t < cost_tag_count; ++t) {
    const auto& c = ph.tags[t];
    if (c.rounds == 0 && c.payload_bytes_sent == 0 && c.seconds < 1e-4) continue;
    out[std::string(cost_tag_name(static_cast<CostTag>(t)))] = {
        {"rounds", c.rounds}, {"bytes", c.payload_bytes_sent}, {"model_s", s[t]},
        {"share", total > 0 ? s[t] / total : 0.0}, {"model_wan_s", wan[t]},
        {"wan_share", total_wan > 0 ? wan[t] / total_wan : 0.0}};
  }
  return out;
}

// store: rss3's offline store or truncation pairs were on (its seconds and
// dry parts are fields); pairs: the truncation pairs were (theirs too).
json phase_json(const Phase& ph, bool store, bool pairs) {
  std::int64_t attributed = 0;
  for (const auto& t : ph.tags) attributed += std::int64_t(t.rounds);
  json out = {{"latency_s", ph.wall_s}, {"model_s", ph.model_s()}, {"model_wan_s", ph.model_wan_s()},
              {"bytes_per_party", ph.bytes}, {"offline_bytes", ph.offline_bytes},
              {"rounds", ph.rounds}, {"rounds_unattributed", std::int64_t(ph.rounds) - attributed},
              {"breakdown", breakdown(ph)}};
  if (store || pairs) out.update({{"offline_s", ph.offline_s}, {"ran_dry", ph.ran_dry}});
  if (pairs) out.update({{"pairs_ran_dry", ph.pairs_ran_dry}, {"pairs_two_round_elements", ph.pairs_two_round}});
  return out;
}

// What rss3's stores (DCF keys and truncation pairs) did in a phase: dealt
// ahead between `filled_from` and `a` (before the phase), ran dry between `a`
// and `b`. Offline bytes and seconds: each party's keys and pairs together,
// the busiest party's.
void add_store(Phase& ph, const Mark& filled_from, const Mark& a, const Mark& b) {
  for (std::size_t i = 0; i < 3; ++i) {
    ph.offline_bytes = std::max(ph.offline_bytes, a.dcf[i].offline_bytes - filled_from.dcf[i].offline_bytes +
                                                      a.pairs[i].offline_bytes - filled_from.pairs[i].offline_bytes);
    ph.offline_s = std::max(ph.offline_s, a.dcf[i].offline_seconds - filled_from.dcf[i].offline_seconds +
                                              a.pairs[i].offline_seconds - filled_from.pairs[i].offline_seconds);
    ph.ran_dry += b.dcf[i].ran_dry - a.dcf[i].ran_dry;
  }
  // Party 0 counts the pairs' grants; every party truncates the same elements.
  ph.pairs_ran_dry = b.pairs[0].ran_dry - a.pairs[0].ran_dry;
  ph.pairs_two_round = b.pairs[0].two_round - a.pairs[0].two_round;
}

// Peak RSS of this process: VmHWM, reset by writing 5 to clear_refs. The
// previous arm's freed memory goes back to the system first (malloc_trim):
// otherwise glibc keeps it in its arenas, and an arm after a larger one
// would report the larger one's footprint as its own peak.
void reset_peak_rss() {
  malloc_trim(0);
  std::ofstream("/proc/self/clear_refs") << "5";
}
std::uint64_t peak_rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  return 0;
}

// Party 0's KV cache after the last step: what the decoder holds, what the
// policy holds (if it counts it) and what it keeps in its backing file.
struct KvBytes {
  std::size_t decoder = 0;
  std::optional<std::size_t> policy;
  std::size_t backing = 0;
};

template <Protocol P, class Pol>
KvBytes kv_bytes(const Decoder<P>& decoder, const Pol& policy) {
  return {decoder.cache_bytes(), kv::OptionalMembers<P>::resident_bytes(policy),
          kv::OptionalMembers<P>::backing_bytes(policy)};
}

// Party `id`'s side of one run: weights, the prompt (a real prefill, or a
// prepared cache and the policy's look at it), then the decode steps.
// Decode step s runs from starts[s] to ends[s]; between_steps(s), for s >= 1,
// runs between ends[s - 1] and starts[s] (offline work, in neither), and so
// do the truncation pairs' refills (rss3 exact+offline; after a real prefill
// from its demand per prompt token, a prepared cache's first step has none).
template <Protocol P, class Pol>
Task<void> party(const Run& r, P& p, PartyId id, Pol& policy, std::function<void(Mark&)> mark, Mark& start,
                 Mark& prefilled, std::vector<Mark>& starts, std::vector<Mark>& ends,
                 const std::function<Task<void>(std::size_t)>& between_steps, KvBytes& kv) {
  const std::size_t kvh = r.config.num_kv_heads, d = r.config.head_dim, group = r.config.num_heads / kvh;
  ModelConfig one = r.config;
  one.num_layers = 1;
  auto weights = tie_layers(co_await load_decoder(p, one, id == 1 ? random_weights(5) : no_weights(), 1),
                            r.config.num_layers);
  Decoder<P> decoder(weights, DecoderOptions{r.memory_budget, PrefillLogits::last});  // next_token reads the last
  // The phases as generate_party's (StepDriver): under an offline store of
  // DCF keys the prefill (or the policy's look at a prepared cache) compares
  // on the circuit, since no store holds its keys; before each decode step
  // the truncation pairs for this session and its forks (from the demand
  // since the last refill; before the first, a real prefill's per prompt
  // token), after between_steps(s) filled the stores (from step s >= 1;
  // comparisons first, as the committed rows were made).
  typename StepDriver<P>::Options driver_options{.circuit_prefill = CircuitPrefill::under_store,
                                                 .order = RefillOrder::comparisons_first};
  driver_options.refill_comparisons = [&between_steps](P&, std::size_t s, std::size_t) -> Task<bool> {
    if (s == 0) co_return false;
    co_await between_steps(s);
    co_return true;
  };
  StepDriver<P> driver(p, std::move(driver_options));
  driver.before_prefill();
  if (r.real_prefill) {
    std::optional<std::vector<std::uint32_t>> prompt;
    if (id == 0) {
      prompt.emplace();
      for (std::size_t i = 0; i < r.length; ++i) prompt->push_back(std::uint32_t((i * 7919 + 13) % r.config.vocab_size));
    }
    mark(start);
    auto logits = co_await decoder.prefill(p, policy, 0, std::move(prompt), r.length);
    (void)co_await p.reveal_to(0, co_await next_token(p, logits));
    mark(prefilled);
    driver.after_prefill(std::max<std::size_t>(r.length, 1));
  } else {
    // Random shares of the stated length; every layer and head holds the
    // same shares (values do not change costs; memory is the cache's).
    // Uniform in [-1, 1) (standard deviation 1/sqrt(3)), the owner's only.
    const WeightSource values = id == 0 ? random_weights(9, 1 / std::sqrt(3.0)) : no_weights();
    // A prepared cache stands for keys and values the model computed.
    auto secret = [&](const Shape& shape) -> Task<typename P::Share> {
      co_return jobs::computed<P>(co_await ops::secret_real(p, 0, values("prepared-cache", shape), shape));
    };
    // The decoder's cache is built in place: every layer's heads are
    // copies of one head's shares, made straight into the decoder's
    // storage (no second cache of the prompt beside it).
    auto whole_prompt = [&](const kv::HeadCache<P>& head) {
      std::vector<std::vector<kv::HeadCache<P>>> cache;
      cache.reserve(r.config.num_layers);
      for (std::size_t l = 0; l < r.config.num_layers; ++l) cache.emplace_back(kvh, head);
      return cache;
    };
    constexpr bool is_mpcache = std::is_same_v<Pol, kv::MpCache<P>>;
    bool state_prepared = false;
    if constexpr (is_mpcache) {
      if (r.length > r.evict_up_to) {
        // The state static eviction leaves, prepared: kept rows of random
        // shares at positions 0..keep-1; summaries computed and counted.
        // MPCache keeps its own cache (owns_cache): the decoder holds only
        // the prompt's last row, as after a prefill.
        kv::HeadCache<P> last{co_await secret({1, d}), co_await secret({1, d}), r.length - 1};
        decoder.start_from_cache(policy, whole_prompt(last), r.length);
        const std::size_t keep = policy.kept_tokens(r.length);
        const std::vector<kv::HeadCache<P>> kept(kvh, {co_await secret({keep, d}), co_await secret({keep, d})});
        RingTensor iota = RingTensor::from_shape({keep});
        for (std::size_t i = 0; i < keep; ++i) iota(i) = i;
        const std::vector<typename P::Share> positions(kvh, ops::public_share(p, kept[0].keys, iota));
        mark(start);
        for (std::size_t l = 0; l < r.config.num_layers; ++l) co_await policy.start_evicted(p, l, r.length, kept, positions);
        mark(prefilled);
        state_prepared = true;
      }
    }
    if (state_prepared) {
      // done above
    } else if constexpr (is_mpcache || std::is_same_v<Pol, kv::AnyPolicy<P>>) {
      // The policy's look at the prompt for real, over zero attention
      // weights: MPCache's static eviction, or any policy named in --policies.
      const kv::HeadCache<P> head{co_await secret({r.length, d}), co_await secret({r.length, d})};
      decoder.start_from_cache(policy, whole_prompt(head), r.length);
      const std::vector<typename P::Share> probs(
          kvh, ops::public_share(p, head.keys, ring_zeros({group * r.length, r.length})));
      mark(start);
      for (std::size_t l = 0; l < r.config.num_layers; ++l) {
        kv::PrefillView<P> view{l, r.length, group, &probs, &decoder.cache()[l]};
        auto scope = cost_scope(p, CostTag::eviction);
        co_await policy.after_prefill(p, view);
      }
      decoder.release_taken_prompt(policy);  // a policy that keeps its own cache took the rows
      mark(prefilled);
    } else {
      const kv::HeadCache<P> head{co_await secret({r.length, d}), co_await secret({r.length, d})};
      decoder.start_from_cache(policy, whole_prompt(head), r.length);
      mark(start);  // full cache, LongCache: nothing to look at
      mark(prefilled);
    }
  }
  if (!r.real_prefill) driver.after_prefill(0);  // a prepared cache: no refill before the first step
  if (!r.decode) co_return;
  std::uint32_t token = 1;
  for (std::size_t s = 0; s < r.steps; ++s) {
    (void)co_await driver.before_step(s);
    mark(starts[s]);
    auto out = co_await decoder.decode(p, policy, 0, id == 0 ? std::optional(token) : std::nullopt);
    auto chosen = co_await p.reveal_to(0, co_await next_token(p, out));
    if (chosen) token = static_cast<std::uint32_t>((*chosen)(0, 0));
    mark(ends[s]);
  }
  if (id == 0) kv = kv_bytes(decoder, policy);
}

// What every row of a run says about it: preset, model, policy, budget,
// how its cache was made, where the parties ran, peak memory.
json run_header(const Run& r) {
  const std::uint64_t rss = peak_rss_bytes();
  const bool evicts = r.arm.options.keep_ratio < 1.0;
  json row = {{"preset", r.preset},
          {"protocol", protocol_backend_name(r.mode.backend)},
          {"model", r.model},
          {"layers", r.config.num_layers},
          {"hidden", r.config.hidden_size},
          {"heads", r.config.num_heads},
          {"length", r.length},
          {"policy", r.arm.policy},
          {"arm", r.arm.label},
          {"budget_tokens", r.arm.policy == "full" ? r.length : budget_tokens_of(r)},
          {"cache", r.real_prefill                                          ? "prefill"
                    : r.arm.policy == "full" || r.arm.policy == "longcache" ? "prepared"
                    : r.arm.policy != "mpcache"                             ? "prepared, the policy's look at zero attention"
                    : !evicts                                               ? "prepared, no static eviction"
                    : r.length <= r.evict_up_to                             ? "prepared, static eviction run"
                                                                            : "prepared, eviction state prepared (not run)"},
          {"parties", r.add2() ? "in-process, 2 online + dealer" : "in-process"},
          {"model_s_is", "model: rounds x 0.3 ms + bytes / 377 MB/s + wall / 3"},
          {"threads", r.threads},
          {"compact_weights", r.compact_weights},
          {"comparisons", comparisons_name(r.mode.comparisons)},
          {"truncation", truncation_name(r.mode.truncation)},
          {"peak_rss_process_bytes", rss},
          {"peak_rss_per_party_bytes", rss / 3}};
  if (r.arm.policy == "mpcache") {
    const auto& o = r.arm.options;
    row["mpcache_options"] = {{"keep_ratio", o.keep_ratio},
                              {"cluster", o.cluster},
                              {"similarity", o.similarity == kv::Similarity::bound    ? "bound"
                                             : o.similarity == kv::Similarity::linear ? "linear"
                                                                                      : "elementwise"},
                              {"share_layers", o.share_layers},
                              {"hierarchical", o.hierarchical},
                              {"flat_up_to", o.flat_up_to},
                              {"rank_ahead", o.rank_ahead},
                              {"coarse_ratio", o.coarse_ratio}};
  }
  return row;
}

std::vector<json> measure(const Run& r) {
  reset_peak_rss();
  // The three parties run one after another on this thread, so they can
  // share one pool: each has all its threads while it computes.
  std::optional<ComputePool> pool;
  if (r.threads > 1) pool.emplace(r.threads);
  ComputePool* const pool_ptr = pool ? &*pool : nullptr;
  Scheduler scheduler;
  InProcessNetwork network(scheduler, 3);
  Mark start, prefilled;
  std::vector<Mark> starts(r.steps), ends(r.steps);
  KvBytes kv;
  run_parties(scheduler, network, [&](PartyId id) -> Task<void> {
    Rss3Party* rss3 = nullptr;
    auto mark = [&network, id, &rss3](Mark& m) {
      m.costs[id] = network.endpoint(id).costs();
      m.time[id] = Clock::now();
      if (rss3) m.dcf[id] = rss3->dcf_stats(), m.pairs[id] = rss3->truncation_stats();
    };
    // Fill the stores for step s from step s - 1's demand.
    const std::function<Task<void>(std::size_t)> between_steps = [&, id](std::size_t s) -> Task<void> {
      if (rss3 && r.store()) co_await fill_for_next_step(*rss3, starts[s - 1].dcf[id], ends[s - 1].dcf[id]);
    };
    auto arm = [&]<Protocol P>(P& p) -> Task<void> {
      const std::size_t budget = budget_tokens_of(r);
      if (r.arm.policy == "full") {
        kv::FullCache<P> policy;
        co_await party(r, p, id, policy, mark, start, prefilled, starts, ends, between_steps, kv);
      } else if (r.arm.policy == "longcache") {
        kv::LongCache<P> policy(budget);
        co_await party(r, p, id, policy, mark, start, prefilled, starts, ends, between_steps, kv);
      } else if (r.arm.policy == "mpcache") {
        kv::MpCache<P> policy(budget, r.arm.options);
        co_await party(r, p, id, policy, mark, start, prefilled, starts, ends, between_steps, kv);
      } else if (const auto variant = mpcache_variant(r.arm.policy)) {  // an ablation name, as the fidelity preset's
        kv::MpCache<P> policy(budget, *variant);
        co_await party(r, p, id, policy, mark, start, prefilled, starts, ends, between_steps, kv);
      } else {
        auto policy = kv::make_policy<P>(r.arm.policy, budget);
        co_await party(r, p, id, policy, mark, start, prefilled, starts, ends, between_steps, kv);
      }
    };
    if (r.add2()) {
      auto state = co_await Add2Party::setup(network.endpoint(id), r.mode.add2({.insecure_seed = 11, .pool = pool_ptr}));
      Add2 p = state->session();
      co_await arm(p);
    } else {
      auto state = co_await Rss3Party::setup(
          network.endpoint(id),
          r.mode.rss3({.insecure_seed = 11, .pool = pool_ptr, .compact_weights = r.compact_weights}));
      rss3 = state.get();
      Rss3 p = state->session();
      co_await arm(p);
      rss3 = nullptr;
    }
  });
  const std::size_t online = r.add2() ? 2 : 3;
  const json base = run_header(r);
  std::vector<json> rows;
  json pre = base;
  pre["phase"] = r.real_prefill ? "prefill" : "policy-prefill";  // prepared: the policy's look at the prompt
  Phase prefill = merged_phase(start, prefilled, online);
  if (r.store() || r.pairs()) add_store(prefill, start, start, prefilled);
  pre.update(phase_json(prefill, r.store(), r.pairs()));
  rows.push_back(pre);
  if (r.decode) {
    std::vector<Phase> each;
    for (std::size_t s = 0; s < r.steps; ++s) {
      each.push_back(merged_phase(starts[s], ends[s], online));
      if (r.store() || r.pairs())
        add_store(each.back(), s > 0 ? ends[s - 1] : prefilled, starts[s], ends[s]);
    }
    json dec = base;
    dec["phase"] = "decode";
    dec["steps"] = r.steps;
    const std::vector<Phase> steady(each.begin() + (each.size() > 1 ? 1 : 0), each.end());
    dec.update(phase_json(mean(steady), r.store(), r.pairs()));
    dec["first_step"] = {{"rounds", each[0].rounds},
                         {"bytes_per_party", each[0].bytes},
                         {"model_s", each[0].model_s()},
                         {"model_wan_s", each[0].model_wan_s()}};
    json per_step = json::array();
    for (const auto& ph : each) per_step.push_back({{"rounds", ph.rounds}, {"bytes_per_party", ph.bytes}, {"latency_s", ph.wall_s}});
    dec["per_step"] = per_step;
    dec["kv_decoder_bytes_per_party"] = kv.decoder;  // after the last step
    if (kv.policy) dec["kv_policy_bytes_per_party"] = *kv.policy;
    dec["kv_backing_bytes_per_party"] = kv.backing;
    rows.push_back(dec);
  }
  return rows;
}

}  // namespace

int paper_main(int argc, char** argv) {
  CLI::App app{"The paper's decode benchmarks at real model shapes (rss3 or add2, in-process)"};
  Settings s;
  app.add_option("--preset", s.preset)->required()->check(
      CLI::IsMember({"paper-fig10", "paper-fig11", "paper-fig13", "paper-table8", "gpt2-512", "long-context"}));
  app.add_option("--out", s.out_dir, "write <preset>.jsonl and <preset>.svg here");
  app.add_option("--lengths", s.lengths, "sequence lengths (default: the preset's)")->delimiter(',');
  app.add_option("--layers", s.layers, "override the layer count (smoke runs)")->check(CLI::Range(1, 128));
  app.add_option("--vocab", s.vocab, "override the vocabulary size (smoke runs)")->check(CLI::Range(16, 1 << 20));
  app.add_option("--steps", s.steps, "decode steps per run; the first is reported apart")->check(CLI::Range(1, 64));
  app.add_option("--policies", s.policies,
                 "only the arms of these policies (the presets' are full, longcache and mpcache; any other policy, "
                 "or an MPCache ablation name as the fidelity preset's, runs at the preset's smallest budget)")
      ->delimiter(',')
      ->check(CLI::Validator([](std::string& name) -> std::string {
        try { check_policy_name(name); } catch (const Error& e) { return e.what(); }
        return "";
      }, "POLICY"));
  app.add_option("--evict-up-to", s.evict_up_to,
                 "prepared caches: MPCache runs static eviction up to this length; above it, its state is "
                 "prepared (eviction is quadratic in the length and not part of a decode step)");
  app.add_option("--threads", s.threads,
                 "threads of each party's compute pool (1: none, everything on the loop's thread)")
      ->check(CLI::Range(std::size_t{1}, ComputePool::max_threads));
  app.add_option("--memory-budget", s.memory_budget,
                 "a real prefill's working set per party (BYTES, or e.g. 256MB, 1GB; default " +
                     std::to_string(default_prefill_memory_budget >> 20) +
                     " MiB): query rows and the MLP's activation run in waves that fit");
  app.add_flag("--compact-weights", s.compact_weights,
               "rss3: keep 8 bytes per weight and party, drawing the other component again when used");
  s.mode.truncation = truncation_name(TruncationMode::probabilistic);
  s.mode.store_budget_mib = 256;
  // --protocol (paper-fig13 is add2 whatever it says); --comparisons, a
  // list, runs each run once per way, side by side.
  jobs::add_protocol_mode_options(app, s.mode, {.side_by_side = true});
  app.add_flag("--real-prefill", s.real_prefill,
               "long-context: prefill random token ids under MPC (the row says \"cache\":\"prefill\") instead of "
               "preparing the cache from random shares");
  add_long_context_mpcache_options(app, s);
  app.add_flag("--json", s.json_stdout, "JSON lines on stdout instead of a table");
  std::string svg_from;
  app.add_option("--svg-from", svg_from, "only (re)draw <--out>/<preset>.svg from these JSON lines (e.g. a cut-short run)");
  CLI11_PARSE(app, argc, argv);
  // long-context measures the option set we ship: exact truncation, unless asked.
  if (s.preset == "long-context" && app.count("--truncation") == 0) s.mode.truncation = truncation_name(TruncationMode::exact);
  try {
    if (!svg_from.empty()) {
      std::ifstream in(svg_from);
      if (!in) throw Error(ErrorCode::invalid_argument, "cannot read " + svg_from);
      std::vector<json> rows;
      for (std::string line; std::getline(in, line);)
        if (!line.empty()) rows.push_back(json::parse(line));
      write_breakdown_svg(std::filesystem::path(s.out_dir.empty() ? "." : s.out_dir) / (s.preset + ".svg"), s.preset, rows);
      return 0;
    }
    for (std::size_t t : s.lengths)
      if (t < 2) throw Error(ErrorCode::invalid_argument, "--lengths: a length must be at least 2");
    std::vector<json> rows;
    std::unique_ptr<std::ofstream> file;
    if (!s.out_dir.empty()) {
      const auto path = std::filesystem::path(s.out_dir) / (s.preset + ".jsonl");
      file = std::make_unique<std::ofstream>(path);
      if (!*file) throw Error(ErrorCode::invalid_argument, "cannot write " + path.string());
    }
    if (!s.json_stdout)
      std::printf("%-5s %-14s %6s %-26s %-14s %10s %10s %10s %14s %8s %14s %10s\n", "proto", "model", "length", "arm",
                  "phase", "latency_s", "model_s", "wan_s", "bytes/party", "rounds", "offline bytes", "rss/party");
    for (const Run& r : plan(s)) {
      for (auto& row : measure(r)) {
        if (file) *file << row.dump() << "\n" << std::flush;
        if (s.json_stdout) {
          std::cout << row.dump() << std::endl;
        } else {
          std::printf("%-5s %-14s %6zu %-26s %-14s %10.3f %10.3f %10.3f %14llu %8llu %14llu %8.2f GB\n",
                      protocol_backend_name(r.mode.backend), r.model.c_str(), r.length,
                      (r.arm.label +
                       (r.mode.comparisons == ComparisonMode::circuit ? "" : ", " + std::string(comparisons_name(r.mode.comparisons))) +
                       (r.mode.truncation == TruncationMode::probabilistic ? "" : ", " + std::string(truncation_name(r.mode.truncation))))
                          .c_str(),
                      row["phase"].get<std::string>().c_str(), row["latency_s"].get<double>(),
                      row["model_s"].get<double>(), row["model_wan_s"].get<double>(),
                      static_cast<unsigned long long>(row["bytes_per_party"].get<std::uint64_t>()),
                      static_cast<unsigned long long>(row["rounds"].get<std::uint64_t>()),
                      static_cast<unsigned long long>(row["offline_bytes"].get<std::uint64_t>()),
                      double(row["peak_rss_per_party_bytes"].get<std::uint64_t>()) / 1e9);
          std::fflush(stdout);
        }
        rows.push_back(std::move(row));
      }
    }
    if (!s.out_dir.empty())
      write_breakdown_svg(std::filesystem::path(s.out_dir) / (s.preset + ".svg"), s.preset, rows);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpcache-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace mpcache::bench
