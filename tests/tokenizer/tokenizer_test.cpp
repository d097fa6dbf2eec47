// Tokenizers against reference vectors made by tokenizers no one here wrote
// (tools/tokenizer/make_vectors.mjs: npm's gpt-3-encoder and
// llama-tokenizer-js, Node's regex engine and ICU). Needs only the committed
// files in tests/fixtures/tokenizer; MPCACHE_SOURCE_DIR is the repository root.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include <nlohmann/json.hpp>

import mpcache.text;

#ifndef MPCACHE_SOURCE_DIR
#error "MPCACHE_SOURCE_DIR (the repository root, a string) must be defined"
#endif

namespace {

namespace fs = std::filesystem;
namespace mt = mpcache::text;
using nlohmann::json;
using Ids = std::vector<mt::TokenId>;

fs::path fixtures() { return fs::path(MPCACHE_SOURCE_DIR) / "tests" / "fixtures" / "tokenizer"; }

std::vector<json> read_jsonl(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot open " << file.string());
  std::vector<json> rows;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) rows.push_back(json::parse(line));
  return rows;
}

std::vector<std::string> corpus() {
  std::vector<std::string> lines;
  for (const json& j : read_jsonl(fixtures() / "corpus.jsonl")) lines.push_back(j.get<std::string>());
  REQUIRE(lines.size() >= 1000);
  return lines;
}

std::vector<Ids> reference_ids(const char* file) {
  std::vector<Ids> all;
  for (const json& j : read_jsonl(fixtures() / file)) all.push_back(j.get<Ids>());
  return all;
}

bool valid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      ++i;
      continue;
    }
    std::size_t n = 0;
    char32_t cp = 0;
    if (b >= 0xC2 && b < 0xE0) n = 1, cp = b & 0x1Fu;
    else if (b >= 0xE0 && b < 0xF0) n = 2, cp = b & 0x0Fu;
    else if (b >= 0xF0 && b < 0xF5) n = 3, cp = b & 0x07u;
    else return false;
    if (i + n >= s.size()) return false;
    for (std::size_t k = 1; k <= n; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if ((c & 0xC0u) != 0x80u) return false;
      cp = (cp << 6) | (c & 0x3Fu);
    }
    if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += n + 1;
  }
  return true;
}

std::string show(const Ids& ids) {
  std::ostringstream o;
  o << '[';
  for (std::size_t i = 0; i < ids.size(); ++i) o << (i ? "," : "") << ids[i];
  o << ']';
  return o.str();
}

// A fresh folder under the system temp directory, removed at scope exit.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() /
            ("mpcache-tokenizer-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }
  fs::path write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name, std::ios::binary) << text;
    return path_ / name;
  }

 private:
  fs::path path_;
};

std::string error_of(auto&& f) {
  try {
    f();
  } catch (const mt::TokenizerError& e) {
    return e.what();
  }
  return "(no error)";
}

// Every corpus line encodes to the reference ids; returns the number that do.
std::size_t count_exact(const mt::Tokenizer& tok, const std::vector<std::string>& lines, const std::vector<Ids>& expected,
                        mt::EncodeOptions options) {
  REQUIRE(lines.size() == expected.size());
  std::size_t exact = 0;
  int shown = 0;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const Ids got = tok.encode(lines[i], options);
    if (got == expected[i]) {
      ++exact;
    } else if (shown++ < 5) {
      MESSAGE("line " << i + 1 << " " << json(lines[i]).dump() << "\n  expected " << show(expected[i]) << "\n  got      "
                      << show(got));
    }
  }
  return exact;
}

void check_round_trips(const mt::Tokenizer& tok, const std::vector<std::string>& lines, mt::EncodeOptions options) {
  std::size_t ok = 0;
  std::size_t streamed_ok = 0;
  std::size_t chunks = 0;
  std::size_t held_back = 0;
  for (const std::string& line : lines) {
    const Ids ids = tok.encode(line, options);
    const std::string whole = tok.decode(ids);
    if (whole == line) ++ok;
    else if (ok + 5 > lines.size()) MESSAGE("round trip: " << json(line).dump() << " -> " << json(whole).dump());
    mt::StreamingDecoder stream(tok);
    std::string joined;
    bool pieces_valid = true;
    for (mt::TokenId id : ids) {
      const std::string piece = stream.push(id);
      pieces_valid = pieces_valid && valid_utf8(piece);
      held_back += stream.pending_bytes() > 0 ? 1 : 0;
      joined += piece;
      ++chunks;
    }
    const std::string last = stream.finish();
    pieces_valid = pieces_valid && valid_utf8(last);
    joined += last;
    if (joined == whole && pieces_valid) ++streamed_ok;
  }
  MESSAGE(tok.name() << ": decode(encode(x)) == x for " << ok << "/" << lines.size() << " lines; streaming == decode, "
                     << "in valid UTF-8 pieces, for " << streamed_ok << "/" << lines.size() << " (" << chunks
                     << " pushes, " << held_back << " of them held bytes back)");
  CHECK(ok == lines.size());
  CHECK(streamed_ok == lines.size());
  CHECK(held_back > 0);  // the corpus does split characters across tokens
}

const mt::EncodeOptions kAsReference{.add_bos = std::nullopt, .split_special = false};

}  // namespace

TEST_CASE("tokenizer: GPT-2 vocab.json + merges.txt gives gpt-3-encoder's ids for every corpus line") {
  const auto tok = mt::load_tokenizer(fixtures() / "gpt2");
  CHECK(tok->vocab_size() == 50257);
  CHECK(tok->bos() == 50256u);
  CHECK(tok->eos() == 50256u);
  CHECK_FALSE(tok->adds_bos());
  const auto lines = corpus();
  const auto expected = reference_ids("gpt2_ids.jsonl");
  const auto t0 = std::chrono::steady_clock::now();
  const std::size_t exact = count_exact(*tok, lines, expected, kAsReference);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MESSAGE("GPT-2 (vocab.json + merges.txt): " << exact << "/" << lines.size() << " lines exact; encoded in " << seconds << " s");
  CHECK(exact == lines.size());
  CHECK(seconds < 2.0);  // a few thousand lines: well under a second in an optimized build
  check_round_trips(*tok, lines, kAsReference);
}

TEST_CASE("tokenizer: GPT-2 as tokenizer.json gives the same ids") {
  const auto tok = mt::load_tokenizer(fixtures() / "gpt2-json");
  CHECK(tok->name() == "byte-level BPE (tokenizer.json)");
  CHECK(tok->vocab_size() == 50257);
  CHECK(tok->bos() == 50256u);
  CHECK(tok->eos_ids() == Ids{50256});
  CHECK(tok->is_special(50256));
  const auto lines = corpus();
  const std::size_t exact = count_exact(*tok, lines, reference_ids("gpt2_ids.jsonl"), kAsReference);
  MESSAGE("GPT-2 (tokenizer.json): " << exact << "/" << lines.size() << " lines exact");
  CHECK(exact == lines.size());
  check_round_trips(*tok, lines, kAsReference);
}

TEST_CASE("tokenizer: LLaMA tokenizer.json gives llama-tokenizer-js's ids for every corpus line") {
  const auto tok = mt::load_tokenizer(fixtures() / "llama");
  CHECK(tok->name() == "BPE with byte fallback (tokenizer.json)");
  CHECK(tok->vocab_size() == 32000);
  CHECK(tok->bos() == 1u);
  CHECK(tok->eos() == 2u);
  CHECK(tok->adds_bos());  // llama-tokenizer-js's add_bos_token=true, HF's default
  CHECK(tok->strips_leading_space());
  const auto lines = corpus();
  const auto expected = reference_ids("llama_ids.jsonl");
  const auto t0 = std::chrono::steady_clock::now();
  // The reference ran encode(text, add_bos_token=true, add_preceding_space=true):
  // BOS (from tokenizer_config.json) and a "▁" in front (the Prepend normalizer).
  const std::size_t exact = count_exact(*tok, lines, expected, kAsReference);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MESSAGE("LLaMA (tokenizer.json): " << exact << "/" << lines.size() << " lines exact; encoded in " << seconds << " s");
  CHECK(exact == lines.size());
  CHECK(seconds < 2.0);
  // decode skips BOS and drops the one leading space, as the reference's decode does.
  check_round_trips(*tok, lines, kAsReference);
  // Without BOS: the same ids minus the first.
  const Ids no_bos = tok->encode(lines[0], {.add_bos = false, .split_special = false});
  CHECK(no_bos == Ids(expected[0].begin() + 1, expected[0].end()));
}

TEST_CASE("tokenizer: a newer LLaMA-style tokenizer.json (Metaspace pre-tokenizer, prepend_scheme first) agrees") {
  json j = json::parse(std::ifstream(fixtures() / "llama" / "tokenizer.json"));
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "first"}, {"split", false}};
  j["decoder"] = {{"type", "Sequence"}, {"decoders", json::array({{{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "first"}, {"split", false}},
                                                                  {{"type", "ByteFallback"}}, {{"type", "Fuse"}}})}};
  TempDir dir;
  const auto tok = mt::load_tokenizer_json(dir.write("tokenizer.json", j.dump()));
  const auto lines = corpus();
  const auto expected = reference_ids("llama_ids.jsonl");
  // Metaspace adds "▁" only where the text does not start with one, so lines
  // that start with a space differ from the legacy Prepend normalizer.
  std::size_t compared = 0;
  std::size_t exact = 0;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].starts_with(' ')) continue;
    ++compared;
    exact += tok->encode(lines[i], kAsReference) == expected[i] ? 1 : 0;
  }
  MESSAGE("Metaspace form: " << exact << "/" << compared << " lines (not starting with a space) exact");
  CHECK(exact == compared);
  CHECK(tok->decode(tok->encode("Hello world")) == "Hello world");
}

TEST_CASE("tokenizer: pre-tokenizer splits equal Node's regex engine (GPT-2, LLaMA-3, Qwen2 patterns)") {
  using mt::SplitPattern;
  const auto lines = corpus();
  const auto splits = read_jsonl(fixtures() / "splits.jsonl");
  REQUIRE(splits.size() == lines.size());
  for (const auto& [name, pattern] : {std::pair{std::string("gpt2"), SplitPattern::gpt2},
                                      std::pair{std::string("llama3"), SplitPattern::llama3},
                                      std::pair{std::string("qwen2"), SplitPattern::qwen2}}) {
    std::size_t exact = 0;
    for (std::size_t i = 0; i < lines.size(); ++i) {
      std::vector<std::string_view> pieces;
      mt::split_by_pattern(pattern, lines[i], pieces);
      std::vector<std::size_t> lengths;
      for (auto p : pieces) lengths.push_back(p.size());
      if (lengths == splits[i][name].get<std::vector<std::size_t>>()) ++exact;
      else if (exact + 3 > i) MESSAGE(name << " line " << i + 1 << ": " << json(lines[i]).dump());
    }
    MESSAGE(name << " pattern: " << exact << "/" << lines.size() << " lines split exactly as Node's regex does");
    CHECK(exact == lines.size());
  }
}

TEST_CASE("tokenizer: \\s is Unicode White_Space, as in Hugging Face's Oniguruma (not JS's \\s)") {
  // The corpus leaves out the two characters on which JS and White_Space
  // disagree; this pins down what we do with them.
  using mt::SplitPattern;
  auto lengths = [](std::string_view text) {
    std::vector<std::string_view> pieces;
    mt::split_by_pattern(SplitPattern::gpt2, text, pieces);
    std::vector<std::size_t> n;
    for (auto p : pieces) n.push_back(p.size());
    return n;
  };
  CHECK(lengths("a \xC2\x85  b") == std::vector<std::size_t>{1, 4, 2});   // U+0085 NEL is a space
  CHECK(lengths("a \xEF\xBB\xBF!b") == std::vector<std::size_t>{1, 5, 1});  // U+FEFF is not: " \uFEFF!" is one piece
}

TEST_CASE("tokenizer: NFC equals Node's String.prototype.normalize") {
  const auto pairs = read_jsonl(fixtures() / "nfc.jsonl");
  std::size_t exact = 0;
  for (const json& p : pairs) {
    const auto in = p[0].get<std::string>();
    const auto want = p[1].get<std::string>();
    const std::string got = mt::to_nfc(in);
    if (got == want) ++exact;
    else MESSAGE("NFC of " << json(in).dump() << ": expected " << json(want).dump() << ", got " << json(got).dump());
  }
  MESSAGE("NFC: " << exact << "/" << pairs.size() << " exact");
  CHECK(exact == pairs.size());
}

TEST_CASE("tokenizer: LLaMA-3 and Qwen2 style byte-level tokenizer.json files load and round-trip") {
  const json base = json::parse(std::ifstream(fixtures() / "gpt2-json" / "tokenizer.json"));
  const auto lines = corpus();
  for (const std::string s : {"llama3", "qwen2", "smollm"}) {
    CAPTURE(s);
    json j = base;
    const auto pattern = std::string(mt::pattern_text(
        s == "qwen2" ? mt::SplitPattern::qwen2 : mt::SplitPattern::llama3));
    if (s == "smollm") {
      j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", json::array({{{"type", "Digits"}, {"individual_digits", true}},
                                                                                 {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}})}};
    } else {
      j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", json::array({
          {{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", "Isolated"}, {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}})}};
      j["model"]["ignore_merges"] = true;
    }
    if (s == "qwen2") j["normalizer"] = {{"type", "NFC"}};
    TempDir dir;
    const auto tok = mt::load_tokenizer_json(dir.write("tokenizer.json", j.dump()));
    std::size_t ok = 0;
    for (const std::string& line : lines) {
      const std::string want = s == "qwen2" ? mt::to_nfc(line) : line;
      ok += tok->decode(tok->encode(line, kAsReference)) == want ? 1 : 0;
    }
    MESSAGE(s << ": decode(encode(x)) == x" << std::string(s == "qwen2" ? " (after NFC)" : "") << " for " << ok << "/" << lines.size());
    CHECK(ok == lines.size());
    if (s == "smollm") CHECK(tok->encode("2024").size() == 4);
    if (s == "llama3") CHECK(tok->encode("2024").size() == 2);  // \p{N}{1,3}: "202" "4"
    if (s == "qwen2") CHECK(tok->encode("e\xCC\x81") == tok->encode("\xC3\xA9"));  // NFC first
  }
}

TEST_CASE("tokenizer: special tokens in text, and as text when asked") {
  const auto gpt2 = mt::load_tokenizer(fixtures() / "gpt2");
  const Ids split = gpt2->encode("Hello<|endoftext|>world");
  CHECK(split == Ids{15496, 50256, 6894});
  CHECK(gpt2->encode("Hello<|endoftext|>world", {.split_special = false}).size() > 3);
  CHECK(gpt2->decode(split) == "Helloworld");
  CHECK(gpt2->decode(split, {.skip_special = false}) == "Hello<|endoftext|>world");
  CHECK(gpt2->token_to_id("\xC4\xA0the") == 262u);  // "Ġthe"
  CHECK(gpt2->token_bytes(262) == " the");

  const auto llama = mt::load_tokenizer(fixtures() / "llama");
  const Ids ids = llama->encode("<s>Hello</s>");
  REQUIRE(ids.size() >= 4);
  CHECK(ids[0] == 1u);
  CHECK(ids[1] == 1u);
  CHECK(ids.back() == 2u);
  CHECK(llama->decode(ids) == "Hello");
  CHECK(llama->encode("") == Ids{1});
  CHECK(llama->encode("", {.add_bos = false}).empty());
  CHECK(llama->token_to_id("<0x0A>") == 13u);
  CHECK(llama->token_bytes(13) == "\n");
  CHECK(llama->token_bytes(29871) == " ");
}

TEST_CASE("tokenizer: streaming decode holds back split characters and matches decode") {
  const auto gpt2 = mt::load_tokenizer(fixtures() / "gpt2");
  const std::string text = "a\xF0\x9F\x98\x80" "b";  // a😀b: the emoji is several byte tokens
  const Ids ids = gpt2->encode(text);
  mt::StreamingDecoder stream(*gpt2);
  std::string joined;
  bool held = false;
  for (mt::TokenId id : ids) {
    const std::string piece = stream.push(id);
    CHECK(valid_utf8(piece));
    held = held || stream.pending_bytes() > 0;
    joined += piece;
  }
  joined += stream.finish();
  CHECK(held);
  CHECK(joined == text);

  // Ids that do not make UTF-8: U+FFFD, the same in both ways of decoding.
  const auto e4 = gpt2->token_to_id("\xC3\xA4");  // "ä" in the byte alphabet: byte 0xE4
  REQUIRE(e4.has_value());
  const Ids bad{*e4, 64, *e4};  // 0xE4 'a' 0xE4
  const std::string whole = gpt2->decode(bad);
  CHECK(whole == "\xEF\xBF\xBD" "a" "\xEF\xBF\xBD");
  mt::StreamingDecoder s2(*gpt2);
  std::string streamed;
  for (mt::TokenId id : bad) streamed += s2.push(id);
  CHECK(s2.pending_bytes() == 1);
  streamed += s2.finish();
  CHECK(streamed == whole);

  // LLaMA: the leading space goes only at the start of the text.
  const auto llama = mt::load_tokenizer(fixtures() / "llama");
  const Ids hello = llama->encode("Hello world");
  mt::StreamingDecoder from_start(*llama);
  std::string a;
  for (mt::TokenId id : hello) a += from_start.push(id);
  CHECK(a + from_start.finish() == "Hello world");
  mt::StreamingDecoder continuation(*llama, {}, false);
  std::string b;
  for (mt::TokenId id : hello) b += continuation.push(id);
  CHECK(b + continuation.finish() == " Hello world");
}

TEST_CASE("tokenizer: byte tokenizer is the identity on bytes") {
  const auto tok = mt::make_byte_tokenizer();
  CHECK(tok->name() == "bytes");
  CHECK(tok->vocab_size() == 256);
  CHECK_FALSE(tok->bos().has_value());
  CHECK_FALSE(tok->eos().has_value());
  const std::string text("h\xC3\xA9\0\xFF", 5);
  const Ids ids = tok->encode(text);
  CHECK(ids == Ids{'h', 0xC3, 0xA9, 0, 0xFF});
  CHECK(tok->decode(Ids{'h', 0xC3, 0xA9}) == "h\xC3\xA9");
  CHECK(tok->decode(ids) == std::string("h\xC3\xA9\0\xEF\xBF\xBD", 7));
  mt::StreamingDecoder stream(*tok);
  CHECK(stream.push(0xC3).empty());
  CHECK(stream.push(0xA9) == "\xC3\xA9");
  CHECK(error_of([&] { (void)tok->decode(Ids{256}); }).find("out of range") != std::string::npos);
}

TEST_CASE("tokenizer: malformed and missing files are refused with clear messages") {
  const fs::path gpt2 = fixtures() / "gpt2";
  SUBCASE("a merges.txt line with one field") {
    TempDir dir;
    fs::copy_file(gpt2 / "vocab.json", dir.path() / "vocab.json");
    dir.write("merges.txt", "#version: 0.2\n\xC4\xA0 t\nhe\n");
    const std::string e = error_of([&] { (void)mt::load_tokenizer(dir.path()); });
    CHECK(e.find("merges.txt") != std::string::npos);
    CHECK(e.find("line 3") != std::string::npos);
    CHECK(e.find("expected two tokens") != std::string::npos);
  }
  SUBCASE("a merge whose token is not in the vocabulary") {
    TempDir dir;
    fs::copy_file(gpt2 / "vocab.json", dir.path() / "vocab.json");
    dir.write("merges.txt", "#version: 0.2\nq \xE2\x82\xAC\n");
    const std::string e = error_of([&] { (void)mt::load_tokenizer(dir.path()); });
    CHECK(e.find("line 2") != std::string::npos);
    CHECK(e.find("not in the vocabulary") != std::string::npos);
  }
  SUBCASE("tokenizer.json with an unknown model type") {
    TempDir dir;
    dir.write("tokenizer.json", R"({"model": {"type": "WordPiece", "vocab": {}}})");
    const std::string e = error_of([&] { (void)mt::load_tokenizer(dir.path()); });
    CHECK(e.find("tokenizer.json") != std::string::npos);
    CHECK(e.find("\"WordPiece\" is not supported") != std::string::npos);
  }
  SUBCASE("tokenizer.json with an unknown pre-tokenizer regex, normalizer, malformed merge, bad JSON") {
    json j = json::parse(std::ifstream(fixtures() / "gpt2-json" / "tokenizer.json"));
    TempDir dir;
    json a = j;
    a["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "\\w+"}}}, {"behavior", "Isolated"}};
    CHECK(error_of([&] { (void)mt::load_tokenizer_json(dir.write("a.json", a.dump())); }).find("the regex \"\\w+\" is not one of the supported") != std::string::npos);
    json b = j;
    b["normalizer"] = {{"type", "NFKC"}};
    CHECK(error_of([&] { (void)mt::load_tokenizer_json(dir.write("b.json", b.dump())); }).find("normalizer \"NFKC\" is not supported") != std::string::npos);
    json c = j;
    c["model"]["merges"][7] = "in";
    const std::string ec = error_of([&] { (void)mt::load_tokenizer_json(dir.write("c.json", c.dump())); });
    CHECK(ec.find("model.merges[7]") != std::string::npos);
    CHECK(ec.find("c.json") != std::string::npos);
    CHECK(error_of([&] { (void)mt::load_tokenizer_json(dir.write("d.json", "{\"model\": ")); }).find("d.json: not valid JSON") != std::string::npos);
  }
  SUBCASE("missing files") {
    TempDir dir;
    const std::string none = error_of([&] { (void)mt::load_tokenizer(dir.path()); });
    CHECK(none.find("tokenizer.json") != std::string::npos);
    CHECK(none.find("vocab.json + merges.txt") != std::string::npos);
    CHECK(none.find("tokenizer.model") != std::string::npos);
    fs::copy_file(gpt2 / "vocab.json", dir.path() / "vocab.json");
    CHECK(error_of([&] { (void)mt::load_tokenizer(dir.path()); }).find("vocab.json but no merges.txt") != std::string::npos);
    CHECK(error_of([&] { (void)mt::load_tokenizer(dir.path() / "nope"); }).find("not a directory") != std::string::npos);
    CHECK(error_of([&] { (void)mt::load_gpt2_vocab_merges(dir.path() / "vocab.json", dir.path() / "merges.txt"); })
              .find("merges.txt: no such file") != std::string::npos);
    TempDir sp;
    sp.write("tokenizer.model", "x");
    CHECK(error_of([&] { (void)mt::load_tokenizer(sp.path()); }).find("tokenizer.model: not a SentencePiece model") !=
          std::string::npos);
  }
  SUBCASE("a config naming a token that does not exist") {
    TempDir dir;
    fs::copy_file(gpt2 / "vocab.json", dir.path() / "vocab.json");
    fs::copy_file(gpt2 / "merges.txt", dir.path() / "merges.txt");
    dir.write("tokenizer_config.json", R"({"eos_token": "<|nope|>"})");
    const std::string e = error_of([&] { (void)mt::load_tokenizer(dir.path()); });
    CHECK(e.find("tokenizer_config.json") != std::string::npos);
    CHECK(e.find("<|nope|>") != std::string::npos);
    dir.write("tokenizer_config.json", "{}");
    dir.write("config.json", R"({"eos_token_id": 99999})");
    CHECK(error_of([&] { (void)mt::load_tokenizer(dir.path()); }).find("config.json: \"eos_token_id\": 99999") != std::string::npos);
    dir.write("config.json", R"({"eos_token_id": [50256, 198]})");
    CHECK(mt::load_tokenizer(dir.path())->eos_ids() == Ids{50256, 198});
  }
  SUBCASE("ids out of range and text that is not UTF-8") {
    const auto tok = mt::load_tokenizer(gpt2);
    const std::string e = error_of([&] { (void)tok->decode(Ids{15496, 50257}); });
    CHECK(e.find("token id 50257 is out of range (vocabulary size 50257)") != std::string::npos);
    mt::StreamingDecoder stream(*tok);
    CHECK(error_of([&] { (void)stream.push(1u << 30); }).find("out of range") != std::string::npos);
    CHECK(error_of([&] { (void)tok->encode("ok\xC3(") ; }).find("not valid UTF-8 (at byte offset 2)") != std::string::npos);
  }
}

TEST_CASE("tokenizer: a model over bytes says so in its folder's mpcache.json") {
  const fs::path root(MPCACHE_SOURCE_DIR);
  // Our bundled model: {"tokenizer": "none"}, no tokenizer files.
  const auto bundled = mt::load_tokenizer(root / "tools/model/austen-byte");
  CHECK(bundled->name() == "bytes");
  CHECK(bundled->eos_ids().empty());
  TempDir dir;
  dir.write("mpcache.json", R"({"tokenizer": "none"})");
  CHECK(mt::load_tokenizer(dir.path())->encode("ab") == Ids{'a', 'b'});
  dir.write("mpcache.json", R"({"tokenizer": "bytes"})");
  CHECK(error_of([&] { (void)mt::load_tokenizer(dir.path()); }).find("mpcache.json: \"tokenizer\": \"bytes\" is not \"none\"") != std::string::npos);
  dir.write("mpcache.json", R"({"tokenizer": "none", "tokeniser": 1})");
  CHECK(error_of([&] { (void)mt::load_tokenizer(dir.path()); }).find("unknown key \"tokeniser\"") != std::string::npos);
  // Saying none beside tokenizer files is ambiguous: refused.
  dir.write("mpcache.json", R"({"tokenizer": "none"})");
  fs::copy_file(fixtures() / "gpt2-json" / "tokenizer.json", dir.path() / "tokenizer.json");
  CHECK(error_of([&] { (void)mt::load_tokenizer(dir.path()); }).find("but the folder has tokenizer.json too") != std::string::npos);
  // Without it, no tokenizer: the message names it among the files looked for.
  TempDir bare;
  CHECK(error_of([&] { (void)mt::load_tokenizer(bare.path()); }).find("mpcache.json's \"tokenizer\": \"none\"") != std::string::npos);
}

TEST_CASE("tokenizer: the tiny GPT-2 fixture's cut-down GPT-2 vocabulary encodes as its script did") {
  // tools/model/make_tiny_gpt2.py: GPT-2's first 255 merges, <|endoftext|> last (511).
  const fs::path dir = fs::path(MPCACHE_SOURCE_DIR) / "tests/fixtures/model/gpt2-tiny";
  const json expected = json::parse(std::ifstream(dir / "expected.json"));
  const auto tok = mt::load_tokenizer(dir);
  CHECK(tok->vocab_size() == 512);
  CHECK(tok->eos_ids() == Ids{511});
  CHECK_FALSE(tok->adds_bos());
  const std::string prompt = expected["prompt"];
  CHECK(tok->encode(prompt) == expected["prompt_ids"].get<Ids>());
  const Ids tokens = expected["tokens"].get<Ids>();
  CHECK(tok->decode(tokens) == expected["text"].get<std::string>());
}

TEST_CASE("tokenizer: a SentencePiece tokenizer.model gives the sentencepiece package's ids and text") {
  // tools/model/make_sentencepiece.py: a BPE model with byte fallback trained
  // on the corpus, ids and decoded text from Python's sentencepiece.
  const fs::path dir = fixtures() / "sentencepiece";
  const auto tok = mt::load_tokenizer(dir);
  CHECK(tok->name() == "SentencePiece (tokenizer.model)");
  CHECK(tok->vocab_size() == 1000);
  CHECK(tok->bos() == mt::TokenId{1});
  CHECK(tok->eos_ids() == Ids{2});
  CHECK(tok->adds_bos());
  std::size_t lines = 0, exact = 0, round_trips = 0, with_bytes = 0;
  for (const json& row : read_jsonl(dir / "vectors.jsonl")) {
    const std::string text = row["text"];
    const Ids ids = row["ids"].get<Ids>();
    // As sentencepiece encodes: no BOS, "<s>" in text is text.
    const Ids ours = tok->encode(text, {.add_bos = false, .split_special = false});
    ++lines;
    exact += ours == ids;
    round_trips += tok->decode(ours) == row["decoded"].get<std::string>();
    with_bytes += std::any_of(ids.begin(), ids.end(), [](mt::TokenId id) { return id >= 3 && id < 259; });
    if (ours != ids && lines == exact + 1) MESSAGE("first line whose ids differ: " << json(text).dump());
  }
  CHECK(lines == 300);
  CHECK(exact == lines);
  CHECK(round_trips == lines);
  CHECK(with_bytes > 50);  // byte fallback exercised (<0x..> pieces)
  // Hugging Face's reading: BOS first, <s> and </s> in text are the tokens.
  const Ids hello = tok->encode("<s>Hello</s>");
  REQUIRE(hello.size() >= 3);
  CHECK(hello.front() == 1);
  CHECK(hello[1] == 1);
  CHECK(hello.back() == 2);
  CHECK(tok->decode(hello) == "Hello");
  // Streaming gives decode's text, a character never split.
  const Ids emoji = tok->encode("caf\xC3\xA9 \xF0\x9F\x98\x80 ok", {.add_bos = false});
  mt::StreamingDecoder stream(*tok);
  std::string streamed;
  for (mt::TokenId id : emoji) streamed += stream.push(id);
  streamed += stream.finish();
  CHECK(streamed == "caf\xC3\xA9 \xF0\x9F\x98\x80 ok");
}
