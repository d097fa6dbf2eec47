#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
#include <filesystem>
#include <fstream>
import mpcache.core;
import mpcache.model;

using namespace mpcache;
namespace fs = std::filesystem;

namespace {
const fs::path fixture = fs::path(MPCACHE_SOURCE_DIR) / "tools" / "model" / "fixture";

// Writes a safetensors file from (name, dtype, shape, raw bytes) entries.
struct RawTensor {
  std::string name, dtype;
  Shape shape;
  std::vector<unsigned char> bytes;
};

fs::path write_file(const std::string& file, const std::vector<RawTensor>& tensors,
                    std::size_t truncate_by = 0, const std::string* header_override = nullptr) {
  std::string header = "{";
  std::size_t offset = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    header += (i ? "," : "") + std::string("\"") + t.name + "\":{\"dtype\":\"" + t.dtype +
              "\",\"shape\":[";
    for (std::size_t d = 0; d < t.shape.size(); ++d)
      header += (d ? "," : "") + std::to_string(t.shape[d]);
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," +
              std::to_string(offset + t.bytes.size()) + "]}";
    offset += t.bytes.size();
  }
  header += "}";
  if (header_override) header = *header_override;
  std::string blob;
  for (int i = 0; i < 8; ++i) blob += static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  blob += header;
  for (const auto& t : tensors) blob.append(t.bytes.begin(), t.bytes.end());
  blob.resize(blob.size() - truncate_by);
  const fs::path path = fs::temp_directory_path() / ("mpcache_test_" + file);
  std::ofstream(path, std::ios::binary) << blob;
  return path;
}

template <class T>
std::vector<unsigned char> bytes_of(const std::vector<T>& values) {
  std::vector<unsigned char> out(values.size() * sizeof(T));
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

Error error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  FAIL("no mpcache::Error");
  return Error(ErrorCode::format, "unreachable");
}
}  // namespace

TEST_CASE("the committed fixture loads with the shapes its config implies") {
  const ModelConfig c = ModelConfig::from_json_file(fixture / "config.json");
  CHECK(c.architecture == Architecture::llama);
  CHECK(c.hidden_size == 16);
  CHECK(c.num_layers == 2);
  CHECK(c.num_heads == 2);
  CHECK(c.num_kv_heads == 1);
  CHECK(c.head_dim == 8);
  CHECK(c.intermediate_size == 40);
  CHECK(c.vocab_size == 256);
  CHECK(c.norm_eps == doctest::Approx(1e-5));
  CHECK_FALSE(c.tie_word_embeddings);
  const auto f = SafeTensorsFile::open(fixture / "model.safetensors");
  const std::size_t h = c.hidden_size, kv = c.num_kv_heads * c.head_dim;
  CHECK(f.load("model.embed_tokens.weight", {c.vocab_size, h}).size() == 256 * 16);
  for (std::size_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    CHECK_NOTHROW(f.load(p + "self_attn.q_proj.weight", {h, h}));
    CHECK_NOTHROW(f.load(p + "self_attn.k_proj.weight", {kv, h}));
    CHECK_NOTHROW(f.load(p + "self_attn.v_proj.weight", {kv, h}));
    CHECK_NOTHROW(f.load(p + "mlp.down_proj.weight", {h, c.intermediate_size}));
    const auto norm = f.load(p + "input_layernorm.weight", {h});
    for (double v : norm) {  // random in [0.5, 1.5) by construction
      CHECK(v >= 0.5);
      CHECK(v < 1.5);
    }
  }
  CHECK_NOTHROW(f.load("lm_head.weight", {c.vocab_size, h}));
}

TEST_CASE("F64, F32, F16 and BF16 tensors convert exactly") {
  const std::vector<double> f64{1.5, -2.25, 1e-300};
  const std::vector<float> f32{0.1f, -3.0f};
  const std::vector<std::uint16_t> f16{0x3C00, 0xC000, 0x0001, 0x7BFF};  // 1, -2, 2^-24, 65504
  const std::vector<std::uint16_t> bf16{0x3F80, 0xC0A0};                 // 1, -5
  const auto path = write_file("dtypes.safetensors", {{"a", "F64", {3}, bytes_of(f64)},
                                                      {"b", "F32", {1, 2}, bytes_of(f32)},
                                                      {"c", "F16", {2, 2}, bytes_of(f16)},
                                                      {"d", "BF16", {2}, bytes_of(bf16)}});
  const auto f = SafeTensorsFile::open(path);
  CHECK(f.entries().size() == 4);
  const auto a = f.load("a"), b = f.load("b"), c = f.load("c"), d = f.load("d");
  CHECK(a(1) == -2.25);
  CHECK(a(2) == 1e-300);
  CHECK(b(0, 0) == static_cast<double>(0.1f));
  CHECK(c(0, 0) == 1.0);
  CHECK(c(0, 1) == -2.0);
  CHECK(c(1, 0) == std::ldexp(1.0, -24));
  CHECK(c(1, 1) == 65504.0);
  CHECK(d(0) == 1.0);
  CHECK(d(1) == -5.0);
}

TEST_CASE("bad files are clear errors naming the file and the tensor") {
  const std::vector<float> four{1, 2, 3, 4};
  const auto good = write_file("good.safetensors", {{"w", "F32", {2, 2}, bytes_of(four)}});
  const auto missing = error_of([&] { SafeTensorsFile::open(fixture / "nope.safetensors"); });
  CHECK(missing.code() == ErrorCode::io);
  CHECK(std::string(missing.what()).find("nope.safetensors") != std::string::npos);

  const auto truncated = write_file("truncated.safetensors", {{"w", "F32", {2, 2}, bytes_of(four)}}, 3);
  const auto t = error_of([&] { SafeTensorsFile::open(truncated); });
  CHECK(t.code() == ErrorCode::format);
  CHECK(std::string(t.what()).find("tensor 'w'") != std::string::npos);

  const std::string not_json = "{\"w\": [";
  const auto garbage = write_file("garbage.safetensors", {}, 0, &not_json);
  CHECK(error_of([&] { SafeTensorsFile::open(garbage); }).code() == ErrorCode::format);

  const auto tiny = fs::temp_directory_path() / "mpcache_test_tiny.safetensors";
  std::ofstream(tiny, std::ios::binary) << "abc";
  CHECK(error_of([&] { SafeTensorsFile::open(tiny); }).code() == ErrorCode::format);

  const auto f = SafeTensorsFile::open(good);
  const auto absent = error_of([&] { (void)f.load("v"); });
  CHECK(std::string(absent.what()).find("no tensor named 'v'") != std::string::npos);
  const auto shape = error_of([&] { (void)f.load("w", {4}); });
  CHECK(std::string(shape.what()).find("has shape (2,2), expected (4)") != std::string::npos);

  const auto wrong_size = write_file("size.safetensors", {{"w", "F32", {3}, bytes_of(four)}});
  CHECK(error_of([&] { SafeTensorsFile::open(wrong_size); }).code() == ErrorCode::format);
  const auto dtype = write_file("dtype.safetensors", {{"w", "I8", {16}, bytes_of(four)}});
  CHECK(std::string(error_of([&] { SafeTensorsFile::open(dtype); }).what()).find("unsupported dtype I8") !=
        std::string::npos);
}

TEST_CASE("config errors name the key") {
  auto err = [](const std::string& text) {
    return std::string(error_of([&] { ModelConfig::from_json_text(text, "cfg"); }).what());
  };
  CHECK(err("{\"model_type\":\"llama\"}").find("missing 'hidden_size'") != std::string::npos);
  CHECK(err("{\"model_type\":\"llama\",\"hidden_size\":-4}").find("'hidden_size' must be a positive") !=
        std::string::npos);
  CHECK(err("{\"model_type\":\"bert\"}").find("model_type 'bert' is not supported") != std::string::npos);
  CHECK(err("[1,2]").find("not a JSON object") != std::string::npos);
  CHECK(err(R"({"model_type":"llama","hidden_size":16,"intermediate_size":8,"num_hidden_layers":1,
               "num_attention_heads":4,"num_key_value_heads":3,"max_position_embeddings":8,
               "vocab_size":4})")
            .find("cannot share 3") != std::string::npos);
  const auto gpt2 = ModelConfig::from_json_text(
      R"({"model_type":"gpt2","n_embd":768,"n_layer":12,"n_head":12,"n_positions":1024,"vocab_size":50257})",
      "gpt2");
  CHECK(gpt2.architecture == Architecture::gpt2);
  CHECK(gpt2.intermediate_size == 3072);
  CHECK(gpt2.head_dim == 64);
  CHECK(gpt2.tie_word_embeddings);
}
