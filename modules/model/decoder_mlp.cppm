// The decoder's MLP (members of Decoder<P>, declared in :decoder): LLaMA's
// SiLU-gated MLP and GPT-2's GeLU one, the activation over a prefill's rows
// in waves within the memory budget (prefill_memory.cppm).
export module mpcache.model:decoder_mlp;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import mpcache.ops;
import :prefill_memory;
import :decoder;

namespace mpcache {

// A layer's MLP block after its norm, added to the residual h_in:
//   LLaMA:  down(silu(gate(x)) * up(x)), the hidden values carried at
//           2^(f - silu_output_shift) into the down projection;
//   GPT-2:  c_proj(gelu(c_fc(x))).
template <Protocol P>
auto Decoder<P>::mlp_block(P& p, std::size_t layer, const Share& h_in) -> Task<Share> {
  const auto& lw = layer_weights(layer);
  Share hidden;
  int hidden_shift = 0;
  if (lw.gate) {
    auto gate_up = co_await norm_affine(p, h_in, lw.post_norm, lw.post_norm_bias,
                                        {{&*lw.gate, &no_bias_}, {&lw.up, &lw.b_up}});
    auto scope = cost_scope(p, CostTag::activation);
    hidden = co_await activation_in_waves(p, gate_up[0], &gate_up[1]);
    hidden_shift = silu_output_shift;
  } else {
    auto up = co_await norm_affine(p, h_in, lw.post_norm, lw.post_norm_bias, {{&lw.up, &lw.b_up}});
    auto scope = cost_scope(p, CostTag::activation);
    hidden = co_await activation_in_waves(p, up[0], nullptr);
  }
  co_return p.add(h_in, co_await affine(p, hidden, lw.down, lw.b_down, hidden_shift));
}

// The MLP's activation: silu(gate) * up (carried at 2^(f-4)), or gelu(up);
// its form chosen as for plan_elements (the whole activation's, in waves).
template <Protocol P>
auto Decoder<P>::activation(P& p, const Share& first, const Share* second, std::size_t plan_elements)
    -> Task<Share> {
  if (second) co_return co_await ops::silu_times(p, first, *second, silu_output_shift, plan_elements);
  co_return co_await ops::gelu(p, first, plan_elements);
}

// The same over a prefill's rows in waves within the memory budget
// (prefill_memory.cppm), one after another; rows that fit run as one.
template <Protocol P>
auto Decoder<P>::activation_in_waves(P& p, const Share& first, const Share* second) -> Task<Share> {
  const std::size_t rows = P::shape(first).at(0), width = P::shape(first).at(1) * (second ? 2 : 1);
  std::vector<RowBlock> waves{{0, rows}};
  if constexpr (!ExactReals<P>) waves = even_row_blocks(rows, width, options_.prefill_memory_budget);
  if (waves.size() == 1) co_return co_await activation(p, first, second);
  std::optional<Share> out;
  for (const RowBlock& wave : waves) {
    const Share a = ops::rows<P>(first, wave.begin, wave.end);
    const Share b = second ? ops::rows<P>(*second, wave.begin, wave.end) : Share{};
    auto part = co_await activation(p, a, second ? &b : nullptr, element_count(P::shape(first)));
    out = out ? ops::stack_rows<P>(*out, part) : std::move(part);
  }
  co_return std::move(*out);
}

}  // namespace mpcache
