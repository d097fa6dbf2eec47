module;
#include "prelude.hpp"
#include <filesystem>
#include <fstream>
#include <map>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include "json_reader.hpp"
module mpcache.model;
import mpcache.core;

namespace mpcache {

namespace {
std::size_t dtype_size(const std::string& dtype) {
  if (dtype == "F64") return 8;
  if (dtype == "F32") return 4;
  if (dtype == "F16" || dtype == "BF16") return 2;
  return 0;
}

double half_to_double(std::uint16_t h) {
  const int sign = (h >> 15) & 1, exponent = (h >> 10) & 0x1F, mantissa = h & 0x3FF;
  double v;
  if (exponent == 0) v = std::ldexp(mantissa, -24);  // subnormal
  else if (exponent == 31) v = mantissa ? std::nan("") : std::numeric_limits<double>::infinity();
  else v = std::ldexp(mantissa + 1024, exponent - 25);
  return sign ? -v : v;
}

[[noreturn]] void fail(ErrorCode code, const std::filesystem::path& path, const std::string& what) {
  throw Error(code, path.string() + ": " + what);
}
}  // namespace

SafeTensorsFile SafeTensorsFile::open(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorCode::io, path, "cannot open (missing or unreadable)");
  const std::uint64_t file_size = std::filesystem::file_size(path);
  unsigned char len_bytes[8];
  if (!in.read(reinterpret_cast<char*>(len_bytes), 8))
    fail(ErrorCode::format, path, "shorter than the 8-byte header length");
  std::uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i) header_len |= std::uint64_t(len_bytes[i]) << (8 * i);
  if (header_len > file_size - 8 || header_len > (std::uint64_t{100} << 20))
    fail(ErrorCode::format, path, "header length " + std::to_string(header_len) +
                                      " does not fit a file of " + std::to_string(file_size) +
                                      " bytes");
  std::string header(header_len, '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(header_len)))
    fail(ErrorCode::format, path, "truncated header");
  std::vector<json_reader::RawTensor> raw;
  try {
    raw = json_reader::parse_safetensors_header(header);
  } catch (const std::exception& e) {
    fail(ErrorCode::format, path, std::string("bad header: ") + e.what());
  }
  SafeTensorsFile f;
  f.path_ = path;
  f.data_offset_ = 8 + header_len;
  const std::uint64_t data_size = file_size - f.data_offset_;
  for (auto& r : raw) {
    TensorEntry e;
    e.dtype = r.dtype;
    e.shape = Shape(r.shape.begin(), r.shape.end());
    const std::string& name = r.name;
    if (r.offsets.size() != 2) fail(ErrorCode::format, path, "tensor '" + name + "': data_offsets needs two numbers");
    e.begin = r.offsets[0];
    e.end = r.offsets[1];
    const std::size_t width = dtype_size(e.dtype);
    if (!width) fail(ErrorCode::format, path, "tensor '" + name + "': unsupported dtype " + e.dtype);
    if (e.begin > e.end || e.end > data_size)
      fail(ErrorCode::format, path,
           "tensor '" + name + "': data [" + std::to_string(e.begin) + ", " +
               std::to_string(e.end) + ") outside the " + std::to_string(data_size) +
               " data bytes (truncated file?)");
    if (e.end - e.begin != element_count(e.shape) * width)
      fail(ErrorCode::format, path,
           "tensor '" + name + "': " + std::to_string(e.end - e.begin) + " bytes for shape " +
               shape_string(e.shape) + " of " + e.dtype);
    f.entries_.emplace(name, std::move(e));
  }
  return f;
}

namespace {
// A read-only mapping of bytes [offset, offset + size) of a file, unmapped
// on destruction: a tensor is decoded straight from the page cache, and its
// pages leave this process with the mapping (no copy of the file is held).
class MappedRange {
 public:
  MappedRange(const std::filesystem::path& path, std::uint64_t offset, std::uint64_t size) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail(ErrorCode::io, path, "cannot reopen");
    const std::uint64_t page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
    skip_ = offset % page;
    length_ = skip_ + size;
    if (size > 0) {
      base_ = ::mmap(nullptr, length_, PROT_READ, MAP_PRIVATE, fd, static_cast<off_t>(offset - skip_));
      if (base_ == MAP_FAILED) base_ = nullptr;
    }
    ::close(fd);
    if (size > 0 && !base_) fail(ErrorCode::io, path, "cannot map " + std::to_string(size) + " bytes");
    if (base_) ::madvise(base_, length_, MADV_SEQUENTIAL);
  }
  ~MappedRange() {
    if (base_) ::munmap(base_, length_);
  }
  MappedRange(const MappedRange&) = delete;
  MappedRange& operator=(const MappedRange&) = delete;
  const unsigned char* data() const { return base_ ? static_cast<const unsigned char*>(base_) + skip_ : nullptr; }

 private:
  void* base_ = nullptr;
  std::uint64_t skip_ = 0, length_ = 0;
};
}  // namespace

RealTensor SafeTensorsFile::load(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) fail(ErrorCode::format, path_, "no tensor named '" + name + "'");
  const Shape shape = it->second.shape;
  if (shape.empty()) return decode(name, 0, 1, shape);
  return decode(name, 0, shape[0], shape);
}

// Rows [first, last) of dim 0 (all of a 0-d tensor), decoded from a mapping
// of their bytes only.
RealTensor SafeTensorsFile::decode(const std::string& name, std::size_t first, std::size_t last, Shape shape) const {
  const TensorEntry& e = entries_.at(name);
  std::size_t row = 1;
  for (std::size_t d = 1; d < e.shape.size(); ++d) row *= e.shape[d];
  const std::uint64_t width = e.dtype == "F64" ? 8 : e.dtype == "F32" ? 4 : 2;
  // The file may have shrunk since open(): touching a mapped page past its
  // end would be a SIGBUS, so the size is checked first.
  std::error_code ec;
  const std::uint64_t size = std::filesystem::file_size(path_, ec);
  if (ec) fail(ErrorCode::io, path_, "cannot reopen");
  if (size < data_offset_ + e.end) fail(ErrorCode::format, path_, "tensor '" + name + "': truncated data");
  if (!shape.empty()) shape[0] = last - first;
  RealTensor out = RealTensor::from_shape(shape);
  const std::size_t n = out.size();
  if (n == 0) return out;
  const MappedRange mapped(path_, data_offset_ + e.begin + first * row * width, n * width);
  const unsigned char* raw = mapped.data();
  auto le = [&](std::size_t at, int bytes) {
    std::uint64_t v = 0;
    for (int b = 0; b < bytes; ++b) v |= std::uint64_t(raw[at + b]) << (8 * b);
    return v;
  };
  for (std::size_t i = 0; i < n; ++i) {
    if (e.dtype == "F64") {
      const std::uint64_t bits = le(i * 8, 8);
      double d;
      std::memcpy(&d, &bits, 8);
      out.data()[i] = d;
    } else if (e.dtype == "F32") {
      const std::uint32_t bits = static_cast<std::uint32_t>(le(i * 4, 4));
      float x;
      std::memcpy(&x, &bits, 4);
      out.data()[i] = x;
    } else if (e.dtype == "BF16") {
      const std::uint32_t bits = static_cast<std::uint32_t>(le(i * 2, 2)) << 16;
      float x;
      std::memcpy(&x, &bits, 4);
      out.data()[i] = x;
    } else {
      out.data()[i] = half_to_double(static_cast<std::uint16_t>(le(i * 2, 2)));
    }
  }
  return out;
}

RealTensor SafeTensorsFile::load(const std::string& name, const Shape& expected) const {
  auto it = entries_.find(name);
  if (it != entries_.end() && it->second.shape != expected)
    fail(ErrorCode::format, path_, "tensor '" + name + "' has shape " +
                                       shape_string(it->second.shape) + ", expected " +
                                       shape_string(expected));
  return load(name);
}

RealTensor SafeTensorsFile::load_rows(const std::string& name, const Shape& expected, std::size_t first,
                                      std::size_t last) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) fail(ErrorCode::format, path_, "no tensor named '" + name + "'");
  if (it->second.shape != expected)
    fail(ErrorCode::format, path_, "tensor '" + name + "' has shape " + shape_string(it->second.shape) +
                                       ", expected " + shape_string(expected));
  if (expected.empty() || first > last || last > expected[0])
    fail(ErrorCode::invalid_argument, path_, "rows [" + std::to_string(first) + ", " + std::to_string(last) +
                                                 ") of tensor '" + name + "' of shape " + shape_string(expected));
  return decode(name, first, last, expected);
}

}  // namespace mpcache
