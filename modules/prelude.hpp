// The one set of headers that every module unit's global module fragment
// includes, always first and in this order. clang-16 compares the global
// fragments of imported modules and rejects standard-library templates whose
// bodies differ by include order ("has different definitions in different
// modules", llvm/llvm-project#63005); one shared prelude avoids that. Add a
// header here rather than to a single unit's global fragment.
#pragma once
#include <algorithm>
#include <numeric>
#include <array>
#include <chrono>
#include <cmath>
#include <compare>
#include <concepts>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <source_location>
#include <span>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>
#include <xtensor/xarray.hpp>
