// rss3 dot_trunc: sum over the last axis of a b, truncated, in one product.
// The local products are summed before the zero share and the reshare, so
// it costs what a product of the output's size costs (1 round; exact
// truncation adds its own), where mul then truncate took two. Ops use it
// for a one-hot (an arithmetic 0/1 from msb_arith) times public weights.
module mpcache.proto;
import mpcache.std;
import mpcache.core;
import mpcache.async;
import mpcache.net;

namespace mpcache {

Task<Rss3Share> Rss3::dot_trunc(const Share& a, const Share& b, int bits) {
  check_bits(bits);
  const Shape s = shape(a);
  if (s.empty() || s.back() == 0)
    throw Error(ErrorCode::invalid_argument, "rss3 dot_trunc over an empty last axis, shape " + shape_string(s));
  RingTensor z = ring_weighted_sum_last(local_product(a, b), std::vector<Ring>(s.back(), Ring{1}));
  ring_add_inplace(z, zero_share(shape_of(z)));
  return reshare_truncated(std::move(z), bits);
}

}  // namespace mpcache
