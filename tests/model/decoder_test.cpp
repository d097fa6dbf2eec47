#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <fstream>
#include <sstream>
#include <doctest/doctest.h>
import mpcache;

using namespace mpcache;

namespace {
const std::filesystem::path fixture = std::filesystem::path(MPCACHE_SOURCE_DIR) / "tools/model/fixture";

struct Expected {
  std::vector<std::uint32_t> tokens;
  std::vector<std::vector<double>> logits;  // per position
};

Expected read_expected() {
  std::ifstream in(fixture / "expected_logits.txt");
  REQUIRE(in);
  std::string line;
  std::getline(in, line);  // comment
  std::getline(in, line);
  Expected e;
  std::istringstream toks(line);
  for (std::uint32_t t; toks >> t;) e.tokens.push_back(t);
  while (std::getline(in, line)) {
    std::istringstream row(line);
    std::vector<double> r;
    for (double v; row >> v;) r.push_back(v);
    e.logits.push_back(std::move(r));
  }
  return e;
}

template <class T>
T run(Task<T> task) {
  Scheduler scheduler;
  return sync_wait(scheduler, std::move(task));
}

template <class P>
xt::xarray<double> to_real(P& p, const typename P::Share& s) {
  if constexpr (NativeReal<P>) {
    return p.to_real(s);
  } else {
    return FixedPoint(p.frac_bits()).decode(run(p.reveal(s)));
  }
}

// Prefill all tokens but the last, then decode the last: the decode path
// (KV cache, RoPE at the right position) must give the same logits.
template <class P>
std::pair<xt::xarray<double>, xt::xarray<double>> forward(P& p, const Expected& e) {
  const ModelConfig c = ModelConfig::from_json_file(fixture / "config.json");
  auto weights = run(load_llama(p, c, weights_from_file(fixture / "model.safetensors")));
  LlamaDecoder<P> decoder(weights);
  kv::FullCache<P> full;
  std::vector<std::uint32_t> head(e.tokens.begin(), e.tokens.end() - 1);
  auto prefill = to_real(p, run(decoder.prefill(p, full, 0, head, head.size())));
  auto last = to_real(p, run(decoder.decode(p, full, 0, e.tokens.back())));
  CHECK(decoder.length() == e.tokens.size());
  return {prefill, last};
}
}  // namespace

TEST_SUITE("decoder") {
  TEST_CASE("LLaMA forward on ref matches the Python float64 reference to 1e-9") {
    const Expected e = read_expected();
    REQUIRE(e.logits.size() == e.tokens.size());
    Ref p;
    auto [prefill, last] = forward(p, e);
    double worst = 0;
    for (std::size_t t = 0; t + 1 < e.tokens.size(); ++t)
      for (std::size_t v = 0; v < 256; ++v) worst = std::max(worst, std::abs(prefill(t, v) - e.logits[t][v]));
    for (std::size_t v = 0; v < 256; ++v) worst = std::max(worst, std::abs(last(0, v) - e.logits.back()[v]));
    CHECK(worst < 1e-9);
  }

  TEST_CASE("LLaMA forward on plain (fixed point) agrees with ref within fixed-point error") {
    const Expected e = read_expected();
    Plain p;
    auto [prefill, last] = forward(p, e);
    double worst = 0;
    for (std::size_t t = 0; t + 1 < e.tokens.size(); ++t)
      for (std::size_t v = 0; v < 256; ++v) worst = std::max(worst, std::abs(prefill(t, v) - e.logits[t][v]));
    for (std::size_t v = 0; v < 256; ++v) worst = std::max(worst, std::abs(last(0, v) - e.logits.back()[v]));
    MESSAGE("plain vs float64, max |logit error| = " << worst);
    CHECK(worst < 5e-2);
  }

  TEST_CASE("bad input is refused with a clear error") {
    Ref p;
    const ModelConfig c = ModelConfig::from_json_file(fixture / "config.json");
    auto weights = run(load_llama(p, c, random_weights(1)));
    LlamaDecoder<Ref> decoder(weights);
    kv::FullCache<Ref> full;
    CHECK_THROWS_WITH_AS(run(decoder.decode(p, full, 0, 1u)), doctest::Contains("before prefill"), Error);
    CHECK_THROWS_WITH_AS(run(decoder.prefill(p, full, 0, std::vector<std::uint32_t>{1, 999}, 2)),
                         doctest::Contains("outside the vocabulary"), Error);
    CHECK_THROWS_WITH_AS(run(decoder.prefill(p, full, 0, std::vector<std::uint32_t>(200, 1), 200)),
                         doctest::Contains("max_position_embeddings"), Error);
    auto bad = [](const std::string& name, const Shape& shape) -> std::optional<xt::xarray<double>> {
      if (name == "model.norm.weight") return std::nullopt;
      return xt::xarray<double>(xt::zeros<double>(shape));
    };
    CHECK_THROWS_WITH_AS(run(load_llama(p, c, bad)), doctest::Contains("model.norm.weight"), Error);
  }
}
