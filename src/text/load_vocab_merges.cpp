// GPT-2's own files: vocab.json + merges.txt (byte-level BPE, GPT-2 regex).
module;
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <nlohmann/json.hpp>
module mpcache.text;
import mpcache.std;
import :bpe_tokenizer;
import :files;

namespace mpcache::text {

std::unique_ptr<Tokenizer> load_gpt2_vocab_merges(const std::filesystem::path& vocab_json,
                                                  const std::filesystem::path& merges_txt) {
  using namespace detail;
  const nlohmann::json vocab = read_json_file(vocab_json);
  const std::string merges = read_text_file(merges_txt);
  VocabPieces pieces = read_vocab(vocab, vocab_json.string(), true);
  BpeModel::Options options;
  options.symbols = BpeModel::Symbols::bytes;
  BpeModel model(std::move(pieces.pieces), options, merges_txt.string());
  read_merges_txt(merges, merges_txt.string(), model);
  PreTokenizer byte_level;
  byte_level.kind = PreTokenizer::Kind::byte_level;
  auto tok = std::make_unique<BpeTokenizer>("byte-level BPE (vocab.json + merges.txt)", std::move(model),
                                            std::vector<Normalizer>{}, std::vector<PreTokenizer>{byte_level},
                                            DecodeSpec{}, std::move(pieces.odd));
  // GPT2Tokenizer's defaults: "<|endoftext|>" is special, and BOS and EOS.
  if (const auto id = tok->token_to_id("<|endoftext|>")) {
    Tokenizer::AddedToken eot;
    eot.id = *id;
    eot.content = "<|endoftext|>";
    eot.special = true;
    tok->add_token(std::move(eot));
    tok->set_bos(*id);
    tok->set_eos({*id});
  }
  return tok;
}

}  // namespace mpcache::text
