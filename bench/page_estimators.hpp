// ArkVale's page digests and the importance each estimates: the
// estimation-accuracy experiment of the ArkVale slides
// (../shared/seeds/arkvale-slides.txt), in float64 clear text.
//
// A page is a run of `page` consecutive keys. Its true importance for a
// query q is max over its keys of q . k. A digest summarises the page's keys
// in O(d) numbers; each estimator scores the page from q and the digest:
//   centroid       q . c, c = mean of the keys (the slides' baseline)
//   sphere-max     q . c + |q| r, r = max |k - c| (bounding sphere: an upper bound)
//   sphere-mean    q . c + |q| r, r = mean |k - c|
//   cuboid-max     sum_i max(q_i lo_i, q_i hi_i), [lo, hi] the keys' bounding
//                  box (Quest's and ArkVale's cuboid: an upper bound)
//   cuboid-center  q . m, m = (lo + hi) / 2
//   cuboid-mean    q . m + sum_i |q_i| a_i, a_i = mean |k_i - m_i| (ArkVale's best)
// Accuracy is top-k recall: |estimated top-k pages ∩ true top-k pages| / k.
// Pure std, so that tests can check the bounds on hand-made pages.
#pragma once
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <numeric>
#include <string>
#include <vector>

namespace mpcache::bench {

enum class PageEstimator { centroid, sphere_max, sphere_mean, cuboid_max, cuboid_center, cuboid_mean };

inline constexpr std::array<PageEstimator, 6> all_page_estimators = {
    PageEstimator::centroid,   PageEstimator::sphere_max,    PageEstimator::sphere_mean,
    PageEstimator::cuboid_max, PageEstimator::cuboid_center, PageEstimator::cuboid_mean};

inline const char* estimator_name(PageEstimator e) {
  switch (e) {
    case PageEstimator::centroid: return "centroid";
    case PageEstimator::sphere_max: return "sphere-max";
    case PageEstimator::sphere_mean: return "sphere-mean";
    case PageEstimator::cuboid_max: return "cuboid-max";
    case PageEstimator::cuboid_center: return "cuboid-center";
    case PageEstimator::cuboid_mean: return "cuboid-mean";
  }
  return "?";
}

// Keys as rows of `dim` numbers, row-major.
struct KeyRows {
  const double* data = nullptr;
  std::size_t rows = 0, dim = 0;
  const double* row(std::size_t t) const { return data + t * dim; }
};

// One page's digest: everything every estimator needs.
struct PageDigest {
  std::vector<double> centroid, lo, hi, box_spread;  // box_spread: mean |k - (lo+hi)/2| per dimension
  double sphere_max = 0, sphere_mean = 0;              // radii around the centroid
};

inline PageDigest digest_page(const KeyRows& keys, std::size_t begin, std::size_t end) {
  const std::size_t d = keys.dim;
  const double n = static_cast<double>(end - begin);
  PageDigest g;
  g.centroid.assign(d, 0.0);
  g.lo.assign(d, INFINITY);
  g.hi.assign(d, -INFINITY);
  g.box_spread.assign(d, 0.0);
  for (std::size_t t = begin; t < end; ++t)
    for (std::size_t i = 0; i < d; ++i) {
      const double v = keys.row(t)[i];
      g.centroid[i] += v / n;
      g.lo[i] = std::min(g.lo[i], v);
      g.hi[i] = std::max(g.hi[i], v);
    }
  for (std::size_t t = begin; t < end; ++t) {
    double r2 = 0;
    for (std::size_t i = 0; i < d; ++i) {
      const double v = keys.row(t)[i];
      r2 += (v - g.centroid[i]) * (v - g.centroid[i]);
      g.box_spread[i] += std::abs(v - (g.lo[i] + g.hi[i]) / 2) / n;
    }
    g.sphere_max = std::max(g.sphere_max, std::sqrt(r2));
    g.sphere_mean += std::sqrt(r2) / n;
  }
  return g;
}

inline double estimate_importance(PageEstimator e, const double* q, const PageDigest& g) {
  const std::size_t d = g.centroid.size();
  double dot_c = 0, norm2 = 0, box = 0, dot_m = 0, spread = 0;
  for (std::size_t i = 0; i < d; ++i) {
    dot_c += q[i] * g.centroid[i];
    norm2 += q[i] * q[i];
    box += std::max(q[i] * g.lo[i], q[i] * g.hi[i]);
    dot_m += q[i] * (g.lo[i] + g.hi[i]) / 2;
    spread += std::abs(q[i]) * g.box_spread[i];
  }
  switch (e) {
    case PageEstimator::centroid: return dot_c;
    case PageEstimator::sphere_max: return dot_c + std::sqrt(norm2) * g.sphere_max;
    case PageEstimator::sphere_mean: return dot_c + std::sqrt(norm2) * g.sphere_mean;
    case PageEstimator::cuboid_max: return box;
    case PageEstimator::cuboid_center: return dot_m;
    case PageEstimator::cuboid_mean: return dot_m + spread;
  }
  return 0;
}

inline double true_importance(const double* q, const KeyRows& keys, std::size_t begin, std::size_t end) {
  double best = -INFINITY;
  for (std::size_t t = begin; t < end; ++t) {
    double s = 0;
    for (std::size_t i = 0; i < keys.dim; ++i) s += q[i] * keys.row(t)[i];
    best = std::max(best, s);
  }
  return best;
}

// Indices of the k largest scores (ties to the lower index); the fidelity
// preset ranks tokens with it too.
inline std::vector<std::size_t> top_pages(const std::vector<double>& scores, std::size_t k) {
  std::vector<std::size_t> idx(scores.size());
  std::iota(idx.begin(), idx.end(), std::size_t{0});
  k = std::min(k, idx.size());
  std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(k), idx.end(),
                    [&](std::size_t a, std::size_t b) { return scores[a] != scores[b] ? scores[a] > scores[b] : a < b; });
  idx.resize(k);
  return idx;
}

inline double recall_at(const std::vector<double>& truth, const std::vector<double>& estimate, std::size_t k) {
  const auto want = top_pages(truth, k), got = top_pages(estimate, k);
  std::size_t hit = 0;
  for (auto x : got) hit += static_cast<std::size_t>(std::count(want.begin(), want.end(), x));
  return static_cast<double>(hit) / static_cast<double>(want.size());
}

// Accumulates top-k recall per (estimator, page size, k, layer) over the
// queries it is shown. Only full pages are ranked (the partial last page is
// the recent window, which ArkVale always keeps); a call with fewer full
// pages than k skips that k.
class EstimatorAccuracy {
 public:
  EstimatorAccuracy(std::vector<std::size_t> page_sizes, std::vector<std::size_t> ks, std::size_t layers)
      : pages_(std::move(page_sizes)), ks_(std::move(ks)), layers_(layers),
        sum_(pages_.size() * ks_.size() * layers_ * all_page_estimators.size(), 0.0), count_(sum_.size(), 0) {}

  // `queries`: `count` rows of keys.dim numbers, each ranked separately.
  void observe(std::size_t layer, const double* queries, std::size_t count, const KeyRows& keys) {
    for (std::size_t pi = 0; pi < pages_.size(); ++pi) {
      const std::size_t page = pages_[pi], full = keys.rows / page;
      if (full == 0) continue;
      std::vector<PageDigest> digests;
      for (std::size_t j = 0; j < full; ++j) digests.push_back(digest_page(keys, j * page, (j + 1) * page));
      for (std::size_t qi = 0; qi < count; ++qi) {
        const double* q = queries + qi * keys.dim;
        std::vector<double> truth(full);
        for (std::size_t j = 0; j < full; ++j) truth[j] = true_importance(q, keys, j * page, (j + 1) * page);
        for (std::size_t ei = 0; ei < all_page_estimators.size(); ++ei) {
          std::vector<double> est(full);
          for (std::size_t j = 0; j < full; ++j) est[j] = estimate_importance(all_page_estimators[ei], q, digests[j]);
          for (std::size_t ki = 0; ki < ks_.size(); ++ki) {
            if (ks_[ki] > full) continue;
            const std::size_t at = slot(pi, ki, layer, ei);
            sum_[at] += recall_at(truth, est, ks_[ki]);
            ++count_[at];
          }
        }
      }
    }
  }

  // Mean recall (NaN with no samples), and how many queries it averages.
  double recall(std::size_t page_index, std::size_t k_index, std::size_t layer, std::size_t estimator_index) const {
    const std::size_t at = slot(page_index, k_index, layer, estimator_index);
    return count_[at] ? sum_[at] / static_cast<double>(count_[at]) : NAN;
  }
  std::size_t samples(std::size_t page_index, std::size_t k_index, std::size_t layer,
                      std::size_t estimator_index) const {
    return count_[slot(page_index, k_index, layer, estimator_index)];
  }
  // The caller's check that its queries and keys are attention's (the
  // argmax of q . k is attention's argmax); reported with the results.
  void check_inputs(bool agreed) {
    ++checked_;
    agreed_ += agreed ? 1 : 0;
  }
  double inputs_match() const { return checked_ ? static_cast<double>(agreed_) / static_cast<double>(checked_) : NAN; }
  std::size_t inputs_checked() const { return checked_; }

  const std::vector<std::size_t>& page_sizes() const { return pages_; }
  const std::vector<std::size_t>& ks() const { return ks_; }
  std::size_t layers() const { return layers_; }

 private:
  std::size_t slot(std::size_t pi, std::size_t ki, std::size_t layer, std::size_t ei) const {
    return ((pi * ks_.size() + ki) * layers_ + layer) * all_page_estimators.size() + ei;
  }
  std::vector<std::size_t> pages_, ks_;
  std::size_t layers_;
  std::vector<double> sum_;
  std::vector<std::size_t> count_;
  std::size_t checked_ = 0, agreed_ = 0;
};

}  // namespace mpcache::bench
