// The public draft model (see modules/model/draft_model.cppm): compiled
// into mpcache-reference with the float64 decoder it runs.
module mpcache.model;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import mpcache.kv;

namespace mpcache {
namespace {

class ModelDraftState {
 public:
  // The checkpoint in `dir` (config.json, model.safetensors); `target_vocab`:
  // the private model's vocabulary (drafts must be token ids of it).
  ModelDraftState(const std::filesystem::path& dir, std::size_t target_vocab)
      : config_(ModelConfig::from_json_file(dir / "config.json")), target_vocab_(target_vocab) {
    weights_ = std::make_unique<DecoderWeights<Ref>>(
        sync_wait(scheduler_, load_decoder(p_, config_, weights_from_file(dir / "model.safetensors", UnusedTensors::allow))));
  }
  ModelDraftState(const ModelDraftState&) = delete;
  ModelDraftState& operator=(const ModelDraftState&) = delete;

  std::vector<std::uint32_t> draft(std::span<const std::uint32_t> context, std::size_t count) {
    std::vector<std::uint32_t> out;
    if (feed(context)) {
      Decoder<Ref> ahead = *decoder_;  // the drafts leave the kept cache as it is
      auto policy = full_cache();
      std::vector<double> logits = last_logits_;
      while (out.size() < count) {
        const auto next = static_cast<std::uint32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
        if (next >= target_vocab_) break;
        out.push_back(next);
        if (out.size() == count || context.size() + out.size() >= config_.max_positions) break;
        logits = last_row(sync_wait(scheduler_, ahead.decode(p_, policy, 0, next)));
      }
    }
    return detail::draft_by(context, count, [&, at = std::size_t{0}](const std::vector<std::uint32_t>&) mutable {
      return at < out.size() ? std::optional<std::uint32_t>(out[at++]) : std::nullopt;
    });
  }

 private:
  // Brings the kept cache to `context` (false: the draft model cannot read
  // it: a token outside its vocabulary, or longer than its positions).
  bool feed(std::span<const std::uint32_t> context) {
    if (context.empty() || context.size() >= config_.max_positions) return false;
    for (const std::uint32_t t : context)
      if (t >= config_.vocab_size) return false;
    const bool extends = decoder_ && fed_.size() <= context.size() && std::equal(fed_.begin(), fed_.end(), context.begin());
    if (!extends) {
      decoder_ = std::make_unique<Decoder<Ref>>(*weights_);
      fed_.assign(context.begin(), context.end());
      last_logits_ = last_row(sync_wait(scheduler_, decoder_->prefill(p_, policy_, 0, fed_, fed_.size())));
      return true;
    }
    for (std::size_t i = fed_.size(); i < context.size(); ++i) {
      last_logits_ = last_row(sync_wait(scheduler_, decoder_->decode(p_, policy_, 0, context[i])));
      fed_.push_back(context[i]);
    }
    return true;
  }
  // The decoder is compiled for AnyPolicy (src/model/instantiate_*.cpp).
  static kv::AnyPolicy<Ref> full_cache() { return kv::make_policy<Ref>("full", 0); }
  std::vector<double> last_row(const Ref::Share& logits) const {
    const RealTensor r = p_.to_real(logits);
    const std::size_t rows = r.shape()[0], v = r.shape()[1];
    return {r.data() + (rows - 1) * v, r.data() + rows * v};
  }

  Scheduler scheduler_;  // its own: the float64 model has no peer to wait for
  Ref p_;
  ModelConfig config_;
  std::size_t target_vocab_;
  std::unique_ptr<DecoderWeights<Ref>> weights_;
  std::unique_ptr<Decoder<Ref>> decoder_;  // over fed_
  kv::AnyPolicy<Ref> policy_ = full_cache();
  std::vector<std::uint32_t> fed_;
  std::vector<double> last_logits_;  // after fed_'s last token
};

}  // namespace

Drafter model_drafter(const std::filesystem::path& dir, std::size_t target_vocab) {
  auto state = make_shared<ModelDraftState>(dir, target_vocab);  // unqualified: std.cppm
  return [state](std::span<const std::uint32_t> context, std::size_t count) { return state->draft(context, count); };
}

}  // namespace mpcache
