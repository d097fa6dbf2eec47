// kv::BackingFile: an unnamed temporary file for the page store's file tier.
module;
#include "prelude.hpp"
#include <cerrno>
#include <fcntl.h>
#include <unistd.h>
module mpcache.kv;
import mpcache.core;

namespace mpcache::kv {
namespace {
[[noreturn]] void fail(const std::string& what, const std::filesystem::path& dir) {
  throw Error(ErrorCode::io, "page store file in " + dir.string() + ": " + what + ": " + std::strerror(errno));
}

int open_unnamed(const std::filesystem::path& dir) {
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0) return fd;
  if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL) fail("cannot create a file", dir);
  std::string name = (dir / "mpcache-pages.XXXXXX").string();
  fd = ::mkostemp(name.data(), O_CLOEXEC);
  if (fd < 0) fail("cannot create a file", dir);
  ::unlink(name.c_str());
  return fd;
}
}  // namespace

BackingFile::BackingFile(const std::filesystem::path& dir) : dir_(dir), fd_(open_unnamed(dir)) {}

BackingFile::BackingFile(const BackingFile& other) : BackingFile(other.dir_) {
  std::vector<std::byte> buffer(std::min<std::uint64_t>(other.size_, 1 << 20));
  for (std::uint64_t at = 0; at < other.size_; at += buffer.size()) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(buffer.size(), other.size_ - at));
    other.read_at(at, std::span(buffer.data(), n));
    write_at(at, std::span<const std::byte>(buffer.data(), n));
  }
}

BackingFile::BackingFile(BackingFile&& other) noexcept
    : dir_(std::move(other.dir_)), fd_(std::exchange(other.fd_, -1)), size_(std::exchange(other.size_, 0)) {}

BackingFile& BackingFile::operator=(BackingFile other) noexcept {
  std::swap(dir_, other.dir_);
  std::swap(fd_, other.fd_);
  std::swap(size_, other.size_);
  return *this;
}

BackingFile::~BackingFile() {
  if (fd_ >= 0) ::close(fd_);
}

void BackingFile::write_at(std::uint64_t offset, std::span<const std::byte> bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::pwrite(fd_, bytes.data() + done, bytes.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("write of " + std::to_string(bytes.size()) + " bytes at " + std::to_string(offset), dir_);
    done += static_cast<std::size_t>(n);
  }
  size_ = std::max<std::uint64_t>(size_, offset + bytes.size());
}

void BackingFile::read_at(std::uint64_t offset, std::span<std::byte> bytes) const {
  if (offset + bytes.size() > size_)
    throw Error(ErrorCode::invalid_argument, "page store file: read of " + std::to_string(bytes.size()) +
                                                 " bytes at " + std::to_string(offset) + " past its " +
                                                 std::to_string(size_) + " bytes");
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::pread(fd_, bytes.data() + done, bytes.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("read of " + std::to_string(bytes.size()) + " bytes at " + std::to_string(offset), dir_);
    if (n == 0)
      throw Error(ErrorCode::io, "page store file in " + dir_.string() + " ended early at " +
                                     std::to_string(offset + done));
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace mpcache::kv
