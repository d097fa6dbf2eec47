#include "process_allocator.hpp"

#include <malloc.h>

#include <cstdlib>

namespace mpcache::jobs {

void tune_allocator_for_party() noexcept {
  auto set = [](int option, const char* env, int value) {
    if (std::getenv(env) == nullptr) ::mallopt(option, value);
  };
  set(M_MMAP_THRESHOLD, "MALLOC_MMAP_THRESHOLD_", 32 << 20);  // glibc's maximum on 64-bit
  set(M_TRIM_THRESHOLD, "MALLOC_TRIM_THRESHOLD_", 1 << 30);
  set(M_TOP_PAD, "MALLOC_TOP_PAD_", 64 << 20);
}

}  // namespace mpcache::jobs
