// mpcache.std: the one unit that includes the standard library.
//
// Every other module unit imports this instead of including the headers in
// its global module fragment. A unit that includes them writes its own copy
// of every declaration it reaches into its BMI, and each importer merges
// those copies again: a 25-line kv partition took 27 s and wrote a 34 MB BMI
// that way. Here they are parsed and written once.
//
// A name is visible to importers only if it is exported below; so are the
// operators that argument-dependent lookup must find (see the last block).
// Using a new standard name in a module unit: add it here. Programs that
// are not module units (tests, tools, bench) and implementation units with
// other system headers include prelude.hpp first, then import.
module;
#include "prelude.hpp"
export module mpcache.std;

export namespace std {
using std::_Exit; using std::abs; using std::accumulate; using std::addressof; using std::advance;
using std::all_of; using std::allocator; using std::any_of; using std::apply; using std::array;
using std::as_bytes; using std::as_const; using std::as_writable_bytes; using std::atomic;
using std::back_inserter; using std::bad_alloc; using std::bad_optional_access;
using std::bad_variant_access; using std::basic_string; using std::basic_string_view; using std::begin;
using std::binary_search; using std::bind_front; using std::bit_and; using std::bit_cast; using std::bit_or;
using std::bit_xor; using std::bool_constant; using std::byte; using std::cbrt; using std::ceil;
using std::char_traits; using std::clamp; using std::cmp_equal; using std::cmp_less;
using std::compare_three_way; using std::conditional_t; using std::contiguous_iterator_tag;
using std::convertible_to; using std::copy; using std::copy_backward; using std::copy_n; using std::copyable;
using std::copysign; using std::coroutine_handle; using std::coroutine_traits; using std::cos;
using std::count; using std::count_if; using std::cout; using std::cref; using std::current_exception;
using std::data; using std::decay_t; using std::declval; using std::default_delete;
using std::default_initializable; using std::deque; using std::derived_from; using std::distance;
using std::dynamic_extent; using std::empty; using std::enable_if_t; using std::enable_shared_from_this;
using std::end; using std::endl; using std::equal; using std::equal_to; using std::equality_comparable;
using std::erase_if; using std::erf; using std::errc; using std::error_category; using std::error_code;
using std::exception; using std::exception_ptr; using std::exchange; using std::exp; using std::exp2;
using std::expm1; using std::fabs; using std::false_type; using std::fflush; using std::fill;
using std::fill_n; using std::find; using std::find_if; using std::floating_point; using std::floor;
using std::flush; using std::fma; using std::fmod; using std::for_each; using std::forward;
using std::forward_as_tuple; using std::forward_iterator_tag; using std::fprintf; using std::fread;
using std::frexp; using std::function; using std::gcd; using std::generic_category; using std::get;
using std::get_if; using std::getenv; using std::getline; using std::greater; using std::greater_equal;
using std::hash; using std::holds_alternative; using std::hypot; using std::identity; using std::ifstream;
using std::ilogb; using std::in_place; using std::in_place_t; using std::in_place_type; using std::in_range;
using std::index_sequence; using std::index_sequence_for; using std::initializer_list;
using std::inner_product; using std::input_iterator_tag; using std::inserter; using std::int16_t;
using std::int32_t; using std::int64_t; using std::int8_t; using std::integer_sequence; using std::integral;
using std::integral_constant; using std::intmax_t; using std::invalid_argument; using std::invocable;
using std::invoke; using std::invoke_result_t; using std::ios; using std::iota; using std::is_base_of_v;
using std::is_constructible_v; using std::is_convertible_v; using std::is_default_constructible_v;
using std::is_floating_point_v; using std::is_integral_v; using std::is_invocable_r_v;
using std::is_lvalue_reference_v; using std::is_nothrow_move_constructible_v; using std::is_reference_v;
using std::is_same; using std::is_same_v; using std::is_signed_v; using std::is_trivially_copyable_v;
using std::is_unsigned_v; using std::is_void_v; using std::isfinite; using std::isinf; using std::isnan;
using std::istringstream; using std::iter_swap; using std::iterator_traits; using std::lcm; using std::ldexp;
using std::length_error; using std::less; using std::less_equal; using std::llround; using std::lock_guard;
using std::log; using std::log10; using std::log1p; using std::log2; using std::logic_error;
using std::lower_bound; using std::lround; using std::make_exception_ptr; using std::make_index_sequence;
using std::make_integer_sequence; using std::make_move_iterator; using std::make_optional;
using std::make_pair; using std::make_tuple; using std::make_unique;
using std::make_unique_for_overwrite; using std::map; using std::max; using std::max_align_t;
using std::max_element; using std::memchr; using std::memcmp; using std::memcpy; using std::memmove;
using std::memory_order_relaxed; using std::memset; using std::min; using std::min_element;
using std::minmax; using std::minmax_element; using std::minus; using std::monostate; using std::movable;
using std::move; using std::move_backward; using std::move_iterator; using std::multimap;
using std::multiplies; using std::multiset; using std::mutex; using std::nan; using std::nearbyint;
using std::nested_exception; using std::next; using std::none_of; using std::noop_coroutine;
using std::noop_coroutine_handle; using std::nostopstate; using std::not_equal_to; using std::nth_element;
using std::nullopt; using std::nullopt_t; using std::nullptr_t; using std::numeric_limits;
using std::ofstream; using std::optional; using std::ostringstream; using std::out_of_range;
using std::overflow_error; using std::pair; using std::partial_ordering; using std::partial_sort;
using std::partial_sum; using std::plus; using std::pow; using std::predicate; using std::prev;
using std::printf; using std::ptrdiff_t; using std::puts; using std::random_access_iterator_tag;
using std::range_error; using std::reduce; using std::ref; using std::reference_wrapper;
using std::regular_invocable; using std::remove; using std::remove_const_t; using std::remove_cvref_t;
using std::remove_reference_t; using std::rethrow_exception; using std::reverse; using std::reverse_iterator;
using std::rotate; using std::round; using std::runtime_error; using std::same_as; using std::set;
using std::shared_ptr; using std::signbit; using std::signed_integral; using std::sin; using std::size;
using std::size_t; using std::snprintf; using std::sort; using std::source_location; using std::span;
using std::sqrt; using std::ssize; using std::stable_sort; using std::stod; using std::stop_callback;
using std::stop_source; using std::stop_token; using std::stoull; using std::strcmp; using std::streamoff;
using std::streamsize; using std::strerror; using std::string; using std::string_view;
using std::stringstream; using std::strlen; using std::strong_ordering; using std::suspend_always;
using std::suspend_never; using std::swap; using std::system_category; using std::system_error;
using std::tan; using std::tanh; using std::terminate; using std::thread; using std::throw_with_nested;
using std::tie; using std::to_integer; using std::to_string; using std::totally_ordered;
using std::transform; using std::transform_reduce; using std::true_type; using std::trunc; using std::tuple;
using std::tuple_element; using std::tuple_size; using std::tuple_size_v; using std::uint16_t;
using std::uint32_t; using std::uint64_t; using std::uint8_t; using std::uintmax_t; using std::uintptr_t;
using std::uncaught_exceptions; using std::uniform_int_distribution; using std::unique;
using std::unique_ptr; using std::unordered_map; using std::unsigned_integral; using std::upper_bound;
using std::variant; using std::variant_size_v; using std::vector; using std::visit; using std::weak_ordering;
using std::weak_ptr;
}  // namespace std

export namespace std::chrono {
using std::chrono::duration; using std::chrono::duration_cast; using std::chrono::duration_values;
using std::chrono::high_resolution_clock; using std::chrono::hours; using std::chrono::microseconds;
using std::chrono::milliseconds; using std::chrono::nanoseconds; using std::chrono::seconds;
using std::chrono::steady_clock; using std::chrono::system_clock; using std::chrono::time_point;
using std::chrono::time_point_cast;
}  // namespace std::chrono

export namespace std::filesystem {
using std::filesystem::absolute; using std::filesystem::canonical; using std::filesystem::create_directories;
using std::filesystem::current_path; using std::filesystem::directory_iterator;
using std::filesystem::exists; using std::filesystem::file_size; using std::filesystem::filesystem_error;
using std::filesystem::is_directory; using std::filesystem::is_regular_file; using std::filesystem::path;
using std::filesystem::permissions; using std::filesystem::perms; using std::filesystem::read_symlink;
using std::filesystem::remove; using std::filesystem::remove_all; using std::filesystem::rename;
using std::filesystem::status; using std::filesystem::temp_directory_path;
}  // namespace std::filesystem

export namespace std::this_thread {
using std::this_thread::sleep_for; using std::this_thread::sleep_until; using std::this_thread::yield;
}  // namespace std::this_thread

export namespace std::ranges {
using std::ranges::all_of; using std::ranges::any_of; using std::ranges::begin;
using std::ranges::contiguous_range; using std::ranges::copy; using std::ranges::count;
using std::ranges::data; using std::ranges::end; using std::ranges::equal; using std::ranges::fill;
using std::ranges::find; using std::ranges::lower_bound; using std::ranges::max;
using std::ranges::max_element; using std::ranges::min; using std::ranges::min_element;
using std::ranges::none_of; using std::ranges::range; using std::ranges::reverse; using std::ranges::size;
using std::ranges::sized_range; using std::ranges::sort; using std::ranges::stable_sort;
using std::ranges::transform;
}  // namespace std::ranges

// The operators that argument-dependent lookup would find in std (string
// concatenation and comparison, chrono arithmetic, optional and pair
// comparisons) and in __gnu_cxx (libstdc++'s container iterators). They are
// brought into namespace mpcache, where unqualified lookup finds them from
// all of our code, and not re-exported inside std: with a using-declaration
// of std::operator== in std, clang 19 rejects the friend operators of
// std::map and std::variant when a module implementation unit that also
// includes the headers (src/proto/ref.cpp, src/model/config.cpp) instantiates
// them ("cannot befriend target of using declaration").
export namespace mpcache {
// Likewise make_shared, a friend of every std::shared_ptr<T>: call it
// unqualified from namespace mpcache.
using std::make_shared;
using std::chrono::operator%; using std::chrono::operator*; using std::chrono::operator+;
using std::chrono::operator-; using std::chrono::operator/; using std::chrono::operator<;
using std::chrono::operator<<; using std::chrono::operator<=; using std::chrono::operator<=>;
using std::chrono::operator==; using std::chrono::operator>; using std::chrono::operator>=;
using std::filesystem::operator&; using std::filesystem::operator&=; using std::filesystem::operator^;
using std::filesystem::operator^=; using std::filesystem::operator|; using std::filesystem::operator|=;
using std::filesystem::operator~; using std::operator!=; using std::operator&; using std::operator&=;
using std::operator+; using std::operator-; using std::operator<;
using std::operator<<; using std::operator<<=; using std::operator<=; using std::operator<=>;
using std::operator==; using std::operator>; using std::operator>=; using std::operator>>;
using std::operator>>=; using std::operator^; using std::operator^=; using std::operator|;
using std::operator|=; using std::operator~;
#if defined(__GLIBCXX__)
using __gnu_cxx::operator+; using __gnu_cxx::operator-; using __gnu_cxx::operator<=>;
using __gnu_cxx::operator==;
#endif
}  // namespace mpcache

// libstdc++'s vector and string iterators (__gnu_cxx::__normal_iterator) are
// compared by operators in __gnu_cxx. Inside a template, a range-for over a
// vector of a class member type finds them only by argument-dependent lookup
// at instantiation, so they are exported where they are declared too (no
// class template befriends them, so this is safe from the friend rule above).
#if defined(__GLIBCXX__)
export namespace __gnu_cxx {
using __gnu_cxx::operator+; using __gnu_cxx::operator-; using __gnu_cxx::operator<=>;
using __gnu_cxx::operator==;
}  // namespace __gnu_cxx
#endif
