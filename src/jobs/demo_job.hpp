// The arithmetic demo, y = (x W + b)^2 under rss3: the computation and its
// check, written once and run by `mpcache demo` (three parties in this
// process, tools/demo.cpp) and by the party job `demo` (party_job.cpp: one
// party of three processes, `mpcache local --job demo`).
// Include after `import mpcache;`.
#pragma once

namespace mpcache::jobs {

struct DemoOptions {
  std::size_t in_features = 256;
  std::size_t out_features = 64;
  std::uint64_t seed = 1;
};

// The client's x (1 x in) and the model owner's W (in x out, scaled by
// 1/sqrt(in)) and b (1 x out), drawn from `seed`.
struct DemoData {
  RealTensor x, w, b;
};
DemoData demo_data(const DemoOptions& options);

// One party's part: the client (0) inputs x, the model owner (1) W and b;
// only the client learns y (encoded), the others get nothing.
Task<std::optional<RingTensor>> demo_party(Rss3& p, PartyId id, const DemoData& data);

// y against float64, and the bound the error must stay within: inputs rounded
// to 2^-19, each truncation off by at most 2^-18, |h| <= sum|x||w| + |b|.
struct DemoCheck {
  RealTensor y;
  double max_error = 0;
  double bound = 0;
  bool ok() const { return max_error <= bound; }
};
DemoCheck demo_check(const DemoData& data, const RingTensor& y_encoded);

}  // namespace mpcache::jobs
