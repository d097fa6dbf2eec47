// Little-endian fields on the wire: the one helper every hand-made message
// layout uses (job headers, the service's messages, the transport's record
// headers). A ByteReader checks each field against what is left and throws
// Error(protocol) naming the message, so a truncated or padded message is
// an error, never a read out of bounds.
export module mpcache.core:wire;
import mpcache.std;
import :error;

export namespace mpcache {

// Fixed-position fields, for headers laid out in place.
inline void put_le(std::byte* at, std::uint64_t value, std::size_t bytes) noexcept {
  for (std::size_t i = 0; i < bytes; ++i) at[i] = std::byte((value >> (8 * i)) & 0xFF);
}
inline std::uint64_t get_le(const std::byte* at, std::size_t bytes) noexcept {
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < bytes; ++i) value |= std::uint64_t(std::to_integer<std::uint8_t>(at[i])) << (8 * i);
  return value;
}
inline void put_u32(std::byte* at, std::uint32_t value) noexcept { put_le(at, value, 4); }
inline void put_u64(std::byte* at, std::uint64_t value) noexcept { put_le(at, value, 8); }
inline std::uint32_t get_u32(const std::byte* at) noexcept { return static_cast<std::uint32_t>(get_le(at, 4)); }
inline std::uint64_t get_u64(const std::byte* at) noexcept { return get_le(at, 8); }

// Appends fields; `bytes` and `text` are length-prefixed (u64).
struct ByteWriter {
  std::vector<std::byte> out;

  void u8(std::uint8_t v) { out.push_back(std::byte(v)); }
  void u64(std::uint64_t v) {
    const std::size_t at = out.size();
    out.resize(at + 8);
    put_u64(out.data() + at, v);
  }
  void raw(std::span<const std::byte> b) { out.insert(out.end(), b.begin(), b.end()); }
  void bytes(std::span<const std::byte> b) {
    u64(b.size());
    raw(b);
  }
  void text(std::string_view s) { bytes(std::as_bytes(std::span(s.data(), s.size()))); }
};

// Reads fields in order; every read is bounds-checked.
class ByteReader {
 public:
  // `what` names the message in errors ("client request", "generation
  // header from party 0").
  ByteReader(std::span<const std::byte> in, std::string what) : in_(in), what_(std::move(what)) {}

  [[noreturn]] void fail(const std::string& why) const { throw Error(ErrorCode::protocol, what_ + ": " + why); }

  std::uint8_t u8() {
    need(1);
    return std::to_integer<std::uint8_t>(in_[at_++]);
  }
  std::uint64_t u64() {
    need(8);
    const std::uint64_t v = get_u64(in_.data() + at_);
    at_ += 8;
    return v;
  }
  std::span<const std::byte> raw(std::size_t n) {
    need(n);
    auto b = in_.subspan(at_, n);
    at_ += n;
    return b;
  }
  // A length-prefixed field of at most `limit` bytes.
  std::vector<std::byte> bytes(std::size_t limit) {
    const std::uint64_t n = u64();
    if (n > limit || n > in_.size() - at_) fail("a field of " + std::to_string(n) + " bytes does not fit");
    auto b = raw(static_cast<std::size_t>(n));
    return {b.begin(), b.end()};
  }
  std::string text(std::size_t limit) {
    auto b = bytes(limit);
    return std::string(reinterpret_cast<const char*>(b.data()), b.size());
  }
  std::size_t left() const noexcept { return in_.size() - at_; }
  // Every byte must have been read.
  void end() const {
    if (at_ != in_.size()) fail(std::to_string(in_.size() - at_) + " bytes too many");
  }

 private:
  void need(std::size_t n) const {
    if (in_.size() - at_ < n) fail("truncated");
  }
  std::span<const std::byte> in_;
  std::size_t at_ = 0;
  std::string what_;
};

}  // namespace mpcache
