// libFuzzer target for a client's request (ServeRequest::decode, then the
// leader's admission check, request_problem): every field is the client's
// choice. Decoding must give a request that encodes to the same bytes, or
// throw Error(protocol); the check must refuse (naming why) any request the
// fixture model cannot run, whatever its numbers (sums that wrap included),
// and what it accepts must fit the model's positions and the KV limit.
//   cmake --preset fuzz && cmake --build --preset fuzz
//   build/fuzz/tests/fuzz/fuzz_serve_request tests/fuzz/corpus/serve_request -max_total_time=60
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
import mpcache;

using namespace mpcache;

namespace {

const ModelConfig& config() {
  static const ModelConfig c = ModelConfig::from_json_file(std::filesystem::path(MPCACHE_SOURCE_DIR) /
                                                           "tools/model/fixture/config.json");
  return c;
}

const serve::ServeOptions& options() {
  static const serve::ServeOptions o = [] {
    serve::ServeOptions o;
    o.max_new_tokens = 64;
    o.kv_bytes_limit = std::uint64_t{16} << 20;
    return o;
  }();
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  serve::ServeRequest q;
  try {
    q = serve::ServeRequest::decode(bytes);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::protocol) __builtin_trap();
    return 0;
  }
  const auto again = q.encode();
  if (!std::equal(again.begin(), again.end(), bytes.begin(), bytes.end())) __builtin_trap();
  const std::string why = serve::request_problem(options(), config(), q);
  if (!why.empty()) return 0;
  const ModelConfig& c = config();
  if (q.prompt_length == 0 || q.new_tokens == 0 || q.new_tokens > options().max_new_tokens) __builtin_trap();
  if (q.prompt_length > c.max_positions || q.new_tokens > c.max_positions - q.prompt_length) __builtin_trap();
  for (auto t : q.stop_tokens)
    if (t >= c.vocab_size) __builtin_trap();
  if (serve::session_memory_bytes(c, q) > options().kv_bytes_limit) __builtin_trap();
  return 0;
}
