// The public config travels as a digest in the job header: a party whose
// config.json gives other shapes than the client's refuses the job at
// set-up, naming its file, instead of failing later on a message of the
// wrong size.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>
import mpcache;

#include "../support/run_task.hpp"
#include "../support/fixture_generation.hpp"

using namespace mpcache;
namespace fs = std::filesystem;

namespace {
std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

const std::string fixture_config = read_text(testing::fixture_dir() / "config.json");
}  // namespace

TEST_SUITE("config digest") {
  TEST_CASE("the digest is of the parsed fields: layout, key order and unread keys do not change it") {
    const ModelConfig c = ModelConfig::from_json_text(fixture_config, "fixture");
    const std::string minimal =
        R"({"rms_norm_eps": 1e-05, "head_dim": 8, "num_key_value_heads": 1, "num_attention_heads": 2,)"
        R"("num_hidden_layers": 2, "intermediate_size": 40, "hidden_size": 16, "vocab_size": 256,)"
        R"("max_position_embeddings": 128, "_name_or_path": "elsewhere"})";
    CHECK(ModelConfig::from_json_text(minimal, "minimal").digest() == c.digest());
    const auto one_layer_fewer = replaced(fixture_config, "\"num_hidden_layers\": 2", "\"num_hidden_layers\": 1");
    CHECK(ModelConfig::from_json_text(one_layer_fewer, "fewer").digest() != c.digest());
    const auto other_eps = replaced(fixture_config, "\"rms_norm_eps\": 1e-05", "\"rms_norm_eps\": 1e-06");
    CHECK(ModelConfig::from_json_text(other_eps, "eps").digest() != c.digest());
    // GPT-2's key spellings name the same fields.
    const std::string gpt2 = R"({"model_type": "gpt2", "vocab_size": 256, "n_embd": 16, "n_layer": 2, "n_head": 2,)"
                             R"("n_positions": 128})";
    const std::string gpt2_long = R"({"model_type": "gpt2", "vocab_size": 256, "hidden_size": 16,)"
                                  R"("num_hidden_layers": 2, "num_attention_heads": 2, "max_position_embeddings": 128})";
    CHECK(ModelConfig::from_json_text(gpt2, "a").digest() == ModelConfig::from_json_text(gpt2_long, "b").digest());
  }

  TEST_CASE("a model owner whose config.json has one layer fewer is refused at set-up, naming the file") {
    const fs::path odd = fs::temp_directory_path() / ("mpcache-config-digest-" + std::to_string(::getpid()));
    fs::create_directories(odd);
    const fs::path odd_config = odd / "config.json";
    std::ofstream(odd_config) << replaced(fixture_config, "\"num_hidden_layers\": 2", "\"num_hidden_layers\": 1");
    fs::copy_file(testing::fixture_dir() / "model.safetensors", odd / "model.safetensors",
                  fs::copy_options::overwrite_existing);
    Scheduler scheduler;
    InProcessNetwork network(scheduler, 3);
    std::string what;
    try {
      (void)run_parties(scheduler, network, [&](PartyId id) -> Task<GenerationResult> {
        GenerationJob job;
        job.model_dir = id == 1 ? odd : testing::fixture_dir();  // party 1 is the model owner
        job.new_tokens = 1;
        job.rss3 = {.exact_truncation = true, .insecure_seed = 5};
        if (id == 0) job.prompt = testing::fixture_prompt();
        co_return co_await generate_party(network.endpoint(id), std::move(job));
      });
    } catch (const Error& e) {
      what = e.what();
    }
    fs::remove_all(odd);
    CAPTURE(what);
    CHECK(what.find("party 1's " + odd_config.string() + " is not the client's (party 0)") != std::string::npos);
    CHECK(what.find("This one gives llama, layers 1, hidden 16") != std::string::npos);
    CHECK(what.find("sent") == std::string::npos);  // not a message of the wrong size, later
  }
}
