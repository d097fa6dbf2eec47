// What a service's client and servers say to each other, and what the
// servers say among themselves about sessions: byte formats and streams.
//
// Client -> each server (its own channel):
//   request_stream  ServeRequest: nonce, shapes, policy, stop tokens (public)
//   prompt_stream   the client's part of its secret one-hot prompt
//                   (client_shares::split; server i gets part i)
//   drafts_stream   speculating (ServeRequest::speculate > 0): before each
//                   decode step, its part of the step's K'+1 one-hot rows
//                   (the last token, then K' drafts); an empty frame ends
//                   the generation (the client saw a stop token)
// Server -> client, one stream (reply_stream), in order:
//   'A' accepted (session number) or 'R' refused (why), then per chosen
//   token 'T' + the server's part of it (client_shares::open_part); a
//   speculating session's decode steps send 'V' + n (8 bytes) + the part of
//   the step's n tokens (the accepted drafts and the correction), then
//   'D' done (tokens chosen) or 'F' failed (why). Beside it, an empty
//   frame on heartbeat_stream every ServeOptions::heartbeat_every, which the
//   client takes and ignores: it keeps the client's silence deadline from
//   running out while the request waits in the queue or a long prefill.
// Leader (server 0) -> servers 1 and 2, on the mesh (announce_stream):
//   Announcement: the session number it gave a client's request (by nonce)
//   and the request's bytes, or a refusal and why.
// Batched decoding (continuous batching, ServeOptions::max_batch > 1):
//   servers 1, 2 -> leader (batch_ready_stream)  BatchReady: a session
//       finished its prefill here and joins the decode batches (or failed)
//   leader -> servers 1, 2 (batch_stream)        BatchStep: the sessions of
//       the next batched decode step of a lane, and the sessions that leave (why)
// The drain (drain_stream, DrainNote), both ways between the leader and each
// of servers 1 and 2:
//   servers 1, 2 -> leader  'S' this server was asked to stop (SIGTERM);
//                           'E' a session the leader admitted has ended here
//                           (done, failed, or never launched here); 'B' bye:
//                           the leader's 'C' came, waiting for its close
//   leader -> servers 1, 2  'C' the drain is complete: every session it
//                           admitted has ended at all three servers
export module mpcache.serve:messages;
import mpcache.std;
import mpcache.core;
import mpcache.net;

export namespace mpcache::serve {

// Client channel streams (scope 0: they are never cancelled with a session).
inline constexpr StreamId request_stream = 0x0000'7265'7175'6573ull;  // "reques"
inline constexpr StreamId prompt_stream = 0x0000'7072'6F6D'7074ull;   // "prompt"
inline constexpr StreamId reply_stream = 0x0000'7265'706C'7921ull;    // "reply!"
inline constexpr StreamId noise_stream = 0x0000'6E6F'6973'6521ull;    // "noise!": Gumbel noise shares (sampled requests)
inline constexpr StreamId drafts_stream = 0x0000'6472'6166'7473ull;   // "drafts": each step's rows (speculating requests)
inline constexpr StreamId goodbye_stream = 0x0000'6279'6521'2121ull;  // "bye!!!": never sent; its wait ends when the link does
// Mesh streams of the service (scope 0).
inline constexpr StreamId announce_stream = 0x0000'616E'6E6F'756Eull;  // "announ"
inline constexpr StreamId heartbeat_stream = 0x0000'6265'6174'2121ull;  // "beat!!"
inline constexpr StreamId batch_stream = 0x0000'6261'7463'6821ull;        // "batch!"
inline constexpr StreamId batch_ready_stream = 0x0000'6A6F'696E'6564ull;  // "joined"
inline constexpr StreamId drain_stream = 0x0000'6472'6169'6E21ull;        // "drain!"

using Nonce = std::array<std::uint64_t, 2>;

// The public part of a client's request, the same to every server.
struct ServeRequest {
  Nonce nonce{};                     // the client's random tag that ties its three requests together
  std::uint64_t prompt_length = 0;   // tokens
  std::uint64_t new_tokens = 0;      // the most tokens to choose
  std::uint64_t budget = 0;          // KV budget; 0: the policy's default
  std::string policy;                // a name from kv's policy table
  std::vector<std::uint32_t> stop_tokens;  // generation ends once one is chosen
  // Sampling: the client sends secret-shared noise on noise_stream, one row
  // of the vocabulary's size per token (new_tokens rows), and each token is
  // the argmax of the logits plus its row (the Gumbel-max trick: the noise
  // is temperature x Gumbel(0, 1), drawn by the client; no server learns it).
  bool sampled = false;
  // Speculation: each decode step verifies up to this many tokens the
  // client drafted (0: none). The client sends each step's rows on
  // drafts_stream; every server learns how many each step accepted.
  std::uint64_t speculate = 0;

  std::vector<std::byte> encode() const;
  // Throws Error(protocol) naming what is malformed.
  static ServeRequest decode(std::span<const std::byte> bytes);
};

enum class ReplyKind : std::uint8_t {
  accepted = 'A',
  refused = 'R',
  token = 'T',
  verified = 'V',  // a speculative step's tokens
  done = 'D',
  failed = 'F'
};

struct Reply {
  ReplyKind kind = ReplyKind::failed;
  std::vector<std::byte> body;  // session number (8 bytes), a token part, n + n tokens' part, tokens chosen (8 bytes) or why (text)

  std::vector<std::byte> encode() const;
  static Reply decode(std::span<const std::byte> bytes, const std::string& from);
  static Reply text(ReplyKind kind, const std::string& why);
  static Reply number(ReplyKind kind, std::uint64_t n);
  std::string text() const;
  std::uint64_t number() const;  // throws Error(protocol) unless 8 bytes
};

struct Announcement {
  bool admitted = false;
  std::uint64_t session = 0;        // when admitted
  Nonce nonce{};
  std::vector<std::byte> request;   // admitted: the request's bytes as the leader got them
  std::string why;                  // refused: the reason every server tells the client

  std::vector<std::byte> encode() const;
  static Announcement decode(std::span<const std::byte> bytes);
};

// A follower's word on one session's prefill: it joins the batches, or failed (why).
struct BatchReady {
  std::uint64_t session = 0;
  bool joined = false;
  std::string why;  // failed: the reason

  std::vector<std::byte> encode() const;
  static BatchReady decode(std::span<const std::byte> bytes);
};

// The leader's plan for one batched decode step: which sessions step, in
// which order (their rows' order), and which leave the batches first.
struct BatchStep {
  std::uint64_t lane = 0;                                        // which of the steps in flight (ServeOptions::decode_lanes)
  std::vector<std::uint64_t> sessions;                           // may be empty: only departures
  std::vector<std::pair<std::uint64_t, std::string>> departures;  // session, why

  std::vector<std::byte> encode() const;
  static BatchStep decode(std::span<const std::byte> bytes);
};

// One word of the coordinated drain (drain_stream, above).
enum class DrainKind : std::uint8_t { stop_asked = 'S', session_ended = 'E', complete = 'C', bye = 'B' };

struct DrainNote {
  DrainKind kind = DrainKind::stop_asked;
  std::uint64_t session = 0;  // session_ended: which
  std::uint8_t asked_by = 0;  // complete: the server whose stop request began the drain

  std::vector<std::byte> encode() const;
  // Throws Error(protocol) naming what is malformed.
  static DrainNote decode(std::span<const std::byte> bytes);
};

std::string nonce_text(const Nonce& nonce);

}  // namespace mpcache::serve
