// mpcache.model: model configuration and weight loading, LLaMA/GPT-2 decoder, private generation.
export module mpcache.model;
import mpcache.std;
export import :safetensors;
export import :config;
export import :weights;
export import :prefill_memory;
export import :decoder;
export import :decoder_linear;
export import :decoder_attention;
export import :decoder_mlp;
export import :decoder_batch;
export import :step_driver;
export import :draft;
export import :draft_model;
export import :speculate;
export import :generate;
export import :generate_party;
