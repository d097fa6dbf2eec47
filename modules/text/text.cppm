// mpcache.text: the client's tokenizers, text <-> token ids.
//
// The servers of a private-inference session see nothing but secret-shared
// token ids; the client turns its prompt into ids with one of these and turns
// the opened output ids back into text (token by token with
// StreamingDecoder). No other module of the library imports this one: it is
// the client's alone (the umbrella module mpcache re-exports it).
//
// Supported (read by load_tokenizer from a Hugging Face model folder):
//   * byte-level BPE (GPT-2, LLaMA-3, Qwen2, SmolLM style) from tokenizer.json,
//     or from vocab.json + merges.txt (GPT-2);
//   * BPE over characters with byte fallback and the "▁" (U+2581) space
//     convention (LLaMA-2, TinyLlama, Mistral style) from tokenizer.json;
//   * a SentencePiece model (tokenizer.model, LLaMA-2 style) through Debian's
//     libsentencepiece, where the folder has no tokenizer.json (a private
//     dependency of the implementation: no interface names it);
//   * special ("added") tokens, BOS/EOS from tokenizer_config.json,
//     config.json and generation_config.json;
//   * the byte identity tokenizer (token id = byte value) of the project's own
//     model: make_byte_tokenizer(), what `tokenizer: none` means.
// Anything else in a tokenizer file is refused by name (TokenizerError).
//
// Plain C++20, no global mutable state, no threads. A Tokenizer is immutable
// after loading and may be shared between threads for reading.
//
// Implementation: src/text/ (internal partitions :bpe_model, :bpe_tokenizer,
// :pipeline and :files, and plain C++ for UTF-8, character classes and the
// generated Unicode tables).
export module mpcache.text;
import mpcache.std;
export import :tokenizer;
export import :unicode;
