// The ref decoder, weight loading and generation with the type-erased
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
template Task<DecoderWeights<Ref>> load_decoder<Ref>(Ref&, const ModelConfig&, const WeightSource&, PartyId);
template class Decoder<Ref>;
template Task<Ref::Share> Decoder<Ref>::prefill<kv::AnyPolicy<Ref>>(Ref&, kv::AnyPolicy<Ref>&, PartyId,
                                                                  std::optional<std::vector<std::uint32_t>>, std::size_t);
template Task<Ref::Share> Decoder<Ref>::decode<kv::AnyPolicy<Ref>>(Ref&, kv::AnyPolicy<Ref>&, PartyId,
                                                                 std::optional<std::uint32_t>);
template Task<std::vector<std::uint32_t>> generate<Ref, kv::AnyPolicy<Ref>>(Ref&, Decoder<Ref>&, kv::AnyPolicy<Ref>&,
                                                                          GenerationRequest, GenerationObserver);
template Task<std::vector<std::vector<double>>> teacher_forced_logits<kv::AnyPolicy<Ref>>(
    Ref&, Decoder<Ref>&, kv::AnyPolicy<Ref>&, const std::vector<std::uint32_t>&, const std::vector<std::uint32_t>&);
}  // namespace mpcache
