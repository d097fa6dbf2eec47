// ArkVale's page estimators (bench/page_estimators.hpp): the bounding
// volumes bound the true page importance from above, the centroid from
// below, every estimator is exact on a page of one key, and top-k recall
// counts what it should.
#include <doctest/doctest.h>
#include <random>
#include "../../bench/page_estimators.hpp"

using namespace mpcache::bench;

namespace {
std::vector<double> random_rows(std::size_t rows, std::size_t dim, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> out(rows * dim);
  for (auto& v : out) v = normal(rng);
  return out;
}
}  // namespace

TEST_SUITE("page estimators") {
  TEST_CASE("bounding volumes bound the page importance; the centroid stays below it") {
    const std::size_t d = 8, page = 16;
    const auto k = random_rows(page, d, 1);
    const KeyRows keys{k.data(), page, d};
    const PageDigest g = digest_page(keys, 0, page);
    for (std::uint64_t seed = 2; seed < 50; ++seed) {
      const auto q = random_rows(1, d, seed);
      const double truth = true_importance(q.data(), keys, 0, page);
      CAPTURE(seed);
      CHECK(estimate_importance(PageEstimator::cuboid_max, q.data(), g) >= truth - 1e-12);
      CHECK(estimate_importance(PageEstimator::sphere_max, q.data(), g) >= truth - 1e-12);
      CHECK(estimate_importance(PageEstimator::centroid, q.data(), g) <= truth + 1e-12);
      // The mean variants shrink the bounds towards the centre.
      CHECK(estimate_importance(PageEstimator::cuboid_mean, q.data(), g) <=
            estimate_importance(PageEstimator::cuboid_max, q.data(), g) + 1e-12);
      CHECK(estimate_importance(PageEstimator::cuboid_center, q.data(), g) <=
            estimate_importance(PageEstimator::cuboid_mean, q.data(), g) + 1e-12);
      CHECK(estimate_importance(PageEstimator::sphere_mean, q.data(), g) <=
            estimate_importance(PageEstimator::sphere_max, q.data(), g) + 1e-12);
    }
  }

  TEST_CASE("a page of one key is estimated exactly by every estimator") {
    const std::size_t d = 5;
    const auto k = random_rows(1, d, 3);
    const auto q = random_rows(1, d, 4);
    const KeyRows keys{k.data(), 1, d};
    const PageDigest g = digest_page(keys, 0, 1);
    const double truth = true_importance(q.data(), keys, 0, 1);
    for (auto e : all_page_estimators) {
      CAPTURE(estimator_name(e));
      CHECK(estimate_importance(e, q.data(), g) == doctest::Approx(truth).epsilon(1e-12));
    }
  }

  TEST_CASE("the cuboid digest is the keys' bounding box, cuboid-mean its mean spread") {
    // Two keys in 2-D: (1, -2) and (3, 4). Box [1,3] x [-2,4], centre (2, 1),
    // mean |k - centre| = (1, 3).
    const std::vector<double> k = {1, -2, 3, 4};
    const KeyRows keys{k.data(), 2, 2};
    const PageDigest g = digest_page(keys, 0, 2);
    CHECK(g.lo == std::vector<double>{1, -2});
    CHECK(g.hi == std::vector<double>{3, 4});
    CHECK(g.box_spread == std::vector<double>{1, 3});
    const double q[2] = {1, -1};
    CHECK(estimate_importance(PageEstimator::cuboid_max, q, g) == 5.0);     // 3 + 2
    CHECK(estimate_importance(PageEstimator::cuboid_center, q, g) == 1.0);  // 2 - 1
    CHECK(estimate_importance(PageEstimator::cuboid_mean, q, g) == 5.0);    // 1 + (1 + 3)
    CHECK(estimate_importance(PageEstimator::centroid, q, g) == 1.0);       // (2, 1)
    CHECK(true_importance(q, keys, 0, 2) == 3.0);                           // (1, -2)
  }

  TEST_CASE("top-k recall counts the true top-k pages found") {
    const std::vector<double> truth = {5, 1, 4, 3, 2};
    CHECK(recall_at(truth, truth, 3) == 1.0);
    CHECK(recall_at(truth, {0, 9, 8, 7, 1}, 1) == 0.0);       // picks page 1, truth is page 0
    CHECK(recall_at(truth, {9, 0, 0, 8, 7}, 3) == doctest::Approx(2.0 / 3));  // {0, 3, 4} vs {0, 2, 3}
    CHECK(top_pages({1, 2, 2}, 2) == std::vector<std::size_t>{1, 2});         // ties to the lower index
  }

  TEST_CASE("accuracy is kept per page size, k and layer, and skips k above the page count") {
    const std::size_t d = 4, t = 48;
    const auto k = random_rows(t, d, 9);
    const auto q = random_rows(2, d, 10);
    EstimatorAccuracy acc({16, 1}, {1, 5}, 2);
    acc.observe(1, q.data(), 2, KeyRows{k.data(), t, d});
    // Page 16: 3 pages, so k = 5 is skipped; page 1: 48 pages, both k.
    CHECK(acc.samples(0, 0, 1, 0) == 2);
    CHECK(acc.samples(0, 1, 1, 0) == 0);
    CHECK(acc.samples(1, 1, 1, 0) == 2);
    CHECK(acc.samples(1, 1, 0, 0) == 0);  // layer 0 saw nothing
    for (std::size_t e = 0; e < all_page_estimators.size(); ++e) CHECK(acc.recall(1, 1, 1, e) == 1.0);
    // The bound can only miss pages; cuboid-max on 3 pages stays a fraction.
    const double r = acc.recall(0, 0, 1, 3);
    CHECK(r >= 0.0);
    CHECK(r <= 1.0);
  }
}
