// Hugging Face tokenizer.json with a BPE model.
module;
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <nlohmann/json.hpp>
module mpcache.text;
import mpcache.std;
import :bpe_tokenizer;
import :files;

namespace mpcache::text {

namespace {

using nlohmann::json;
using namespace detail;

constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // "▁"

// Reads one tokenizer.json; every error names the file and the JSON key.
class JsonReader {
 public:
  explicit JsonReader(std::filesystem::path path) : path_(std::move(path)), file_(path_.string()) {}

  std::unique_ptr<Tokenizer> read() {
    const json root = read_json_file(path_);
    if (!root.is_object()) fail("", "expected a JSON object");
    const json& model = member(root, "model", "");
    if (!model.is_object()) fail("model", "expected an object");
    const std::string type = model.contains("type") ? str(model["type"], "model.type") : std::string("BPE");
    if (type != "BPE")
      fail("model.type", "model type \"" + type + "\" is not supported (supported: BPE)");

    std::vector<Normalizer> normalizers;
    if (root.contains("normalizer") && !root["normalizer"].is_null()) add_normalizer(root["normalizer"], "normalizer", normalizers);
    std::vector<PreTokenizer> pre;
    if (root.contains("pre_tokenizer") && !root["pre_tokenizer"].is_null()) add_pre_tokenizer(root["pre_tokenizer"], "pre_tokenizer", pre);
    bool byte_level = false;
    for (std::size_t i = 0; i < pre.size(); ++i) {
      if (pre[i].kind != PreTokenizer::Kind::byte_level) continue;
      if (i + 1 != pre.size()) fail("pre_tokenizer", "ByteLevel must be the last pre-tokenizer");
      byte_level = true;
    }
    DecodeSpec decode;
    if (root.contains("decoder") && !root["decoder"].is_null()) add_decoder(root["decoder"], "decoder", decode);

    BpeModel::Options options;
    options.symbols = byte_level ? BpeModel::Symbols::bytes : BpeModel::Symbols::characters;
    options.byte_fallback = boolean(model, "byte_fallback", "model", false);
    options.fuse_unk = boolean(model, "fuse_unk", "model", false);
    options.ignore_merges = boolean(model, "ignore_merges", "model", false);
    if (model.contains("dropout") && !model["dropout"].is_null() &&
        !(model["dropout"].is_number() && model["dropout"].get<double>() == 0.0))
      fail("model.dropout", "BPE dropout is not supported (it is for training)");
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
      if (model.contains(key) && !model[key].is_null() && !str(model[key], std::string("model.") + key).empty())
        fail(std::string("model.") + key, "a non-empty value is not supported");

    VocabPieces pieces = read_vocab(member(model, "vocab", "model"), file_ + ": model.vocab", byte_level);
    if (model.contains("unk_token") && !model["unk_token"].is_null()) {
      const std::string unk = str(model["unk_token"], "model.unk_token");
      const std::string key = byte_level ? merge_side(unk, true, file_ + ": model.unk_token") : unk;
      for (std::size_t id = 0; id < pieces.pieces.size() && !options.unk; ++id)
        if (pieces.pieces[id] == key) options.unk = static_cast<TokenId>(id);
      if (!options.unk) fail("model.unk_token", "\"" + unk + "\" is not in the vocabulary");
    }
    BpeModel bpe(std::move(pieces.pieces), options, file_);
    read_merges(member(model, "merges", "model"), byte_level, bpe);

    const std::string name = byte_level ? "byte-level BPE (tokenizer.json)"
                             : options.byte_fallback ? "BPE with byte fallback (tokenizer.json)"
                                                     : "BPE (tokenizer.json)";
    auto tok = std::make_unique<BpeTokenizer>(name, std::move(bpe), std::move(normalizers), std::move(pre),
                                              std::move(decode), std::move(pieces.odd));
    if (root.contains("added_tokens") && !root["added_tokens"].is_null()) add_tokens(root["added_tokens"], *tok);
    if (root.contains("post_processor") && !root["post_processor"].is_null()) post_processor(root["post_processor"], *tok);
    return tok;
  }

 private:
  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw TokenizerError(file_ + ": " + (key.empty() ? "" : key + ": ") + what);
  }
  const json& member(const json& obj, const char* key, const std::string& at) const {
    if (!obj.is_object() || !obj.contains(key)) fail(at, std::string("missing \"") + key + "\"");
    return obj[key];
  }
  std::string str(const json& v, const std::string& at) const {
    if (!v.is_string()) fail(at, "expected a string, found " + v.dump());
    return v.get<std::string>();
  }
  bool boolean(const json& obj, const char* key, const std::string& at, bool fallback) const {
    if (!obj.contains(key) || obj[key].is_null()) return fallback;
    if (!obj[key].is_boolean()) fail(at + "." + key, "expected true or false, found " + obj[key].dump());
    return obj[key].get<bool>();
  }
  std::string type_of(const json& v, const std::string& at) const {
    if (!v.is_object()) fail(at, "expected an object");
    return str(member(v, "type", at), at + ".type");
  }
  // A {"String": s} pattern (Replace, Split); regexes only where named.
  std::string string_pattern(const json& v, const std::string& at) const {
    const json& p = member(v, "pattern", at);
    if (p.is_object() && p.contains("String")) return str(p["String"], at + ".pattern.String");
    fail(at + ".pattern", "only {\"String\": ...} patterns are supported here, found " + p.dump());
  }

  void add_normalizer(const json& v, const std::string& at, std::vector<Normalizer>& out) const {
    const std::string type = type_of(v, at);
    if (type == "Sequence") {
      const json& list = member(v, "normalizers", at);
      if (!list.is_array()) fail(at + ".normalizers", "expected a list");
      for (std::size_t i = 0; i < list.size(); ++i) add_normalizer(list[i], at + ".normalizers[" + std::to_string(i) + "]", out);
    } else if (type == "Prepend") {
      out.push_back({Normalizer::Kind::prepend, "", str(member(v, "prepend", at), at + ".prepend")});
    } else if (type == "Replace") {
      const std::string from = string_pattern(v, at);
      if (from.empty()) fail(at + ".pattern", "empty pattern");
      out.push_back({Normalizer::Kind::replace, from, str(member(v, "content", at), at + ".content")});
    } else if (type == "NFC") {
      out.push_back({Normalizer::Kind::nfc, "", ""});
    } else {
      fail(at, "normalizer \"" + type + "\" is not supported (supported: Sequence, Prepend, Replace, NFC)");
    }
  }

  void add_pre_tokenizer(const json& v, const std::string& at, std::vector<PreTokenizer>& out) const {
    const std::string type = type_of(v, at);
    PreTokenizer p;
    if (type == "Sequence") {
      const json& list = member(v, "pretokenizers", at);
      if (!list.is_array()) fail(at + ".pretokenizers", "expected a list");
      for (std::size_t i = 0; i < list.size(); ++i) add_pre_tokenizer(list[i], at + ".pretokenizers[" + std::to_string(i) + "]", out);
      return;
    }
    if (type == "ByteLevel") {
      p.kind = PreTokenizer::Kind::byte_level;
      p.add_prefix_space = boolean(v, "add_prefix_space", at, true);
      p.use_regex = boolean(v, "use_regex", at, true);
    } else if (type == "Split") {
      p.kind = PreTokenizer::Kind::split;
      const json& pattern = member(v, "pattern", at);
      if (!pattern.is_object() || !pattern.contains("Regex"))
        fail(at + ".pattern", "only {\"Regex\": ...} patterns are supported, found " + pattern.dump());
      const std::string regex = str(pattern["Regex"], at + ".pattern.Regex");
      const auto known = recognize_split_pattern(regex);
      if (!known)
        fail(at + ".pattern.Regex", "the regex \"" + regex +
                                        "\" is not one of the supported ones (those of GPT-2, LLaMA-3 and Qwen2)");
      p.pattern = *known;
      const std::string behavior = v.contains("behavior") ? str(v["behavior"], at + ".behavior") : "Isolated";
      if (behavior != "Isolated") fail(at + ".behavior", "\"" + behavior + "\" is not supported (supported: Isolated)");
      if (boolean(v, "invert", at, false)) fail(at + ".invert", "true is not supported");
    } else if (type == "Metaspace") {
      p.kind = PreTokenizer::Kind::metaspace;
      metaspace_options(v, at, p.replacement, p.prepend);
      p.split = boolean(v, "split", at, true);
    } else if (type == "Digits") {
      p.kind = PreTokenizer::Kind::digits;
      p.individual_digits = boolean(v, "individual_digits", at, false);
    } else {
      fail(at, "pre-tokenizer \"" + type + "\" is not supported (supported: Sequence, ByteLevel, Split, Metaspace, Digits)");
    }
    out.push_back(std::move(p));
  }

  void metaspace_options(const json& v, const std::string& at, std::string& replacement, PrependScheme& scheme) const {
    replacement = v.contains("replacement") ? str(v["replacement"], at + ".replacement") : std::string(kMetaspace);
    if (replacement.empty()) fail(at + ".replacement", "empty");
    scheme = PrependScheme::always;
    if (v.contains("prepend_scheme") && !v["prepend_scheme"].is_null()) {
      const std::string s = str(v["prepend_scheme"], at + ".prepend_scheme");
      if (s == "always") scheme = PrependScheme::always;
      else if (s == "first") scheme = PrependScheme::first;
      else if (s == "never") scheme = PrependScheme::never;
      else fail(at + ".prepend_scheme", "\"" + s + "\" is not one of always, first, never");
    } else if (!boolean(v, "add_prefix_space", at, true)) {
      scheme = PrependScheme::never;
    }
  }

  void add_decoder(const json& v, const std::string& at, DecodeSpec& d) const {
    const std::string type = type_of(v, at);
    if (type == "Sequence") {
      const json& list = member(v, "decoders", at);
      if (!list.is_array()) fail(at + ".decoders", "expected a list");
      for (std::size_t i = 0; i < list.size(); ++i) add_decoder(list[i], at + ".decoders[" + std::to_string(i) + "]", d);
    } else if (type == "ByteLevel" || type == "Fuse") {
      // ByteLevel: the model's pieces are raw bytes already. Fuse: we always fuse.
    } else if (type == "ByteFallback") {
      d.byte_fallback = true;
    } else if (type == "Replace") {
      if (!d.replace_from.empty()) fail(at, "more than one Replace decoder is not supported");
      d.replace_from = string_pattern(v, at);
      d.replace_to = str(member(v, "content", at), at + ".content");
    } else if (type == "Strip") {
      const std::string content = str(member(v, "content", at), at + ".content");
      const json& start = member(v, "start", at);
      const json& stop = member(v, "stop", at);
      if (content != " " || !start.is_number_integer() || start.get<int>() != 1 || !stop.is_number_integer() ||
          stop.get<int>() != 0)
        fail(at, "only Strip of one leading space (content \" \", start 1, stop 0) is supported");
      d.strip_leading_space = true;
    } else if (type == "Metaspace") {
      std::string replacement;
      PrependScheme scheme{};
      metaspace_options(v, at, replacement, scheme);
      d.replace_from = replacement;
      d.replace_to = " ";
      d.strip_leading_space = scheme != PrependScheme::never;
    } else {
      fail(at, "decoder \"" + type + "\" is not supported (supported: Sequence, ByteLevel, ByteFallback, Fuse, Replace, Strip, Metaspace)");
    }
  }

  void read_merges(const json& merges, bool byte_level, BpeModel& bpe) const {
    if (!merges.is_array()) fail("model.merges", "expected a list");
    for (std::size_t i = 0; i < merges.size(); ++i) {
      const std::string at = "model.merges[" + std::to_string(i) + "]";
      const json& m = merges[i];
      std::string left;
      std::string right;
      if (m.is_string()) {
        const std::string s = m.get<std::string>();
        const std::size_t space = s.find(' ');
        if (space == std::string::npos || space == 0 || space + 1 == s.size() || s.find(' ', space + 1) != std::string::npos)
          fail(at, "expected two tokens separated by one space, found \"" + s + "\"");
        left = s.substr(0, space);
        right = s.substr(space + 1);
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        left = m[0].get<std::string>();
        right = m[1].get<std::string>();
      } else {
        fail(at, "expected \"left right\" or [\"left\", \"right\"], found " + m.dump());
      }
      bpe.add_merge(merge_side(left, byte_level, file_ + ": " + at), merge_side(right, byte_level, file_ + ": " + at), at);
    }
  }

  void add_tokens(const json& list, Tokenizer& tok) const {
    if (!list.is_array()) fail("added_tokens", "expected a list");
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string at = "added_tokens[" + std::to_string(i) + "]";
      const json& t = list[i];
      const json& id = member(t, "id", at);
      if (!id.is_number_integer() || id.get<std::int64_t>() < 0 || id.get<std::int64_t>() >= (std::int64_t{1} << 24))
        fail(at + ".id", "expected an id in [0, 2^24), found " + id.dump());
      Tokenizer::AddedToken a;
      a.id = static_cast<TokenId>(id.get<std::int64_t>());
      a.content = str(member(t, "content", at), at + ".content");
      if (a.content.empty()) fail(at + ".content", "empty");
      a.special = boolean(t, "special", at, false);
      a.single_word = boolean(t, "single_word", at, false);
      a.lstrip = boolean(t, "lstrip", at, false);
      a.rstrip = boolean(t, "rstrip", at, false);
      try {
        tok.add_token(std::move(a));
      } catch (const TokenizerError& e) {
        fail(at, e.what());
      }
    }
  }

  // TemplateProcessing whose "single" template starts with a special token:
  // that token is BOS and encode() adds it by default.
  void post_processor(const json& v, Tokenizer& tok) const {
    if (!v.is_object() || !v.contains("type") || !v["type"].is_string()) return;
    const std::string type = v["type"].get<std::string>();
    if (type == "Sequence" && v.contains("processors") && v["processors"].is_array()) {
      for (const json& p : v["processors"]) post_processor(p, tok);
      return;
    }
    if (type != "TemplateProcessing" || !v.contains("single") || !v["single"].is_array() || v["single"].empty()) return;
    const json& first = v["single"][0];
    if (!first.is_object() || !first.contains("SpecialToken")) return;
    const json& special = first["SpecialToken"];
    if (!special.is_object() || !special.contains("id") || !special["id"].is_string()) return;
    const std::string content = special["id"].get<std::string>();
    const auto id = tok.token_to_id(content);
    if (!id) fail("post_processor.single[0]", "special token \"" + content + "\" is not in the vocabulary");
    tok.set_bos(*id);
    tok.set_adds_bos(true);
  }

  std::filesystem::path path_;
  std::string file_;
};

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer_json(const std::filesystem::path& tokenizer_json) {
  return JsonReader(tokenizer_json).read();
}

}  // namespace mpcache::text
