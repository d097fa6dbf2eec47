// The plain decoder, weight loading and generation with the type-erased
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
template Task<DecoderWeights<Plain>> load_decoder<Plain>(Plain&, const ModelConfig&, const WeightSource&, PartyId);
template class Decoder<Plain>;
template Task<Plain::Share> Decoder<Plain>::prefill<kv::AnyPolicy<Plain>>(Plain&, kv::AnyPolicy<Plain>&, PartyId,
                                                                  std::optional<std::vector<std::uint32_t>>, std::size_t);
template Task<Plain::Share> Decoder<Plain>::decode<kv::AnyPolicy<Plain>>(Plain&, kv::AnyPolicy<Plain>&, PartyId,
                                                                 std::optional<std::uint32_t>);
template Task<std::vector<std::uint32_t>> generate<Plain, kv::AnyPolicy<Plain>>(Plain&, Decoder<Plain>&, kv::AnyPolicy<Plain>&,
                                                                          GenerationRequest, GenerationObserver);
}  // namespace mpcache
