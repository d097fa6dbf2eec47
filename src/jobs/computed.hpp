// Benchmark inputs that stand for values a model computed (activations, a
// KV cache). add2 keeps an input's mask for every later product, so that
// weights are opened once; values a model computes have no such mask, and a
// benchmark must not give them one, or their products would look free.
// Include after `import mpcache;`.
#pragma once

namespace mpcache::jobs {

template <Protocol P>
typename P::Share computed(typename P::Share s) {
  if constexpr (requires { s.fixed; }) s.fixed = nullptr;
  return s;
}

}  // namespace mpcache::jobs
