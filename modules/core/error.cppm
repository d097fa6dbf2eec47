// Errors the library reports: one exception type with a code the caller can
// switch on, and a message that names what is wrong.
export module mpcache.core:error;
import mpcache.std;

export namespace mpcache {

enum class ErrorCode : std::uint8_t {
  invalid_argument,  // wrong shapes, bad fixed-point value, bad option
  bad_party,         // party id out of range or not allowed for this call
  protocol,          // a peer sent something that does not fit the protocol
  network,           // a link failed or a peer went away
  timeout,           // a deadline passed
  deadlock,          // every task waits on the network and nothing is in flight
  io,                // a file is missing or unreadable
  format,            // a file is malformed or truncated
  cancelled,         // a caller stopped the work: this party's, or a peer's
};

constexpr const char* to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::invalid_argument: return "invalid argument";
    case ErrorCode::bad_party: return "bad party";
    case ErrorCode::protocol: return "protocol error";
    case ErrorCode::network: return "network error";
    case ErrorCode::timeout: return "timeout";
    case ErrorCode::deadlock: return "deadlock";
    case ErrorCode::io: return "i/o error";
    case ErrorCode::format: return "format error";
    case ErrorCode::cancelled: return "cancelled";
  }
  return "error";
}

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& what)
      : std::runtime_error(std::string(to_string(code)) + ": " + what), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace mpcache
