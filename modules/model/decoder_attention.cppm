// The decoder's attention (members of Decoder<P>, declared in :decoder).
// Prefill: each layer's causal attention over the prompt, every KV head's
// query group at once, query rows in waves within the memory budget
// (prefill_memory.cppm), keeping the weights only when the policy reads
// them. Decode: one sequence's attention over what its policy selected,
// then the policy's look at the weights (and the step probe, if installed).
export module mpcache.model:decoder_attention;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import mpcache.ops;
import mpcache.kv;
import :prefill_memory;
import :decoder;

namespace mpcache {

// A prefill layer's attention over the prompt (the caller runs the MLP):
// every row's output, or with `last_row_out` the last row's (1, d) alone.
// The policy's look still gets every row's weights if it reads them.
template <Protocol P>
template <class Pol>
auto Decoder<P>::attention_block(P& p, Pol& policy, std::size_t layer, const Share& h_in, std::size_t count,
                                 std::vector<Share>* prefill_probs, bool last_row_out) -> Task<Share> {
  auto [qr, kr, v] = co_await project_rotated(p, layer, h_in, consecutive(length_, count));
  keep_rows(policy, layer, kr, v, /*decode=*/false);
  const auto& lw = layer_weights(layer);
  const bool policy_reads = kv::OptionalMembers<P>::reads_prefill_attention(policy, layer, count);
  std::vector<Share> outputs;
  if (last_row_out && !policy_reads) {  // one query row over the whole prompt
    outputs = co_await attention_rows(p, layer, qr, count, RowBlock{count - 1, count}, false, *prefill_probs);
    prefill_probs->clear();
  } else {
    outputs = co_await prefill_attention(p, layer, qr, count, policy_reads, *prefill_probs);
    if (last_row_out)
      for (auto& head : outputs) head = ops::rows<P>(head, count - 1, count);
  }
  const Share residual = last_row_out ? ops::rows<P>(h_in, count - 1, count) : h_in;
  co_return p.add(residual, co_await affine(p, join_heads(outputs), lw.wo, lw.bo));
}

// Per query head (count, d): each KV head's query group over the prompt,
// causal; the attention weights per KV head go to `probs` if the policy
// reads them (else it stays empty: they would be heads x T^2 shares held
// through the next layer). Query rows run in waves within the memory
// budget (prefill_memory.cppm); a prompt that fits runs as one wave.
template <Protocol P>
auto Decoder<P>::prefill_attention(P& p, std::size_t layer, const Share& qr, std::size_t count, bool keep_weights,
                                   std::vector<Share>& probs) -> Task<std::vector<Share>> {
  std::vector<RowBlock> waves{{0, count}};
  if constexpr (!ExactReals<P>)  // float64 holds no bit planes: one wave
    waves = attention_row_blocks(count, c_.num_heads, options_.prefill_memory_budget);
  if (waves.size() == 1) {
    auto outputs = co_await attention_rows(p, layer, qr, count, waves[0], keep_weights, probs);
    if (!keep_weights) probs.clear();
    co_return outputs;
  }
  const std::size_t kvh = c_.num_kv_heads, g = c_.num_heads / kvh;
  std::vector<std::vector<Share>> pieces(c_.num_heads);  // per head: each wave's (rows, d)
  std::vector<std::vector<RingTensor>> weights(kvh);     // per KV head: (g * count, count) per component
  for (const RowBlock& wave : waves) {
    std::vector<Share> wave_probs;
    auto outs = co_await attention_rows(p, layer, qr, count, wave, keep_weights, wave_probs);
    for (std::size_t hh = 0; hh < c_.num_heads; ++hh) pieces[hh].push_back(std::move(outs[hh]));
    if (keep_weights)
      for (std::size_t j = 0; j < kvh; ++j) place_wave_weights(weights[j], wave_probs[j], wave, g, count);
  }
  probs.clear();
  if (keep_weights)
    for (std::size_t j = 0; j < kvh; ++j) probs.push_back(share_from_components<P>(qr, std::move(weights[j])));
  std::vector<Share> outputs(c_.num_heads);
  for (std::size_t hh = 0; hh < c_.num_heads; ++hh) {
    outputs[hh] = pieces[hh][0];
    for (std::size_t w = 1; w < waves.size(); ++w) outputs[hh] = ops::stack_rows<P>(outputs[hh], pieces[hh][w]);
  }
  co_return outputs;
}

// One wave's weights (g * rows, wave.end) into a KV head's (g * count,
// count) components, zero where a row does not attend.
template <Protocol P>
void Decoder<P>::place_wave_weights(std::vector<RingTensor>& into, const Share& wave_probs, const RowBlock& wave,
                                    std::size_t g, std::size_t count) const {
  const std::size_t rows = wave.end - wave.begin, keys = wave.end;
  auto parts = share_components<P>(wave_probs);
  if (into.empty())
    for (std::size_t k = 0; k < parts.size(); ++k) into.push_back(ring_zeros({g * count, count}));
  for (std::size_t k = 0; k < parts.size(); ++k)
    for (std::size_t hh = 0; hh < g; ++hh)
      for (std::size_t t = 0; t < rows; ++t)
        std::copy_n(parts[k].data() + (hh * rows + t) * keys, keys,
                    into[k].data() + (hh * count + wave.begin + t) * count);
}

// Query rows `wave` of every head (rows, d), all KV heads at once (their
// messages share rounds); with `keep_weights` the wave's weights per KV
// head (g * rows, wave.end) go to `probs` (else it holds empty shares).
template <Protocol P>
auto Decoder<P>::attention_rows(P& p, std::size_t layer, const Share& qr, std::size_t count, const RowBlock& wave,
                                bool keep_weights, std::vector<Share>& probs) -> Task<std::vector<Share>> {
  const std::size_t kvh = c_.num_kv_heads, g = c_.num_heads / kvh, rows = wave.end - wave.begin;
  const bool all = rows == count;
  probs.assign(kvh, Share{});
  std::vector<P> forks;
  forks.reserve(kvh);
  for (std::size_t j = 0; j < kvh; ++j) forks.push_back(p.fork());
  auto query_rows = [&](std::size_t h) {
    auto q = head_columns(qr, h);
    return all ? q : ops::rows<P>(q, wave.begin, wave.end);
  };
  std::vector<Share> group_queries(kvh);  // (g * rows, d) each; alive while the tasks run
  std::vector<Task<Share>> tasks;
  for (std::size_t j = 0; j < kvh; ++j) {
    group_queries[j] = query_rows(j * g);
    for (std::size_t hh = 1; hh < g; ++hh) group_queries[j] = ops::stack_rows<P>(group_queries[j], query_rows(j * g + hh));
    tasks.push_back(prefill_head(forks[j], group_queries[j], cache_[layer][j], g, wave, keep_weights, probs[j]));
  }
  auto outs = co_await when_all(std::move(tasks));
  std::vector<Share> outputs(c_.num_heads);
  for (std::size_t j = 0; j < kvh; ++j)
    for (std::size_t hh = 0; hh < g; ++hh) outputs[j * g + hh] = ops::rows<P>(outs[j], hh * rows, (hh + 1) * rows);
  co_return outputs;
}

// One KV head's query group over its own prompt, query rows `wave` of
// each head: (g*rows, d) -> (g*rows, d). The wave's rows run in causal
// blocks (prefill_memory.cppm), concurrently: block [b0, b1) against keys
// [0, b1) only, so no score above the diagonal block is computed. With
// `keep_weights` the weights (g*rows, wave.end), zero where a row does not
// attend, go to `probs_out`.
template <Protocol P>
auto Decoder<P>::prefill_head(P& p, const Share& queries, const kv::HeadCache<P>& cache, std::size_t g,
                              const RowBlock& wave, bool keep_weights, Share& probs_out) -> Task<Share> {
  const std::size_t rows = wave.end - wave.begin;
  const auto blocks = causal_blocks(wave);
  // Every KV head's blocks run at once: their tournaments plan on all rows.
  const std::size_t plan_rows = c_.num_heads * rows;
  std::vector<P> forks;
  forks.reserve(blocks.size());
  for (std::size_t b = 0; b < blocks.size(); ++b) forks.push_back(p.fork());
  std::vector<Share> block_queries(blocks.size()), block_probs(blocks.size());
  std::vector<Task<Share>> tasks;
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    const std::size_t from = blocks[b].begin - wave.begin, to = blocks[b].end - wave.begin;
    block_queries[b] = ops::rows<P>(queries, from, to);
    for (std::size_t hh = 1; hh < g; ++hh)
      block_queries[b] = ops::stack_rows<P>(block_queries[b], ops::rows<P>(queries, hh * rows + from, hh * rows + to));
    tasks.push_back(prefill_block(forks[b], block_queries[b], cache, g, blocks[b], plan_rows,
                                  keep_weights ? &block_probs[b] : nullptr));
  }
  auto outs = co_await when_all(std::move(tasks));  // (g * block rows, d) each
  // Back to (g*rows, d), head by head, and the weights into (g*rows, wave.end).
  const std::size_t d = P::shape(outs.front()).back();
  std::vector<RingTensor> out_parts, prob_parts;
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    const std::size_t n = blocks[b].end - blocks[b].begin, from = blocks[b].begin - wave.begin;
    auto parts = share_components<P>(outs[b]);
    if (out_parts.empty())
      for (std::size_t k = 0; k < parts.size(); ++k) out_parts.push_back(ring_zeros({g * rows, d}));
    for (std::size_t k = 0; k < parts.size(); ++k)
      for (std::size_t hh = 0; hh < g; ++hh)
        std::copy_n(parts[k].data() + hh * n * d, n * d, out_parts[k].data() + (hh * rows + from) * d);
    if (!keep_weights) continue;
    auto weights = share_components<P>(block_probs[b]);  // (g * n, blocks[b].end)
    if (prob_parts.empty())
      for (std::size_t k = 0; k < weights.size(); ++k) prob_parts.push_back(ring_zeros({g * rows, wave.end}));
    for (std::size_t k = 0; k < weights.size(); ++k)
      for (std::size_t hh = 0; hh < g; ++hh)
        for (std::size_t t = 0; t < n; ++t)
          std::copy_n(weights[k].data() + (hh * n + t) * blocks[b].end, blocks[b].end,
                      prob_parts[k].data() + (hh * rows + from + t) * wave.end);
  }
  if (keep_weights) probs_out = share_from_components<P>(queries, std::move(prob_parts));
  co_return share_from_components<P>(queries, std::move(out_parts));
}

// One causal block of a KV head's query group: rows `block` of each head
// (g * n, d) against keys [0, block.end), the future within the block
// masked; the weights (g * n, block.end) to `probs_out` if asked for.
// The row max's tournament plans on `plan_rows` rows (all that run at once).
template <Protocol P>
auto Decoder<P>::prefill_block(P& p, const Share& queries, const kv::HeadCache<P>& cache, std::size_t g,
                               const RowBlock& block, std::size_t plan_rows, Share* probs_out) -> Task<Share> {
  auto scope = cost_scope(p, CostTag::attention);
  const std::size_t n = block.end - block.begin, keys = block.end;
  const bool all_keys = keys == P::shape(cache.keys)[0];
  const Share early_keys = all_keys ? Share{} : ops::rows<P>(cache.keys, 0, keys);
  const Share early_values = all_keys ? Share{} : ops::rows<P>(cache.values, 0, keys);
  auto scores = co_await p.matmul_trunc(queries, ops::transpose<P>(all_keys ? cache.keys : early_keys));
  std::optional<RingTensor> mask(ring_zeros({g * n, keys}));
  {
    const FixedPoint fp(p.frac_bits());
    RingTensor bias = ring_zeros({g * n, keys});
    const Ring minus_big = fp.encode(-1024.0);
    for (std::size_t r = 0; r < g * n; ++r)
      for (std::size_t c = 0; c < keys; ++c) {
        const bool future = c > block.begin + r % n;
        bias(r, c) = future ? minus_big : 0;
        (*mask)(r, c) = future ? 0 : 1;
      }
    scores = p.add_public(scores, bias);  // keeps the row max on visible entries
  }
  const Share& values = all_keys ? cache.values : early_values;
  auto softmax_scope = cost_scope(p, CostTag::softmax);
  if (!probs_out) co_return co_await ops::softmax_apply(p, std::move(scores), values, mask, plan_rows);
  auto [out, probs] = co_await ops::softmax_times(p, scores, values, mask, plan_rows);
  *probs_out = std::move(probs);
  co_return out;
}

template <Protocol P>
auto Decoder<P>::decode_head(P& p, const Share& queries, const Share& keys, const Share& values, Share& probs_out)
    -> Task<Share> {
  auto scope = cost_scope(p, CostTag::attention);
  auto scores = co_await p.matmul_trunc(queries, ops::transpose<P>(keys));  // (g, n)
  auto softmax_scope = cost_scope(p, CostTag::softmax);
  auto [out, probs] = co_await ops::softmax_times(p, scores, values);
  probs_out = std::move(probs);
  co_return out;
}

// A decode step's query group over clusters a policy picked, attended in
// place (ops::cluster_attention): no token row is gathered.
template <Protocol P>
auto Decoder<P>::decode_picked(P& p, const Share& queries, const kv::ClusterPick<P>& pick, Share& probs_out)
    -> Task<Share> {
  auto scope = cost_scope(p, CostTag::attention);
  auto [out, probs] = co_await ops::cluster_attention(p, queries, *pick.keys, *pick.values, pick.hot, pick.span);
  probs_out = std::move(probs);
  co_return out;
}

// One sequence's attention in a decode step, over its policy's selection:
// each KV head's query group, then the policy's look at the weights.
// Returns the heads' outputs side by side (1, heads * d).
template <Protocol P>
template <class Pol>
auto Decoder<P>::attend(P& p, Pol& policy, const kv::StepView<P>& view, const kv::Selection<P>& sel) -> Task<Share> {
  const std::size_t kvh = c_.num_kv_heads, g = c_.num_heads / kvh, layer = view.layer;
  if (sel.keys.size() != kvh || sel.values.size() != kvh)
    throw Error(ErrorCode::invalid_argument, "policy " + std::string(policy.name()) +
                                                 " returned a selection for the wrong number of heads");
  const std::vector<Share>& queries = *view.queries;
  std::vector<Share> probs(kvh), outputs(c_.num_heads);
  std::vector<P> forks;
  forks.reserve(kvh);
  for (std::size_t j = 0; j < kvh; ++j) forks.push_back(p.fork());
  std::vector<Task<Share>> tasks;
  for (std::size_t j = 0; j < kvh; ++j)
    tasks.push_back(sel.picked(j) ? decode_picked(forks[j], queries[j], *sel.picks[j], probs[j])
                                  : decode_head(forks[j], queries[j], sel.keys[j], sel.values[j], probs[j]));
  auto outs = co_await when_all(std::move(tasks));  // (g, d) each
  for (std::size_t j = 0; j < kvh; ++j)
    for (std::size_t hh = 0; hh < g; ++hh) outputs[j * g + hh] = ops::rows<P>(outs[j], hh, hh + 1);
  {
    auto scope = cost_scope(p, CostTag::summary);  // policy bookkeeping (H2O's scores, ...)
    co_await policy.observe(p, view, probs);
  }
  if (probe_) {
    const kv::Selection<P> rows = sel.picks.empty() ? kv::Selection<P>{} : co_await kv::materialize(p, sel);
    const auto& positions = sel.picks.empty() ? sel.positions : rows.positions;
    for (std::size_t j = 0; j < kvh; ++j) {
      const auto& layer_cache = cache_[layer];
      auto scores = co_await p.matmul_trunc(queries[j], ops::transpose<P>(layer_cache[j].keys));
      auto full = co_await ops::softmax_last(p, scores);
      probe_(layer, j, queries[j], full, positions.at(j));
    }
  }
  co_return join_heads(outputs);
}

// Per-head outputs (count, d) side by side: (count, heads * d).
template <Protocol P>
auto Decoder<P>::join_heads(const std::vector<Share>& outputs) const -> Share {
  Share joined = outputs[0];
  for (std::size_t hh = 1; hh < outputs.size(); ++hh) joined = ops::concat_last<P>(joined, outputs[hh]);
  return joined;
}

}  // namespace mpcache
