#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache;

#include "../support/run_task.hpp"
#include "../support/tiny_gpt2.hpp"
#include "../support/real_tensors.hpp"

using namespace mpcache;

namespace {
using testing::run;
using testing::tiny_gpt2;

using Mat = std::vector<std::vector<double>>;

// An independent float64 GPT-2 forward (plain loops, HF names and Conv1D
// [in, out] layout, erf GeLU), to check the generic decoder against.
struct Reference {
  const ModelConfig& c;
  WeightSource w;

  RealTensor get(const std::string& name, const Shape& s) const { return *w(name, s); }

  static std::vector<double> layer_norm(const std::vector<double>& x, const RealTensor& g,
                                        const RealTensor& b, double eps) {
    double mean = 0, var = 0;
    for (double v : x) mean += v;
    mean /= double(x.size());
    for (double v : x) var += (v - mean) * (v - mean);
    var /= double(x.size());
    std::vector<double> out(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) out[i] = (x[i] - mean) / std::sqrt(var + eps) * g(i) + b(i);
    return out;
  }
  static std::vector<double> affine(const std::vector<double>& x, const RealTensor& w, const RealTensor& b) {
    std::vector<double> out(w.shape()[1]);
    for (std::size_t o = 0; o < out.size(); ++o) {
      double acc = b(o);
      for (std::size_t i = 0; i < x.size(); ++i) acc += x[i] * w(i, o);
      out[o] = acc;
    }
    return out;
  }

  Mat logits(const std::vector<std::uint32_t>& tokens) const {
    const std::size_t h = c.hidden_size, t = tokens.size(), nh = c.num_heads, hd = c.head_dim;
    const auto wte = get("transformer.wte.weight", {c.vocab_size, h});
    const auto wpe = get("transformer.wpe.weight", {c.max_positions, h});
    Mat x(t, std::vector<double>(h));
    for (std::size_t i = 0; i < t; ++i)
      for (std::size_t j = 0; j < h; ++j) x[i][j] = wte(tokens[i], j) + wpe(i, j);
    for (std::size_t l = 0; l < c.num_layers; ++l) {
      const std::string pre = "transformer.h." + std::to_string(l) + ".";
      const auto g1 = get(pre + "ln_1.weight", {h}), b1 = get(pre + "ln_1.bias", {h});
      const auto wa = get(pre + "attn.c_attn.weight", {h, 3 * h}), ba = get(pre + "attn.c_attn.bias", {3 * h});
      const auto wp = get(pre + "attn.c_proj.weight", {h, h}), bp = get(pre + "attn.c_proj.bias", {h});
      Mat qkv(t);
      for (std::size_t i = 0; i < t; ++i) qkv[i] = affine(layer_norm(x[i], g1, b1, c.norm_eps), wa, ba);
      for (std::size_t i = 0; i < t; ++i) {
        std::vector<double> att(h, 0.0);
        for (std::size_t hh = 0; hh < nh; ++hh) {
          std::vector<double> s(i + 1);
          double m = -1e300;
          for (std::size_t j = 0; j <= i; ++j) {
            double acc = 0;
            for (std::size_t d = 0; d < hd; ++d) acc += qkv[i][hh * hd + d] * qkv[j][h + hh * hd + d];
            s[j] = acc / std::sqrt(double(hd));
            m = std::max(m, s[j]);
          }
          double z = 0;
          for (auto& v : s) z += (v = std::exp(v - m));
          for (std::size_t j = 0; j <= i; ++j)
            for (std::size_t d = 0; d < hd; ++d) att[hh * hd + d] += s[j] / z * qkv[j][2 * h + hh * hd + d];
        }
        const auto o = affine(att, wp, bp);
        for (std::size_t j = 0; j < h; ++j) x[i][j] += o[j];
      }
      const auto g2 = get(pre + "ln_2.weight", {h}), b2 = get(pre + "ln_2.bias", {h});
      const std::size_t inter = c.intermediate_size;
      const auto wf = get(pre + "mlp.c_fc.weight", {h, inter}), bf = get(pre + "mlp.c_fc.bias", {inter});
      const auto wo = get(pre + "mlp.c_proj.weight", {inter, h}), bo = get(pre + "mlp.c_proj.bias", {h});
      for (std::size_t i = 0; i < t; ++i) {
        auto u = affine(layer_norm(x[i], g2, b2, c.norm_eps), wf, bf);
        for (auto& v : u) v = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
        const auto o = affine(u, wo, bo);
        for (std::size_t j = 0; j < h; ++j) x[i][j] += o[j];
      }
    }
    const auto gf = get("transformer.ln_f.weight", {h}), bfin = get("transformer.ln_f.bias", {h});
    Mat out(t, std::vector<double>(c.vocab_size));
    for (std::size_t i = 0; i < t; ++i) {
      const auto y = layer_norm(x[i], gf, bfin, c.norm_eps);
      for (std::size_t v = 0; v < c.vocab_size; ++v) {
        double acc = 0;
        for (std::size_t j = 0; j < h; ++j) acc += y[j] * wte(v, j);
        out[i][v] = acc;
      }
    }
    return out;
  }
};

}  // namespace

TEST_SUITE("gpt2") {
  TEST_CASE("GPT-2 prefill and decode on ref match an independent float64 forward to 1e-9") {
    const ModelConfig c = tiny_gpt2();
    const WeightSource source = random_weights(11, 0.2);
    Ref p;
    auto weights = run(load_decoder(p, c, source));
    Decoder<Ref> decoder(weights);
    std::vector<std::uint32_t> tokens{1, 5, 9, 33, 2, 60, 17, 17, 4, 0, 12};
    kv::FullCache<Ref> full;
    std::vector<std::uint32_t> head(tokens.begin(), tokens.end() - 2);
    auto pre = p.to_real(run(decoder.prefill(p, full, 0, head, head.size())));
    auto d1 = p.to_real(run(decoder.decode(p, full, 0, tokens[tokens.size() - 2])));
    auto d2 = p.to_real(run(decoder.decode(p, full, 0, tokens.back())));
    const Mat expect = Reference{c, source}.logits(tokens);
    double worst = 0;
    for (std::size_t t = 0; t < head.size(); ++t)
      for (std::size_t v = 0; v < c.vocab_size; ++v) worst = std::max(worst, std::abs(pre(t, v) - expect[t][v]));
    for (std::size_t v = 0; v < c.vocab_size; ++v) {
      worst = std::max(worst, std::abs(d1(0, v) - expect[tokens.size() - 2][v]));
      worst = std::max(worst, std::abs(d2(0, v) - expect[tokens.size() - 1][v]));
    }
    CHECK(worst < 1e-9);
    CHECK(testing::max_abs(d2) > 1e-3);  // not a vacuous comparison
  }

  // (The forward above, against the checkpoint's own weights, shows the
  // function unchanged.)
  TEST_CASE("load_gpt2 centres every write to the residual stream, so LayerNorm may skip its mean") {
    const ModelConfig c = tiny_gpt2();
    Ref p;
    auto w = run(load_decoder(p, c, random_weights(13, 0.2)));
    CHECK(w.centered_residual);
    auto worst_row_mean = [&](const RealTensor& t) {
      const std::size_t h = t.shape().back();
      double worst = 0;
      for (std::size_t r = 0; r < t.size() / h; ++r) {
        double mean = 0;
        for (std::size_t i = 0; i < h; ++i) mean += t.data()[r * h + i] / static_cast<double>(h);
        worst = std::max(worst, std::abs(mean));
      }
      return worst;
    };
    const auto& layer = w.layers.back();
    for (const RefShare* weight : std::vector<const RefShare*>{&w.embed, &*w.positions, &layer.wo, &*layer.bo,
                                                               &layer.down, &*layer.b_down})
      CHECK(worst_row_mean(p.to_real(*weight)) < 1e-12);
    CHECK(worst_row_mean(p.to_real(layer.wq)) > 1e-6);  // the others as stored
  }

  TEST_CASE("GPT-2 on plain agrees with ref within fixed-point error") {
    const ModelConfig c = tiny_gpt2();
    const WeightSource source = random_weights(12, 0.2);
    std::vector<std::uint32_t> tokens{3, 14, 15, 9, 26, 53, 58, 9, 7};
    Ref r;
    Plain pl;
    auto wr = run(load_decoder(r, c, source));
    auto wp = run(load_decoder(pl, c, source));
    Decoder<Ref> dr(wr);
    Decoder<Plain> dp(wp);
    kv::FullCache<Ref> fr;
    kv::FullCache<Plain> fp;
    auto a = r.to_real(run(dr.prefill(r, fr, 0, tokens, tokens.size())));
    auto b = FixedPoint(pl.frac_bits()).decode(run(pl.reveal(run(dp.prefill(pl, fp, 0, tokens, tokens.size())))));
    MESSAGE("GPT-2 plain vs ref: max |logit error| = " << testing::max_abs_diff(a, b));
    CHECK(testing::max_abs_diff(a, b) < 2e-2);
  }

  TEST_CASE("a GPT-2 checkpoint missing a tensor is refused by name") {
    const ModelConfig c = tiny_gpt2();
    auto source = [inner = random_weights(1)](const std::string& name, const Shape& s) -> std::optional<RealTensor> {
      if (name == "transformer.h.1.mlp.c_fc.bias") return std::nullopt;
      return inner(name, s);
    };
    Ref p;
    CHECK_THROWS_WITH_AS(run(load_decoder(p, c, source)), doctest::Contains("transformer.h.1.mlp.c_fc.bias"), Error);
  }
}
