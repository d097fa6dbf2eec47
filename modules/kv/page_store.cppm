// A page store: one KV head's pages of tokens, each a row of [key | value |
// position] for its s tokens (see clusters: token_blocks), appended as pages
// complete and read back in chunks of pages for a gather streamed through
// ops::matmul_sum. Two tiers:
//   memory  the rows stay in this process (resident)
//   file    each party writes its own shares to an unnamed temporary file
//           (O_TMPFILE in `dir`, gone when the store is) and keeps none of
//           them: only one chunk is in memory while a gather reads it
// Under MPC a page's id is secret, so a gather reads every chunk every step:
// which pages come back is never visible in what is read (the file tier is
// a backing tier with oblivious recall; see ArkVale). The chunk size bounds
// what a gather holds at once; it does not change the result, the rounds or
// (on rss3, whose matmul_sum reshares once) the bytes.
export module mpcache.kv:page_store;
import mpcache.std;
import mpcache.core;
import mpcache.proto;
import mpcache.ops;
import :policy;

export namespace mpcache::kv {

// An unnamed read-write file (O_TMPFILE; a named file unlinked at once where
// the file system lacks it), closed with the object. Copies get a new file
// with the same bytes.
class BackingFile {
 public:
  explicit BackingFile(const std::filesystem::path& dir);
  BackingFile(const BackingFile& other);
  BackingFile(BackingFile&& other) noexcept;
  BackingFile& operator=(BackingFile other) noexcept;  // copy or move, then swap
  ~BackingFile();

  void write_at(std::uint64_t offset, std::span<const std::byte> bytes);
  void read_at(std::uint64_t offset, std::span<std::byte> bytes) const;
  std::uint64_t size() const noexcept { return size_; }
  const std::filesystem::path& dir() const noexcept { return dir_; }

 private:
  std::filesystem::path dir_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

enum class PageTier { memory, file };

struct PageStoreOptions {
  PageTier tier = PageTier::memory;
  std::filesystem::path dir;    // file tier: where its files go (default: the temporary directory)
  std::size_t chunk_pages = 16; // pages per chunk a gather holds at once
};

template <Protocol P>
class PageStore {
 public:
  using Share = typename P::Share;

  explicit PageStore(PageStoreOptions options = {}) : o_(std::move(options)) {
    if (o_.chunk_pages == 0) throw Error(ErrorCode::invalid_argument, "page store: chunks of zero pages");
    if (o_.tier == PageTier::file && o_.dir.empty()) o_.dir = std::filesystem::temp_directory_path();
  }

  std::size_t pages() const noexcept { return pages_; }
  std::size_t chunks() const noexcept { return (pages_ + o_.chunk_pages - 1) / o_.chunk_pages; }
  // Pages [first, last) of chunk c.
  std::pair<std::size_t, std::size_t> chunk_pages(std::size_t c) const {
    return {c * o_.chunk_pages, std::min(pages_, (c + 1) * o_.chunk_pages)};
  }

  // New pages (n, width), every row one page; the width is fixed by the first.
  void append(const Share& page_rows) {
    const Shape s = P::shape(page_rows);
    if (s.size() != 2 || s[0] == 0 || (width_ != 0 && s[1] != width_))
      throw Error(ErrorCode::invalid_argument, "page store: pages " + shape_string(s) + " for rows of width " +
                                                   std::to_string(width_));
    width_ = s[1];
    if (o_.tier == PageTier::memory) return append_resident(page_rows);
    if (!file_) file_.emplace(o_.dir);
    auto parts = share_components<P>(page_rows);
    component_count_ = parts.size();
    const std::size_t n = s[0], row_words = width_;
    std::vector<Ring> buffer(n * component_count_ * row_words);
    for (std::size_t r = 0; r < n; ++r)  // page-major: a chunk is one contiguous read
      for (std::size_t c = 0; c < component_count_; ++c)
        std::copy_n(parts[c].data() + r * row_words, row_words, buffer.data() + (r * component_count_ + c) * row_words);
    file_->write_at(page_offset(pages_), std::as_bytes(std::span(buffer)));
    if (!prototype_) prototype_ = P::apply(ops::rows<P>(page_rows, 0, 1), [](const RingTensor&) { return ring_zeros({1, 1}); });
    pages_ += n;
  }

  // Chunk c as (pages in it, width).
  Share load(std::size_t c) const {
    if (c >= chunks())
      throw Error(ErrorCode::invalid_argument, "page store: chunk " + std::to_string(c) + " of " +
                                                   std::to_string(chunks()));
    if (o_.tier == PageTier::memory) return resident_.at(c);
    const auto [first, last] = chunk_pages(c);
    const std::size_t n = last - first, row_words = width_;
    std::vector<Ring> buffer(n * component_count_ * row_words);
    file_->read_at(page_offset(first), std::as_writable_bytes(std::span(buffer)));
    std::vector<RingTensor> parts(component_count_);
    for (std::size_t k = 0; k < component_count_; ++k) {
      parts[k] = RingTensor::from_shape({n, row_words});
      for (std::size_t r = 0; r < n; ++r)
        std::copy_n(buffer.data() + (r * component_count_ + k) * row_words, row_words, parts[k].data() + r * row_words);
    }
    return share_from_components<P>(*prototype_, std::move(parts));
  }

  std::size_t resident_bytes() const {
    std::size_t bytes = prototype_ ? share_bytes<P>(*prototype_) : 0;
    for (const auto& chunk : resident_) bytes += share_bytes<P>(chunk);
    return bytes;
  }
  std::size_t file_bytes() const noexcept { return file_ ? file_->size() : 0; }
  const PageStoreOptions& options() const noexcept { return o_; }

 private:
  void append_resident(const Share& page_rows) {
    std::size_t done = 0;
    const std::size_t n = P::shape(page_rows)[0];
    while (done < n) {
      const std::size_t in_last = pages_ % o_.chunk_pages;
      const std::size_t take = std::min(n - done, o_.chunk_pages - in_last);
      auto part = ops::rows<P>(page_rows, done, done + take);
      if (in_last == 0) resident_.push_back(std::move(part));
      else resident_.back() = ops::stack_rows<P>(resident_.back(), part);
      pages_ += take;
      done += take;
    }
  }

  std::uint64_t page_offset(std::size_t page) const {
    return static_cast<std::uint64_t>(page) * component_count_ * width_ * sizeof(Ring);
  }

  PageStoreOptions o_;
  std::size_t pages_ = 0, width_ = 0, component_count_ = 0;
  std::vector<Share> resident_;     // memory tier: one share per chunk
  std::optional<BackingFile> file_; // file tier
  std::optional<Share> prototype_;  // file tier: one word a component, for the layout load() rebuilds
};

}  // namespace mpcache::kv
