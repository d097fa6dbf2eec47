// The decoder's linear layers (members of Decoder<P>, declared in
// :decoder): the owner's token ids as a secret one-hot matrix, token and
// learned position embeddings, RoPE, the norms fused with the projections
// after them, affine maps, and the LM head.
export module mpcache.model:decoder_linear;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import mpcache.ops;
import :weights;
import :decoder;

namespace mpcache {

// The owner's token ids as a secret one-hot matrix (count, vocab).
template <Protocol P>
auto Decoder<P>::input_one_hot(P& p, PartyId owner, std::optional<std::vector<std::uint32_t>> tokens,
                               std::size_t count) -> Task<Share> {
  const std::size_t v = c_.vocab_size;
  auto scope = cost_scope(p, CostTag::linear);
  std::optional<RingTensor> hot;
  if (tokens) {
    if (tokens->size() != count)
      throw Error(ErrorCode::invalid_argument, "embed: " + std::to_string(tokens->size()) +
                                                   " token ids for " + std::to_string(count) +
                                                   " positions");
    RingTensor t = ring_zeros({count, v});
    for (std::size_t i = 0; i < count; ++i) {
      if ((*tokens)[i] >= v)
        throw Error(ErrorCode::invalid_argument, "token id " + std::to_string((*tokens)[i]) +
                                                     " is outside the vocabulary of " +
                                                     std::to_string(v));
      t(i, (*tokens)[i]) = 1;
    }
    hot = std::move(t);
  }
  co_return co_await p.input(owner, std::move(hot), {count, v});  // integer 0/1
}

// Token embeddings (and learned positions) of one-hot rows, row t at
// position positions[t].
template <Protocol P>
auto Decoder<P>::embed(P& p, const Share& one_hot, const std::vector<std::size_t>& positions) -> Task<Share> {
  auto scope = cost_scope(p, CostTag::linear);
  auto h = co_await p.matmul(one_hot, w_.embed);
  if (w_.positions) h = p.add(h, position_rows(p, positions));  // learned positions
  co_return h;
}

// Rows of the learned position table: one slice when they run in order.
template <Protocol P>
auto Decoder<P>::position_rows(const P& p, const std::vector<std::size_t>& positions) const -> Share {
  const std::size_t first = positions.front();
  if (positions == consecutive(first, positions.size()))
    return weight_rows(p, *w_.positions, first, first + positions.size());
  Share rows = weight_rows(p, *w_.positions, first, first + 1);
  for (std::size_t t = 1; t < positions.size(); ++t)
    rows = ops::stack_rows<P>(rows, weight_rows(p, *w_.positions, positions[t], positions[t] + 1));
  return rows;
}

// Public cos/sin tables for rows at `positions`, tiled over `heads`
// heads: (rows, heads * d); sin carries rotate_half's sign.
template <Protocol P>
std::pair<RealTensor, RealTensor> Decoder<P>::rope_tables(const std::vector<std::size_t>& positions,
                                                         std::size_t heads) const {
  const std::size_t d = c_.head_dim, half = d / 2, count = positions.size();
  const std::vector<double> inv = c_.rope_inv_freq();  // rope_theta and rope_scaling
  RealTensor cs = RealTensor::zeros({count, heads * d}), sn = cs;
  for (std::size_t t = 0; t < count; ++t)
    for (std::size_t i = 0; i < half; ++i) {
      const double ang = double(positions[t]) * inv[i];
      for (std::size_t hh = 0; hh < heads; ++hh) {
        cs(t, hh * d + i) = cs(t, hh * d + i + half) = std::cos(ang);
        sn(t, hh * d + i) = -std::sin(ang);  // rotate_half: first half takes -x2
        sn(t, hh * d + i + half) = std::sin(ang);
      }
    }
  return {cs, sn};
}

// x (rows, heads * d), row t at positions[t] -> x*cos + rotate_half(x)*sin,
// one truncation.
template <Protocol P>
auto Decoder<P>::rope(P& p, const Share& x, const std::vector<std::size_t>& positions, std::size_t heads)
    -> Task<Share> {
  auto scope = cost_scope(p, CostTag::linear);
  const std::size_t d = c_.head_dim, half = d / 2;
  auto [cs, sn] = rope_tables(positions, heads);
  std::vector<std::size_t> swap(heads * d);
  for (std::size_t hh = 0; hh < heads; ++hh)
    for (std::size_t i = 0; i < d; ++i) swap[hh * d + i] = hh * d + (i < half ? i + half : i - half);
  auto swapped = P::apply(x, [&](const RingTensor& t) { return ring_take_last(t, swap); });
  co_return co_await ops::sum_weighted_by_reals<P>(p, {{x, cs}, {swapped, sn}});
}

// norm(h) W_i (+ b_i) for each projection: the norm's last product scales
// the projections' rows (ops::norm_project), one round fewer than the
// norm followed by the matmuls. The matmuls count as linear, the rest as norm.
// Weights (Weight<P>) go to the products as they are kept; norms and
// biases are small and expanded here.
template <Protocol P>
auto Decoder<P>::norm_affine(P& p, const Share& h, const Weight<P>& gamma, const std::optional<Weight<P>>& beta,
                             std::vector<std::pair<const Weight<P>*, const std::optional<Weight<P>>*>> projections)
    -> Task<std::vector<Share>> {
  auto scope = cost_scope(p, CostTag::norm);
  std::vector<const Weight<P>*> weights;
  for (const auto& pr : projections) weights.push_back(pr.first);
  auto out = co_await ops::norm_project(p, h, expand_weight(p, gamma), expand_weight(p, beta), c_.norm_eps, weights,
                                        w_.centered_residual);
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = with_bias(p, std::move(out[i]), expand_weight(p, *projections[i].second));
  co_return out;
}

template <Protocol P>
auto Decoder<P>::with_bias(const P& p, Share y, const std::optional<Share>& bias) const -> Share {
  if (!bias) return y;
  const std::size_t n = P::shape(y).at(0), out = P::shape(y).at(1);
  return p.add(y, ops::tile_row<P>(ops::reshape<P>(*bias, {1, out}), n));
}

// x W (+ b): one matmul round, the bias added locally. With input_shift,
// x is carried at 2^(f-s): the product's sums stay 2^s further from
// truncation's failure range, and scaling back up by the public 2^s is
// exact and local.
template <Protocol P>
auto Decoder<P>::affine(P& p, const Share& x, const Weight<P>& weight, const std::optional<Weight<P>>& bias,
                        int input_shift) -> Task<Share> {
  auto scope = cost_scope(p, CostTag::linear);
  auto y = co_await p.matmul_trunc(x, weight);
  if (input_shift > 0) y = p.mul_public(y, ring_filled(P::shape(y), Ring{1} << input_shift));
  co_return with_bias(p, std::move(y), expand_weight(p, bias));
}

// The norm and the q, k, v projections of h_in's rows (`rankers` run
// meanwhile), then RoPE on q and k: (q, k, v), row t at positions[t].
template <Protocol P>
auto Decoder<P>::project_rotated(P& p, std::size_t layer, const Share& h_in,
                                 const std::vector<std::size_t>& positions, const std::vector<Ranker>& rankers)
    -> Task<std::array<Share, 3>> {
  const auto& lw = layer_weights(layer);
  auto project = [&](P& pn) {
    return norm_affine(pn, h_in, lw.input_norm, lw.input_norm_bias,
                       {{&lw.wq, &lw.bq}, {&lw.wk, &lw.bk}, {&lw.wv, &lw.bv}});
  };
  std::vector<Share> qkv;
  if (!rankers.empty()) {  // the policies rank while the norm runs
    P pn = p.fork();
    std::vector<P> forks;
    forks.reserve(rankers.size());
    for (std::size_t i = 0; i < rankers.size(); ++i) forks.push_back(p.fork());
    std::vector<Task<void>> ranking;
    for (std::size_t i = 0; i < rankers.size(); ++i) ranking.push_back(rankers[i](forks[i]));
    auto [projected, none] = co_await when_all(project(pn), when_all(std::move(ranking)));
    (void)none;
    qkv = std::move(projected);
  } else {
    qkv = co_await project(p);
  }
  if (gpt2()) co_return std::array<Share, 3>{qkv[0], qkv[1], qkv[2]};  // learned positions, no RoPE
  P pq = p.fork(), pk = p.fork();
  auto [qr, kr] =
      co_await when_all(rope(pq, qkv[0], positions, c_.num_heads), rope(pk, qkv[1], positions, c_.num_kv_heads));
  co_return std::array<Share, 3>{std::move(qr), std::move(kr), qkv[2]};
}

// The final norm and the LM head: logits (rows, vocab).
template <Protocol P>
auto Decoder<P>::head(P& p, const Share& h) -> Task<Share> {
  auto logits = co_await norm_affine(p, h, w_.final_norm, w_.final_norm_bias, {{&w_.lm_head, &no_bias_}});
  co_return std::move(logits[0]);
}

}  // namespace mpcache
