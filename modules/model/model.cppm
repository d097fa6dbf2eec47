// mpcache.model: model configuration and weight loading, LLaMA/GPT-2 decoder, private generation.
module;
#include "prelude.hpp"
export module mpcache.model;
export import :safetensors;
export import :config;
export import :weights;
export import :decoder;
export import :generate;
