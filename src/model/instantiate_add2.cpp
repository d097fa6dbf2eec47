// The add2 decoder, weight loading and generation with the type-erased
// policy, compiled here once (the model's interfaces declare them extern):
// one file per backend so that the four compile in parallel.
module;
#include "prelude.hpp"
module mpcache.model;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import mpcache.kv;

namespace mpcache {
template Task<DecoderWeights<Add2>> load_decoder<Add2>(Add2&, const ModelConfig&, const WeightSource&, PartyId);
template class Decoder<Add2>;
template Task<Add2::Share> Decoder<Add2>::prefill<kv::AnyPolicy<Add2>>(Add2&, kv::AnyPolicy<Add2>&, PartyId,
                                                                  std::optional<std::vector<std::uint32_t>>, std::size_t);
template Task<Add2::Share> Decoder<Add2>::decode<kv::AnyPolicy<Add2>>(Add2&, kv::AnyPolicy<Add2>&, PartyId,
                                                                 std::optional<std::uint32_t>);
template Task<std::vector<std::uint32_t>> generate<Add2, kv::AnyPolicy<Add2>>(Add2&, Decoder<Add2>&, kv::AnyPolicy<Add2>&,
                                                                          GenerationRequest, GenerationObserver);
}  // namespace mpcache
