// mpcache.model: model configuration and weight loading (decoders to come).
module;
#include "prelude.hpp"
export module mpcache.model;
export import :safetensors;
export import :config;
