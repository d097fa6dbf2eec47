// A stand-in for AES-GCM in the record reader's tests and fuzz target: XOR
// with a keystream of the record index and the byte's position (or none),
// and a tag of sums over the header and the ciphertext. Enough to check
// that the reader opens each body once, in order, and refuses a record
// whose tag does not match; easy for a fuzzer to get right. Include after
// the `import` lines.
#pragma once

namespace mpcache::testing {

struct ToyCipher {
  static std::byte key(std::uint64_t index, std::uint64_t pos) {
    return std::byte(static_cast<std::uint8_t>(pos * 31 + index * 7 + 1));
  }
  static std::byte tag_byte(std::uint64_t sum, std::uint64_t index, std::size_t i) {
    return std::byte(static_cast<std::uint8_t>(sum + index + i));
  }
};

class ToyOpener final : public RecordOpener {
 public:
  // keystream false: bodies travel in the clear (the fuzzer's frames then
  // reach the tag check).
  explicit ToyOpener(bool keystream = true) : keystream_(keystream) {}
  std::size_t tag_bytes() const noexcept override { return 16; }
  void begin(std::uint64_t index, std::span<const std::byte> header) override {
    index_ = index;
    pos_ = 0;
    sum_ = 0;
    for (auto b : header) sum_ += std::to_integer<std::uint64_t>(b);
  }
  void decrypt(std::span<std::byte> piece) override {
    for (auto& b : piece) {
      sum_ += std::to_integer<std::uint64_t>(b);
      if (keystream_) b ^= ToyCipher::key(index_, pos_);
      ++pos_;
    }
  }
  bool finish(std::span<const std::byte> tag) override {
    for (std::size_t i = 0; i < tag.size(); ++i)
      if (tag[i] != ToyCipher::tag_byte(sum_, index_, i)) return false;
    return true;
  }

 private:
  bool keystream_;
  std::uint64_t index_ = 0, pos_ = 0, sum_ = 0;
};

}  // namespace mpcache::testing
