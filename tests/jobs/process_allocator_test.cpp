// The party processes' allocator settings (src/jobs/process_allocator.hpp):
// an 8 MiB tensor comes from the heap, not from a fresh mmap, unless the
// user set glibc's threshold in the environment (the second ctest does).
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <malloc.h>
#include <cstdlib>
#include <cstring>
#include <doctest/doctest.h>
#include "process_allocator.hpp"

namespace {
// ASan and the other sanitizers replace glibc's malloc, so mallopt and
// mallinfo2 say nothing there: the dev build checks this.
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(memory_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool glibc_malloc = false;
#else
constexpr bool glibc_malloc = true;
#endif
#else
constexpr bool glibc_malloc = true;
#endif

// How many mmapped blocks one live allocation of `bytes` adds.
std::size_t mmapped_blocks_for(std::size_t bytes) {
  const std::size_t before = ::mallinfo2().hblks;
  void* block = std::malloc(bytes);
  REQUIRE(block != nullptr);
  std::memset(block, 1, bytes);
  const std::size_t during = ::mallinfo2().hblks;
  std::free(block);
  return during - before;
}
}  // namespace

TEST_CASE("tune_allocator_for_party: multi-MB blocks come from the heap unless the environment says otherwise" *
          doctest::skip(!glibc_malloc)) {
  constexpr std::size_t eight_mib = std::size_t{8} << 20;
  mpcache::jobs::tune_allocator_for_party();
  if (const char* env = std::getenv("MALLOC_MMAP_THRESHOLD_")) {
    // The user's setting (65536 in the ctest) stands: the block is mmapped.
    REQUIRE(std::strtoull(env, nullptr, 10) < eight_mib);
    CHECK(mmapped_blocks_for(eight_mib) == 1);
  } else {
    CHECK(mmapped_blocks_for(eight_mib) == 0);
    CHECK(mmapped_blocks_for(eight_mib) == 0);  // freed and taken again, still no mmap
  }
}
