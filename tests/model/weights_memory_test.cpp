// Weights under rss3 (Rss3Weight): with compact_weights 8 bytes per weight at two parties and none at the
// owner, 16 by default; weights read transposed (LM heads); the owner's streamed read of its checkpoint.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
#include <fstream>
import mpcache;

#include "../support/parties.hpp"
#include "../support/tiny_gpt2.hpp"

using namespace mpcache;
using mpcache::testing::random_ring;
using mpcache::testing::run_rss3;
using mpcache::testing::tiny_gpt2;

namespace {
std::optional<RingTensor> owned(const Rss3& p, PartyId owner, const RingTensor& v) {
  return p.holds_input(owner) ? std::optional<RingTensor>(v) : std::nullopt;
}

const Rss3Options seeded{.insecure_seed = 21, .compact_weights = true};
const Rss3Options seeded_full{.insecure_seed = 21};

void check_same_costs(const std::array<CostCounters, 3>& a, const std::array<CostCounters, 3>& b) {
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(a[i].payload_bytes_sent() == b[i].payload_bytes_sent());
    CHECK(a[i].rounds == b[i].rounds);
  }
}

// x a and x a truncated for x = a from party 0, with b from party 1 given
// by input_b (a share or a weight).
template <class InputB>
auto products(const RingTensor& a, const RingTensor& b, InputB input_b, const Rss3Options& options = seeded) {
  using Out = std::array<Rss3Share, 2>;
  return run_rss3(
      [&](Rss3& p) -> Task<Out> {
        const Rss3Share x = co_await p.input(0, owned(p, 0, a), shape_of(a));
        const auto w = co_await input_b(p, owned(p, 1, b), shape_of(b));
        co_return Out{co_await p.matmul(x, w), co_await p.matmul_trunc(x, w)};
      },
      options);
}
}  // namespace

TEST_SUITE("weights memory") {
  TEST_CASE("rss3 input_weight: input's messages, 8 bytes per element kept (none at the owner), and expand gives "
            "input's shares") {
    // {3, 400001}: input in two pieces of 2^20 elements and a short one.
    for (const Shape& shape : {Shape{7}, Shape{3, 5}, Shape{4, 6}, Shape{3, 400001}}) {
      for (PartyId owner = 0; owner < 3; ++owner) {
        const RingTensor x = random_ring(shape, 40 + owner);
        auto full = run_rss3([&](Rss3& p) -> Task<Rss3Share> { co_return co_await p.input(owner, owned(p, owner, x), shape); },
                             seeded);
        for (const bool compact_weights : {true, false}) {
          auto weight = run_rss3(
              [&](Rss3& p) -> Task<std::pair<Rss3Share, std::size_t>> {
                const Rss3Weight w = co_await p.input_weight(owner, owned(p, owner, x), shape);
                co_return std::pair{p.expand(w), w.resident_bytes()};
              },
              compact_weights ? seeded : seeded_full);
          for (std::size_t i = 0; i < 3; ++i) {
            CHECK(weight.results[i].first.own == full.results[i].own);
            CHECK(weight.results[i].first.next == full.results[i].next);
            CHECK(weight.results[i].second == (compact_weights ? (i == owner ? 0 : 8) : 16) * x.size());
          }
          check_same_costs(full.costs, weight.costs);
        }
      }
    }
  }

  TEST_CASE("rss3 input_weight paces a big weight: the others confirm all pieces but the last 4, nothing else "
            "changes") {
    const Shape shape{3, 2 * (std::size_t{1} << 20) + 1};  // 7 pieces of 2^20 elements, the last one of 3
    const RingTensor x = random_ring(shape, 12);
    auto full = run_rss3([&](Rss3& p) -> Task<Rss3Share> { co_return co_await p.input(1, owned(p, 1, x), shape); },
                         seeded);
    auto weight = run_rss3(
        [&](Rss3& p) -> Task<Rss3Share> {
          const Rss3Weight w = co_await p.input_weight(1, owned(p, 1, x), shape);
          co_return p.expand(w);
        },
        seeded);
    for (std::size_t i = 0; i < 3; ++i) {
      CHECK(weight.results[i].own == full.results[i].own);
      CHECK(weight.results[i].next == full.results[i].next);
      CHECK(weight.costs[i].payload_bytes_sent() == full.costs[i].payload_bytes_sent());
    }
    // The confirmations (empty): pieces 0-2 of 7, at parties 0 and 2 to the owner.
    CHECK(weight.costs[0].messages_sent() == 3);
    CHECK(weight.costs[2].messages_sent() == 3);
    CHECK(full.costs[0].messages_sent() == 0);
    // The owner waited: its clock moved past the unpaced input's.
    CHECK(weight.costs[1].rounds > full.costs[1].rounds);
  }

  TEST_CASE("rss3 expand_rows at odd element offsets draws the key stream where expand does") {
    const RingTensor x = random_ring({5, 3}, 3);
    auto run = run_rss3(
        [&](Rss3& p) -> Task<std::pair<Rss3Share, Rss3Share>> {
          const Rss3Weight w = co_await p.input_weight(1, owned(p, 1, x), {5, 3});
          co_return std::pair{p.expand(w), p.expand_rows(w, 1, 4)};
        },
        seeded);
    for (const auto& [all, rows] : run.results) {
      CHECK(rows.own == ring_reshape(ring_slice_last(ring_reshape(all.own, {15}), 3, 12), {3, 3}));
      CHECK(rows.next == ring_reshape(ring_slice_last(ring_reshape(all.next, {15}), 3, 12), {3, 3}));
    }
    const auto err = run_rss3(
        [&](Rss3& p) -> Task<std::string> {
          const Rss3Weight w = co_await p.input_weight(1, owned(p, 1, x), {5, 3});
          try {
            (void)p.expand_rows(w, 2, 6);
          } catch (const Error& e) {
            co_return std::string(e.what());
          }
          co_return std::string();
        },
        seeded);
    CHECK(err.results[0].find("rows [2, 6)") != std::string::npos);
  }

  TEST_CASE("rss3 products with a weight: the full share's result shares, bytes and rounds, blockwise") {
    // n odd and large: two rows per block, four blocks for k = 7 (the last one short).
    struct Case {
      std::size_t m, k, n;
    };
    for (const Case c : {Case{3, 7, 65537}, Case{2, 5, 4}, Case{1, 1, 1}}) {
      const RingTensor a = random_ring({c.m, c.k}, 5), b = random_ring({c.k, c.n}, 6);
      auto full = products(a, b, [](Rss3& p, std::optional<RingTensor> v, Shape s) { return p.input(1, std::move(v), s); });
      for (const Rss3Options& options : {seeded, seeded_full}) {
        auto weight = products(
            a, b, [](Rss3& p, std::optional<RingTensor> v, Shape s) { return p.input_weight(1, std::move(v), s); }, options);
        for (std::size_t i = 0; i < 3; ++i)
          for (std::size_t j = 0; j < 2; ++j) {
            CHECK(weight.results[i][j].own == full.results[i][j].own);
            CHECK(weight.results[i][j].next == full.results[i][j].next);
          }
        check_same_costs(full.costs, weight.costs);
      }
      // Not a vacuous comparison: the product is a b.
      CHECK(ring_add(ring_add(full.results[0][0].own, full.results[1][0].own), full.results[2][0].own) ==
            ring_matmul(a, b));
    }
  }

  TEST_CASE("GPT-2 weights under rss3: 8 bytes per weight (none at the owner) with compact_weights, 16 by default") {
    const ModelConfig c = tiny_gpt2();
    const std::size_t h = c.hidden_size, f = c.intermediate_size, v = c.vocab_size;
    // Every tensor of the checkpoint (c_attn split in three changes no count),
    // plus the LM head, which the tied embedding gives transposed.
    const std::size_t per_layer = 2 * h + h * 3 * h + 3 * h + h * h + h + 2 * h + h * f + f + f * h + h;
    const std::size_t weights = v * h + c.max_positions * h + c.num_layers * per_layer + 2 * h + h * v;
    auto resident = [&](const Rss3Options& options) {
      return run_rss3(
          [&](Rss3& p) -> Task<std::size_t> {
            const auto w = co_await load_decoder(p, c, p.holds_input(1) ? random_weights(4) : no_weights(), 1);
            co_return w.resident_bytes();
          },
          options);
    };
    const auto compact = resident(seeded), full = resident(seeded_full);  // the default keeps the full share
    for (std::size_t i = 0; i < 3; ++i) {
      CHECK(compact.results[i] == (i == 1 ? 0 : 8 * weights));  // party 1 owns the weights
      CHECK(full.results[i] == 16 * weights);
    }
    static_assert(CompactWeights<Rss3>);
    static_assert(!CompactWeights<Plain> && !CompactWeights<Add2>);
  }

  TEST_CASE("rss3 weights read transposed: the products, bytes and rounds of the transpose input as a share") {
    // b^T stored (n, k) and read as (k, n): several blocks of rows (n = 300
    // with k = 1000 gives 130 rows a block), a short one last, an odd k;
    // up to 8 rows of a as dot products, more through the matmul kernel.
    struct Case {
      std::size_t m, k, n;
    };
    // Small signed values: the truncated products are then exact up to 1.
    auto small = [](const Shape& shape, std::uint64_t seed) {
      RingTensor t = random_ring(shape, seed);
      for (Ring& v : t) v = (v % 2048) - 1024;
      return t;
    };
    for (const Case c : {Case{2, 1000, 300}, Case{12, 1000, 300}, Case{3, 7, 5}, Case{9, 3, 2}, Case{1, 1, 1}}) {
      const RingTensor a = small({c.m, c.k}, 8), b = small({c.k, c.n}, 9);
      auto full = products(a, b, [](Rss3& p, std::optional<RingTensor> v, Shape s) { return p.input(1, std::move(v), s); });
      for (const Rss3Options& options : {seeded, seeded_full}) {
        auto transposed = [](Rss3& p, std::optional<RingTensor> v, Shape s) -> Task<Rss3Weight> {
          if (v) v = transpose(*v);
          co_return Rss3::transposed(co_await p.input_weight(1, std::move(v), {s[1], s[0]}), false);
        };
        auto weight = products(a, b, transposed, options);
        // Other random components than b's input (b^T's are drawn in its
        // order): compare what the shares open to. The product is exact;
        // the truncated one within 1 of the full share's.
        auto open = [](const auto& run, std::size_t j) {
          return ring_add(ring_add(run.results[0][j].own, run.results[1][j].own), run.results[2][j].own);
        };
        CHECK(open(weight, 0) == ring_matmul(a, b));
        const RingTensor t = open(weight, 1), u = open(full, 1);
        std::size_t off = 0;
        for (std::size_t e = 0; e < t.size(); ++e) off += t.data()[e] - u.data()[e] + 1 > 2;
        CHECK(off == 0);
        check_same_costs(full.costs, weight.costs);
      }
    }
    // expand reads it transposed too; a borrowed view counts no bytes.
    const RingTensor x = random_ring({4, 3}, 10);
    auto run = run_rss3(
        [&](Rss3& p) -> Task<std::array<std::size_t, 2>> {
          const Rss3Weight w = co_await p.input_weight(1, owned(p, 1, x), {4, 3});
          const Rss3Weight t = Rss3::transposed(w, true);
          const Rss3Share a = p.expand(w), b = p.expand(t);
          CHECK(b.own == transpose(a.own));
          CHECK(b.next == transpose(a.next));
          const Rss3Share rows = p.expand_rows(t, 1, 3);
          CHECK(rows.own == ring_reshape(ring_slice_last(ring_reshape(b.own, {12}), 4, 12), {2, 4}));
          co_return std::array<std::size_t, 2>{w.resident_bytes(), t.resident_bytes()};
        },
        seeded);
    CHECK(run.results[0] == std::array<std::size_t, 2>{8 * 12, 0});
    CHECK(run.results[1] == std::array<std::size_t, 2>{0, 0});
  }

  TEST_CASE("a tied LLaMA head under rss3 is the embedding read transposed: no second copy") {
    ModelConfig c;
    c.model_type = "qwen2";
    c.vocab_size = 40, c.hidden_size = 8, c.intermediate_size = 12, c.num_layers = 2, c.num_heads = 2;
    c.num_kv_heads = 1, c.head_dim = 4, c.max_positions = 16, c.qkv_bias = true;
    for (const bool tied : {true, false}) {
      CAPTURE(tied);
      c.tie_word_embeddings = tied;
      const std::size_t ranking = c.num_layers * c.hidden_size * c.num_heads * c.head_dim;  // wq_ranking
      auto run = run_rss3(
          [&](Rss3& p) -> Task<std::pair<std::size_t, RingTensor>> {
            const auto w = co_await load_decoder(p, c, p.holds_input(1) ? random_weights(4) : no_weights(), 1);
            co_return std::pair{w.resident_bytes(), co_await p.reveal(p.expand(w.lm_head))};
          },
          seeded);
      auto reference = run_rss3(
          [&](Rss3& p) -> Task<RingTensor> {
            const auto w = co_await load_decoder(p, c, p.holds_input(1) ? random_weights(4) : no_weights(), 1);
            co_return co_await p.reveal(p.expand(w.lm_head));
          },
          seeded_full);
      for (std::size_t i = 0; i < 3; ++i) {
        CHECK(run.results[i].first == (i == 1 ? 0 : 8 * (c.weight_count() + ranking)));
        CHECK(run.results[i].second == reference.results[i]);  // the same head as with full shares
        CHECK(shape_of(run.results[i].second) == Shape{c.hidden_size, c.vocab_size});
      }
    }
  }

  TEST_CASE("the owner reads a tensor a block of rows at a time: the rows load gives, bad ranges refused") {
    const auto path = std::filesystem::temp_directory_path() / "mpcache_test_weights_rows.safetensors";
    const std::string header = R"({"w":{"dtype":"BF16","shape":[3,4],"data_offsets":[0,24]}})";
    std::string blob;
    for (int i = 0; i < 8; ++i) blob += static_cast<char>((header.size() >> (8 * i)) & 0xFF);
    blob += header;
    for (int i = 0; i < 12; ++i) {  // BF16 of i + 1: the high half of the float's bits
      const float f = float(i + 1);
      std::uint32_t bits;
      std::memcpy(&bits, &f, 4);
      blob += static_cast<char>((bits >> 16) & 0xFF);
      blob += static_cast<char>(bits >> 24);
    }
    std::ofstream(path, std::ios::binary) << blob;
    const auto file = SafeTensorsFile::open(path);
    const RealTensor all = file.load("w"), rows = file.load_rows("w", {3, 4}, 1, 3);
    REQUIRE(rows.shape() == Shape{2, 4});
    for (std::size_t i = 0; i < 8; ++i) CHECK(rows.data()[i] == all.data()[4 + i]);
    CHECK(rows(1, 3) == 12.0);
    std::string what;
    try {
      (void)file.load_rows("w", {3, 4}, 2, 5);
    } catch (const Error& e) {
      what = e.what();
    }
    CHECK(what.find("rows [2, 5) of tensor 'w'") != std::string::npos);
    const WeightSource source = weights_from_file(path, UnusedTensors::allow);
    CHECK(source.rows("w", {3, 4}, 0, 1)->data()[3] == 4.0);
    std::filesystem::remove(path);
  }

  TEST_CASE("a checkpoint that shrinks after open is refused when a tensor is read, naming it") {
    const auto path = std::filesystem::temp_directory_path() / "mpcache_test_weights_memory.safetensors";
    const std::string header = R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
    std::string blob;
    for (int i = 0; i < 8; ++i) blob += static_cast<char>((header.size() >> (8 * i)) & 0xFF);
    blob += header;
    const float values[4] = {1.5f, -2.0f, 0.25f, 8.0f};
    blob.append(reinterpret_cast<const char*>(values), sizeof values);
    std::ofstream(path, std::ios::binary) << blob;
    const auto file = SafeTensorsFile::open(path);
    CHECK(file.load("w")(3) == 8.0);  // read from its mapping
    std::filesystem::resize_file(path, blob.size() - 4);
    std::string what;
    try {
      (void)file.load("w");
    } catch (const Error& e) {
      what = e.what();
    }
    CHECK(what.find("tensor 'w': truncated data") != std::string::npos);
    std::filesystem::remove(path);
  }
}
