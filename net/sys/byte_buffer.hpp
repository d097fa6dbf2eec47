// A byte buffer that keeps its capacity and never zero-fills: the transport
// writes every byte before it reads it, and big messages would otherwise pay
// a memset on top of the copy.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <utility>

namespace mpcache::sys {

class ByteBuffer {
 public:
  std::byte* data() noexcept { return data_.get(); }
  const std::byte* data() const noexcept { return data_.get(); }
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  void clear() noexcept { size_ = 0; }
  // Contents up to min(old, new) size are kept; new bytes are unspecified.
  void resize(std::size_t n) {
    if (n > capacity_) reallocate(std::max(n, capacity_ + capacity_ / 2));
    size_ = n;
  }
  // Gives back memory beyond `n` bytes of capacity.
  void shrink(std::size_t n) {
    if (capacity_ > n) reallocate(std::max(n, size_));
  }
  void swap(ByteBuffer& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(capacity_, o.capacity_);
  }
  // For buffers the kernel may still write to: never freed.
  void leak() noexcept {
    (void)data_.release();
    size_ = capacity_ = 0;
  }

 private:
  void reallocate(std::size_t cap) {
    std::unique_ptr<std::byte[]> fresh(new std::byte[cap]);
    if (size_ > 0) std::memcpy(fresh.get(), data_.get(), std::min(size_, cap));
    data_ = std::move(fresh);
    capacity_ = cap;
    size_ = std::min(size_, cap);
  }
  std::unique_ptr<std::byte[]> data_;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
};

}  // namespace mpcache::sys
