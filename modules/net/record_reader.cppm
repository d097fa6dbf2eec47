// Reading records (see :records) from one connection's byte stream: bytes go
// in as they arrive, cut anywhere, and whole records come out as batches of
// frames. The TCP transport's only parser; no I/O here, so tests and the
// fuzzer drive it byte by byte.
//
// Two ways through a record, the same frames either way:
//  * a record under `large_record_bytes` (its body) is kept whole in the
//    reader's buffer, then opened and decoded;
//  * a larger one is taken frame by frame as it arrives, and each payload
//    goes straight into the vector the receiver gets: space() hands out the
//    rest of that payload, so the socket writes it there and nothing copies
//    it again (a record that is already whole in the buffer is decoded as a
//    small one).
// A record's frames come out only once all of it is in and, on an encrypted
// channel, authenticated. Malformed input is an Error(protocol) naming what
// is wrong; a length is checked against the limit or against the record
// around it before anything is allocated for it.
export module mpcache.net:record_reader;
import mpcache.std;
import mpcache.core;
import :frame;

export namespace mpcache {

// Authenticates and decrypts record bodies in place, for encrypted channels
// (the transport's is AES-256-GCM). Each record: begin, its body in pieces
// in order, then finish with the tag that follows the body.
class RecordOpener {
 public:
  virtual ~RecordOpener() = default;
  virtual std::size_t tag_bytes() const noexcept = 0;
  // `index` counts the records of this stream from 0 (the nonce); `header`
  // is the record's header, authenticated but not encrypted.
  virtual void begin(std::uint64_t index, std::span<const std::byte> header) = 0;
  virtual void decrypt(std::span<std::byte> piece) = 0;
  virtual bool finish(std::span<const std::byte> tag) = 0;  // false: not authentic
};

struct RecordLimits {
  // Longest record body accepted (TcpOptions::max_record_bytes).
  std::uint64_t max_record_bytes = std::uint64_t{1} << 33;
  // Bodies from this size on are taken frame by frame (see above).
  std::uint64_t large_record_bytes = std::uint64_t{1} << 20;
  // Room space() offers in the reader's buffer: at least this much, and no
  // more inside a large record, whose big payloads should rather go
  // straight to their vectors. Large reads mean few system calls; tests and
  // the fuzzer use small ones to cut records across reads.
  std::size_t read_chunk = 256 * 1024;
};

class RecordReader {
 public:
  // With an opener every record must be sealed; without, none is.
  explicit RecordReader(RecordLimits limits = {}, std::unique_ptr<RecordOpener> opener = nullptr);
  ~RecordReader();
  RecordReader(RecordReader&&) noexcept;
  RecordReader& operator=(RecordReader&&) noexcept;

  // Where the stream's next bytes go (never empty): the rest of the payload
  // being received when a large record's payload comes next and nothing is
  // buffered, else room in the reader's buffer. Valid until commit().
  std::span<std::byte> space();
  // The first `n` bytes of space() were filled: parses them.
  void commit(std::size_t n);
  // Copies `bytes` in through space() and commit(), in as many steps as it
  // takes (for callers that do not read from a socket); once the stream is
  // refused, the rest is dropped.
  void feed(std::span<const std::byte> bytes);

  // The next whole record's frames (possibly none), oldest first, or nullopt
  // until more bytes come. After the records that came before it, malformed
  // input throws Error(protocol), then again on every call.
  std::optional<std::vector<Frame>> next();

  // How much of a record the stream ended in: "" at a record boundary, else
  // "got X of Y bytes" (or "got X bytes" before its header is whole).
  std::string unfinished() const;

  // For buffers the kernel may still write to (a receive whose cancel was
  // never answered): the buffer and the payload space() handed out are never
  // freed. The reader must not be used after this.
  void leak() noexcept;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace mpcache
