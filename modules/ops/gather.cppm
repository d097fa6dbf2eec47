// Gathers by one-hot matrices (the paper's Algorithm 2), one matmul round
// after the one-hot; 0/1 rows times fixed-point values need no truncation.
//   token_gather:   one-hot (k, T) x cache (T, d)          -> (k, d)
//   cluster_gather: one-hot (k, C) x clusters (C, m, d)    -> (k * m, d)
// Cluster-wise gathering needs C (not T) one-hot columns and log2 C-bit
// equalities, which is where MPCache saves most of the gather cost.
module;
#include "prelude.hpp"
export module mpcache.ops:gather;
import mpcache.core;
import mpcache.async;
import mpcache.proto;
import :layout;

export namespace mpcache::ops {

template <Protocol P>
Task<typename P::Share> token_gather(P& p, const typename P::Share& one_hot_rows,
                                     const typename P::Share& cache) {
  return p.matmul(one_hot_rows, cache);
}

template <Protocol P>
Task<typename P::Share> cluster_gather(P& p, const typename P::Share& one_hot_rows,
                                       const typename P::Share& clusters) {
  const Shape s = P::shape(clusters);
  if (s.size() != 3)
    throw Error(ErrorCode::invalid_argument,
                "cluster_gather: clusters must be (C, m, d), got " + shape_string(s));
  const std::size_t k = P::shape(one_hot_rows).at(0);
  auto flat = reshape<P>(clusters, {s[0], s[1] * s[2]});
  auto picked = co_await p.matmul(one_hot_rows, flat);
  co_return reshape<P>(picked, {k * s[1], s[2]});
}

}  // namespace mpcache::ops
