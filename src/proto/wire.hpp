// Ring tensors on the wire, for the backends' send and recv: whole words,
// or only the low bytes of each word when the receiver needs only its low
// bits (a truncation's wrap, a bit). Included by implementation units of
// mpcache.proto after their imports.
#pragma once

namespace mpcache::wire {

// bytes_per_word (core's ring) says how many low bytes of a word are sent.

// The low bytes of every word, little-endian (zero-extended on the way back).
inline std::vector<std::byte> pack_low(const RingTensor& t, int low_bits) {
  const std::size_t width = bytes_per_word(low_bits);
  std::vector<std::byte> packed(t.size() * width);
  for (std::size_t i = 0; i < t.size(); ++i) {
    Ring v = t.data()[i];
    for (std::size_t k = 0; k < width; ++k, v >>= 8) packed[i * width + k] = std::byte(v & 0xFF);
  }
  return packed;
}

// Throws Error(protocol) unless `bytes` is a message of `shape` at `low_bits`;
// what() names sender and receiver (built only then: this runs for every
// message).
template <class What>
void check_size(std::size_t bytes, const Shape& shape, int low_bits, What&& what) {
  const std::size_t width = bytes_per_word(low_bits);
  const std::size_t want = element_count(shape) * width;
  if (bytes != want)
    throw Error(ErrorCode::protocol, what() + " sent " + std::to_string(bytes) + " bytes, expected " +
                                         std::to_string(want) + " for shape " + shape_string(shape) +
                                         (width == sizeof(Ring) ? "" : " at " + std::to_string(width) + " bytes per word"));
}

// A received message as a tensor of `shape` (see check_size).
template <class What>
RingTensor unpack(std::span<const std::byte> bytes, const Shape& shape, int low_bits, What&& what) {
  check_size(bytes.size(), shape, low_bits, what);
  const std::size_t width = bytes_per_word(low_bits);
  if (width == sizeof(Ring)) return ring_from_bytes(bytes, shape);
  RingTensor out = RingTensor::from_shape(shape);
  for (std::size_t i = 0; i < out.size(); ++i) {
    Ring v = 0;
    for (std::size_t k = width; k-- > 0;) v = (v << 8) | static_cast<Ring>(bytes[i * width + k]);
    out.data()[i] = v;
  }
  return out;
}

// The same for a message the caller gives up: whole words keep its buffer
// (the tensor adopts it, no copy); low bytes are widened into a new one.
template <class What>
RingTensor unpack(std::vector<std::byte>&& bytes, const Shape& shape, int low_bits, What&& what) {
  if (bytes_per_word(low_bits) != sizeof(Ring)) return unpack(std::span<const std::byte>(bytes), shape, low_bits, what);
  check_size(bytes.size(), shape, low_bits, what);
  return ring_from_bytes(std::move(bytes), shape);
}

// The settings every party of a backend must share, as its set-up message
// carries them after the key: fraction bits, exact truncation, dcf
// comparisons (a byte each), then the offline store's budget, the dcf
// slice size and the truncation pairs' budget (8 bytes each). Parties with
// different budgets would plan different comparisons (plans read the
// store's costs) and deal from the store at different calls; different
// slices split deals apart; a party without truncation pairs would not
// expect party 0's grants.
struct Settings {
  int frac_bits = 0;
  bool exact_truncation = false, dcf_comparisons = false;
  std::uint64_t offline_budget = 0, dcf_slice_bytes = 0, truncation_pairs_budget = 0;
  static constexpr std::size_t bytes = 3 + 3 * sizeof(std::uint64_t);
};

// The sizes travel in host order, as every ring word does (ring_to_bytes).
inline void put_settings(const Settings& s, std::byte* out) {
  out[0] = std::byte(s.frac_bits);
  out[1] = std::byte(s.exact_truncation);
  out[2] = std::byte(s.dcf_comparisons);
  std::memcpy(out + 3, &s.offline_budget, sizeof(std::uint64_t));
  std::memcpy(out + 3 + sizeof(std::uint64_t), &s.dcf_slice_bytes, sizeof(std::uint64_t));
  std::memcpy(out + 3 + 2 * sizeof(std::uint64_t), &s.truncation_pairs_budget, sizeof(std::uint64_t));
}

inline Settings get_settings(const std::byte* in) {
  Settings s{static_cast<int>(in[0]), in[1] != std::byte{0}, in[2] != std::byte{0}};
  std::memcpy(&s.offline_budget, in + 3, sizeof(std::uint64_t));
  std::memcpy(&s.dcf_slice_bytes, in + 3 + sizeof(std::uint64_t), sizeof(std::uint64_t));
  std::memcpy(&s.truncation_pairs_budget, in + 3 + 2 * sizeof(std::uint64_t), sizeof(std::uint64_t));
  return s;
}

// Throws invalid_argument, naming both sides' settings, unless `theirs`
// (Settings::bytes bytes) says what `mine` does; `from` names the sender.
inline void check_settings(const std::byte* theirs, const Settings& mine, const std::string& from) {
  const Settings other = get_settings(theirs);
  const bool same_store = other.offline_budget == mine.offline_budget;
  const bool same_slices = other.dcf_slice_bytes == mine.dcf_slice_bytes;
  const bool same_pairs = other.truncation_pairs_budget == mine.truncation_pairs_budget;
  if (other.frac_bits == mine.frac_bits && other.exact_truncation == mine.exact_truncation &&
      other.dcf_comparisons == mine.dcf_comparisons && same_store && same_slices && same_pairs)
    return;
  // The store and slice sizes are named only when they differ, so the
  // common message stays short.
  auto describe = [&](const Settings& s) {
    std::string text = std::to_string(s.frac_bits) + " fraction bits, " +
                       (s.exact_truncation ? "exact" : "probabilistic") + " truncation, " +
                       (s.dcf_comparisons ? "dcf" : "circuit") + " comparisons";
    if (!same_store) text += ", an offline store of " + std::to_string(s.offline_budget) + " bytes";
    if (!same_slices) text += ", dcf slices of " + std::to_string(s.dcf_slice_bytes) + " bytes";
    if (!same_pairs) text += ", truncation pairs of " + std::to_string(s.truncation_pairs_budget) + " bytes";
    return text;
  };
  throw Error(ErrorCode::invalid_argument, from + " uses " + describe(other) + ", this party " + describe(mine));
}

}  // namespace mpcache::wire
