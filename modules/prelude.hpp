// The standard headers that mpcache uses. Only two kinds of
// file include it: modules/std/std.cppm, the wrapper module that every
// other module unit imports instead, and programs that are not module
// units (tests, tools, bench), which include it first and then import.
// Add a header here, and export its names from std.cppm.
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
#include <iostream>
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
