// The rss3 decoder, weight loading and generation with the type-erased
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
template Task<DecoderWeights<Rss3>> load_decoder<Rss3>(Rss3&, const ModelConfig&, const WeightSource&, PartyId);
template class Decoder<Rss3>;
template Task<Rss3::Share> Decoder<Rss3>::prefill<kv::AnyPolicy<Rss3>>(Rss3&, kv::AnyPolicy<Rss3>&, PartyId,
                                                                  std::optional<std::vector<std::uint32_t>>, std::size_t);
template Task<Rss3::Share> Decoder<Rss3>::decode<kv::AnyPolicy<Rss3>>(Rss3&, kv::AnyPolicy<Rss3>&, PartyId,
                                                                 std::optional<std::uint32_t>);
template Task<std::vector<std::uint32_t>> generate<Rss3, kv::AnyPolicy<Rss3>>(Rss3&, Decoder<Rss3>&, kv::AnyPolicy<Rss3>&,
                                                                          GenerationRequest, GenerationObserver);
}  // namespace mpcache
