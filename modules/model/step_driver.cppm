// The phases of a generation around its steps, once for every caller
// (generate, the decode benches): a prefill on the circuit under DCF
// comparisons, then back to the offline stores, and before each decode step
// the stores' refills, outside the step's window.
//
//   StepDriver<P> driver(p);
//   driver.before_prefill();                  // compare on the circuit, if so
//   logits = prefill(...); token = choose(logits);
//   driver.after_prefill(prompt_length);      // back to the stores
//   for (step = 0; ...; ++step) {
//     if (co_await driver.before_step(step)) restart the step's window;
//     logits = decode(...); token = choose(logits);
//   }
//
// Why on the circuit: a prefill's comparisons grow with the prompt and no
// store holds their keys, so under DCF comparisons they would be dealt
// inline, gigabytes for a prompt (our model, 80 bytes: about 1.8 GB and
// 30 s, against 71 MB and 0.56 s on the circuit), more than the rounds
// they save cost on any link. Switching back forgets the circuit's
// truncations (their shifts are not the decode's).
//
// Before decode step s: truncation pairs for it (TruncationPairsRefill:
// rss3 with Rss3Options::truncation_pairs_budget) and DCF keys into the
// dealers' stores (ComparisonStoreRefill: Rss3Options::offline_budget), from
// the last step's demand; before the first, from the prefill's per prompt
// token. After a prefill on the circuit the first step finds no keys (its
// keys were not the store's) and truncates in two rounds.
//
// The hooks are named concepts (mpcache.proto:protocol); a backend without
// them (add2, plain, ref) runs every phase as a no-op. The service's batched
// steps refill by their own demand policy per row (serve::StoreRefill).
export module mpcache.model:step_driver;
import mpcache.std;
import mpcache.async;
import mpcache.proto;

export namespace mpcache {

// Which prefills compare on the circuit (CircuitComparisonsOption backends).
enum class CircuitPrefill {
  under_dcf,    // whenever comparisons are DCF, with or without a store (generate, the service)
  under_store,  // only with an offline store of DCF keys (the decode benches' runs)
};

// Which store a decode step's refills fill first. Costs are the same either
// way, but the parties' round clocks at the step's start are not (a dealer
// sends, the others receive), so the operator a step's rounds are charged to
// may differ: the paper presets' committed rows were made comparisons first.
enum class RefillOrder { pairs_first, comparisons_first };

template <Protocol P>
class StepDriver {
 public:
  // How the DCF stores are topped up before decode step `step` (0-based),
  // collectively at every party: `steps_behind` is how many steps the demand
  // since the last refill covers (before step 0: the prefill's prompt
  // tokens). Returns whether the party did (or may have done) offline work.
  using ComparisonRefill = std::function<Task<bool>(P& p, std::size_t step, std::size_t steps_behind)>;

  struct Options {
    CircuitPrefill circuit_prefill = CircuitPrefill::under_dcf;
    // Rss3::refill_truncation_pairs' multiple for calls with no plan key.
    std::size_t pairs_multiple = 16;
    // Empty: the backend's own policy (ComparisonStoreRefill: per slot the
    // most any dealer compared since the last refill, per step, + 5% + 64).
    ComparisonRefill refill_comparisons = {};
    RefillOrder order = RefillOrder::pairs_first;
  };

  explicit StepDriver(P& p) : StepDriver(p, Options{}) {}
  StepDriver(P& p, Options options) : p_(&p), options_(std::move(options)) {}

  // Before the prefill (or a policy's look at a prepared cache): under DCF
  // comparisons (or only with a store: Options::circuit_prefill) this
  // stream, and forks made from now on, compare on the circuit.
  void before_prefill() {
    if constexpr (CircuitComparisonsOption<P>) {
      if constexpr (DcfStoreCostsOption<P>)
        on_circuit_ = options_.circuit_prefill == CircuitPrefill::under_store ? p_->dcf_store() : p_->dcf_comparisons();
      else
        on_circuit_ = options_.circuit_prefill == CircuitPrefill::under_dcf && p_->dcf_comparisons();
      if (on_circuit_) p_->compare_on_circuit(true);
    }
  }

  // After the prefill's token choice: back to the stores. `prompt_tokens`:
  // the prefill's tokens, whose demand per token stands in for the first
  // decode step's; 0 where no prefill ran (a prepared cache): no refill
  // before the first step.
  void after_prefill(std::size_t prompt_tokens) {
    prompt_tokens_ = prompt_tokens;
    if constexpr (CircuitComparisonsOption<P>)
      if (on_circuit_) p_->compare_on_circuit(false);
    on_circuit_ = false;
  }

  // Offline, at a quiet point before decode step `step` (0-based): the
  // truncation pairs' refill and the DCF stores' (Options::order). Returns
  // whether any offline work may have run, so that the caller restarts the
  // step's timing window after it.
  Task<bool> before_step(std::size_t step) {
    if (step == 0 && prompt_tokens_ == 0) co_return false;
    const std::size_t steps_behind = step == 0 ? prompt_tokens_ : 1;
    bool offline = false;
    if (options_.order == RefillOrder::comparisons_first) offline = co_await refill_comparisons(step, steps_behind);
    offline = co_await refill_pairs(steps_behind) || offline;
    if (options_.order == RefillOrder::pairs_first) offline = co_await refill_comparisons(step, steps_behind) || offline;
    co_return offline;
  }

  // Whether the prefill compares on the circuit (between before_prefill
  // and after_prefill).
  bool prefill_on_circuit() const noexcept { return on_circuit_; }

 private:
  Task<bool> refill_pairs(std::size_t steps_behind) {
    if constexpr (TruncationPairsRefill<P>) co_return co_await p_->refill_truncation_pairs(options_.pairs_multiple, steps_behind);
    else co_return false;
  }
  Task<bool> refill_comparisons(std::size_t step, std::size_t steps_behind) {
    if (options_.refill_comparisons) co_return co_await options_.refill_comparisons(*p_, step, steps_behind);
    if constexpr (ComparisonStoreRefill<P>) co_return co_await p_->refill_comparisons(steps_behind);
    else co_return false;
  }

  P* p_;
  Options options_;
  bool on_circuit_ = false;
  std::size_t prompt_tokens_ = 0;
};

}  // namespace mpcache
