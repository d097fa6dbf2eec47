// Gathers by one-hot matrices (the paper's Algorithm 2), one matmul round
// after the one-hot; 0/1 rows times fixed-point values need no truncation.
//   token_gather:   one-hot (k, T) x cache (T, d)          -> (k, d)
//   cluster_gather: one-hot (k, C) x clusters (C, m, d)    -> (k * m, d)
//   matmul_sum:     sum_i a_i b_i in one product's rounds, operands asked
//                   for term by term (a gather streamed from storage)
// Cluster-wise gathering needs C (not T) one-hot columns and log2 C-bit
// equalities, which is where MPCache saves most of the gather cost.
export module mpcache.ops:gather;
import mpcache.std;
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

// sum over i < terms of a_i b_i, (a_i, b_i) = term(i): one product's
// rounds. On a SummingMatmul backend each term lives only while its local
// product is taken; elsewhere every term is asked for first.
template <Protocol P>
Task<typename P::Share> matmul_sum(P& p, std::size_t terms,
                                   std::function<std::pair<typename P::Share, typename P::Share>(std::size_t)> term) {
  if (terms == 0) throw Error(ErrorCode::invalid_argument, "matmul_sum of zero terms");
  if constexpr (SummingMatmul<P>) {
    co_return co_await p.matmul_sum(terms, std::move(term));
  } else {
    std::vector<std::pair<typename P::Share, typename P::Share>> operands;
    operands.reserve(terms);
    for (std::size_t i = 0; i < terms; ++i) operands.push_back(term(i));
    std::vector<P> forks;
    forks.reserve(terms);
    for (std::size_t i = 0; i < terms; ++i) forks.push_back(p.fork());
    std::vector<Task<typename P::Share>> products;
    products.reserve(terms);
    for (std::size_t i = 0; i < terms; ++i) products.push_back(forks[i].matmul(operands[i].first, operands[i].second));
    auto parts = co_await when_all(std::move(products));
    typename P::Share sum = std::move(parts[0]);
    for (std::size_t i = 1; i < terms; ++i) sum = p.add(sum, parts[i]);
    co_return sum;
  }
}

}  // namespace mpcache::ops
