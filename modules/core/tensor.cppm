// Tensor<T>: a shape and its elements, row-major, in one contiguous buffer.
//
// The library's own tensor, so that no public interface names a tensor
// library (the float64 reference's arithmetic uses one, privately):
// shares and clear-text values are Tensor<Ring> (RingTensor) and
// Tensor<double> (RealTensor). It holds only what the code base uses:
// construction, shape, element access, raw data for the ring kernels, and
// equality. No expression templates, views or broadcasting; arithmetic is
// ring_* (mpcache.core:ring) or a loop over data().
//
// Its buffer is its own allocation, or a received message's byte vector
// that it adopted (adopt_bytes): a message becomes a tensor without a copy.
export module mpcache.core:tensor;
import mpcache.std;
import :error;

export namespace mpcache {

using Shape = std::vector<std::size_t>;

template <class T>
class Tensor {
 public:
  using value_type = T;
  using size_type = std::size_t;
  using iterator = T*;
  using const_iterator = const T*;

  // A zero-dimensional tensor of one element (a scalar, as in NumPy).
  Tensor() : Tensor(zeros(Shape{})) {}
  // Elements left uninitialised: the caller writes every one (as
  // xt::xarray::from_shape, which this replaces without a memset).
  static Tensor from_shape(Shape shape) { return Tensor(std::move(shape), Uninitialised{}); }
  static Tensor zeros(Shape shape) { return filled(std::move(shape), T{}); }
  static Tensor filled(Shape shape, T value) {
    Tensor t = from_shape(std::move(shape));
    std::fill(t.begin(), t.end(), value);
    return t;
  }
  // {a, b, c}: a vector; {{a, b}, {c, d}}: a matrix (rows of equal length).
  Tensor(std::initializer_list<T> values) : Tensor(Shape{values.size()}, Uninitialised{}) {
    std::copy(values.begin(), values.end(), begin());
  }
  Tensor(std::initializer_list<std::initializer_list<T>> rows)
      : Tensor(Shape{rows.size(), rows.size() == 0 ? 0 : rows.begin()->size()}, Uninitialised{}) {
    T* out = data();
    for (const auto& row : rows) {
      if (row.size() != shape_[1])
        throw Error(ErrorCode::invalid_argument, "Tensor: rows of different lengths (" +
                                                     std::to_string(row.size()) + " and " +
                                                     std::to_string(shape_[1]) + ")");
      out = std::copy(row.begin(), row.end(), out);
    }
  }

  // The elements of `shape` in `bytes` (host order), which must hold exactly
  // that many: the tensor takes over the vector's buffer instead of copying
  // it (a received message; std::allocator aligns it for any scalar type).
  static Tensor adopt_bytes(Shape shape, std::vector<std::byte>&& bytes)
    requires std::is_trivially_copyable_v<T>
  {
    Tensor t;
    t.shape_ = std::move(shape);
    t.size_ = std::accumulate(t.shape_.begin(), t.shape_.end(), size_type{1}, std::multiplies<>{});
    if (bytes.size() != t.size_ * sizeof(T))
      throw Error(ErrorCode::invalid_argument, "Tensor::adopt_bytes: " + std::to_string(bytes.size()) +
                                                   " bytes for " + std::to_string(t.size_) + " elements of " +
                                                   std::to_string(sizeof(T)) + " bytes");
    if (reinterpret_cast<std::uintptr_t>(bytes.data()) % alignof(T) != 0)
      throw Error(ErrorCode::invalid_argument, "Tensor::adopt_bytes: the buffer is not aligned for its elements");
    t.owned_.reset();
    t.adopted_ = std::move(bytes);
    t.data_ = t.size_ == 0 ? nullptr : reinterpret_cast<T*>(t.adopted_.data());
    return t;
  }

  Tensor(const Tensor& o) : Tensor(o.shape_, Uninitialised{}) { std::copy(o.begin(), o.end(), begin()); }
  Tensor(Tensor&& o) noexcept
      : shape_(std::move(o.shape_)),
        size_(std::exchange(o.size_, 0)),
        owned_(std::move(o.owned_)),
        adopted_(std::move(o.adopted_)),
        data_(std::exchange(o.data_, nullptr)) {}
  Tensor& operator=(const Tensor& o) {
    if (this != &o) {
      if (size_ != o.size_) {
        owned_ = std::make_unique_for_overwrite<T[]>(o.size_);
        adopted_ = {};
        data_ = owned_.get();
      }
      shape_ = o.shape_;
      size_ = o.size_;
      std::copy(o.begin(), o.end(), begin());
    }
    return *this;
  }
  Tensor& operator=(Tensor&& o) noexcept {
    if (this != &o) {
      shape_ = std::move(o.shape_);
      size_ = std::exchange(o.size_, 0);
      data_ = std::exchange(o.data_, nullptr);
      owned_ = std::move(o.owned_);
      adopted_ = std::move(o.adopted_);
    }
    return *this;
  }

  // The same elements under `shape`, which must count as many: no copy.
  void reshape(Shape shape) {
    const size_type n = std::accumulate(shape.begin(), shape.end(), size_type{1}, std::multiplies<>{});
    if (n != size_)
      throw Error(ErrorCode::invalid_argument, "Tensor::reshape: " + std::to_string(size_) + " elements into " +
                                                   std::to_string(n));
    shape_ = std::move(shape);
  }

  const Shape& shape() const noexcept { return shape_; }
  size_type size() const noexcept { return size_; }
  size_type dimension() const noexcept { return shape_.size(); }

  T* data() noexcept { return data_; }
  const T* data() const noexcept { return data_; }
  T* begin() noexcept { return data(); }
  T* end() noexcept { return data() + size_; }
  const T* begin() const noexcept { return data(); }
  const T* end() const noexcept { return data() + size_; }

  // Element at a row-major index; for the count of indices: extra
  // leading indices are dropped, missing ones are the leading axes (t(i)
  // of a matrix is row 0, column i). Unchecked.
  template <std::integral... I>
  T& operator()(I... index) noexcept {
    return data_[offset({static_cast<size_type>(index)...})];
  }
  template <std::integral... I>
  const T& operator()(I... index) const noexcept {
    return data_[offset({static_cast<size_type>(index)...})];
  }

  // Same shape and the same elements.
  friend bool operator==(const Tensor& a, const Tensor& b) noexcept {
    return a.shape_ == b.shape_ && std::equal(a.begin(), a.end(), b.begin());
  }

 private:
  struct Uninitialised {};
  Tensor(Shape shape, Uninitialised)
      : shape_(std::move(shape)),
        size_(std::accumulate(shape_.begin(), shape_.end(), size_type{1}, std::multiplies<>{})),
        owned_(std::make_unique_for_overwrite<T[]>(size_)),
        data_(owned_.get()) {}

  size_type offset(std::initializer_list<size_type> index) const noexcept {
    const size_type n = index.size(), dims = shape_.size();
    const size_type* i = index.begin() + (n > dims ? n - dims : 0);  // extra leading ones dropped
    const size_type first_axis = n < dims ? dims - n : 0;            // missing ones: leading axes at 0
    size_type at = 0;
    for (size_type axis = first_axis; axis < dims; ++axis, ++i) at = at * shape_[axis] + *i;
    return at;
  }

  Shape shape_;
  size_type size_ = 0;
  // Exactly one of owned_ and adopted_ holds the buffer data_ points into.
  std::unique_ptr<T[]> owned_;
  std::vector<std::byte> adopted_;
  T* data_ = nullptr;
};

// (m, n) -> (n, m); throws Error(invalid_argument) for other ranks.
template <class T>
Tensor<T> transpose(const Tensor<T>& a) {
  if (a.dimension() != 2)
    throw Error(ErrorCode::invalid_argument,
                "transpose needs a matrix, not " + std::to_string(a.dimension()) + " dimensions");
  const std::size_t m = a.shape()[0], n = a.shape()[1];
  Tensor<T> out = Tensor<T>::from_shape({n, m});
  const T* in = a.data();
  T* o = out.data();
  // In tiles of 8 x 8: a row-by-row copy writes one column of the output,
  // n lines m elements apart; when m is a power of two (a KV list of 2,048
  // rows) they all fall in one cache set and every write misses. A tile
  // touches 8 lines each way (a line of 8 words on x86-64).
  constexpr std::size_t tile = 8;
  for (std::size_t i0 = 0; i0 < m; i0 += tile) {
    const std::size_t i1 = std::min(m, i0 + tile);
    for (std::size_t j0 = 0; j0 < n; j0 += tile) {
      const std::size_t j1 = std::min(n, j0 + tile);
      for (std::size_t j = j0; j < j1; ++j)
        for (std::size_t i = i0; i < i1; ++i) o[j * m + i] = in[i * n + j];
    }
  }
  return out;
}

}  // namespace mpcache
