// Reader for Hugging Face safetensors files: an 8-byte little-endian header
// length, a JSON header (name -> dtype, shape, data_offsets), raw
// little-endian data. F64, F32, F16 and BF16 tensors load as float64.
// Every inconsistency (short file, bad header, offsets outside the data,
// unknown dtype, missing tensor, unexpected shape) is an Error naming the
// file and the tensor. A tensor is decoded from a read-only mapping of its
// own bytes (load), so the reader holds at most one tensor of the file, or
// a range of its rows (load_rows).
export module mpcache.model:safetensors;
import mpcache.std;
import mpcache.core;

export namespace mpcache {

struct TensorEntry {
  std::string dtype;
  Shape shape;
  std::uint64_t begin = 0;  // offsets into the data section
  std::uint64_t end = 0;
};

class SafeTensorsFile {
 public:
  static SafeTensorsFile open(const std::filesystem::path& path);

  const std::filesystem::path& path() const noexcept { return path_; }
  const std::map<std::string, TensorEntry>& entries() const noexcept { return entries_; }
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }

  RealTensor load(const std::string& name) const;
  // Also checks the shape: a checkpoint that does not fit the config fails here.
  RealTensor load(const std::string& name, const Shape& expected) const;
  // Rows [first, last) of dim 0 of a tensor of shape `expected` (checked),
  // read from a mapping of those rows' bytes only: a big tensor a piece at a time.
  RealTensor load_rows(const std::string& name, const Shape& expected, std::size_t first, std::size_t last) const;

 private:
  RealTensor decode(const std::string& name, std::size_t first, std::size_t last, Shape shape) const;

  std::filesystem::path path_;
  std::uint64_t data_offset_ = 0;
  std::map<std::string, TensorEntry> entries_;
};

}  // namespace mpcache
