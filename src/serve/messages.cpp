module mpcache.serve;
import mpcache.std;
import mpcache.core;

namespace mpcache::serve {
namespace {

// Fields: ByteWriter and ByteReader (mpcache.core:wire), little-endian,
// each read bounds-checked.
constexpr std::size_t max_policy_name = 64, max_stop_tokens = 64, max_why = 4096;

}  // namespace

std::vector<std::byte> ServeRequest::encode() const {
  ByteWriter w;
  w.u64(nonce[0]);
  w.u64(nonce[1]);
  w.u64(prompt_length);
  w.u64(new_tokens);
  w.u64(budget);
  w.text(policy);
  w.u64(stop_tokens.size());
  for (auto t : stop_tokens) w.u64(t);
  w.u8(sampled ? 1 : 0);
  w.u64(speculate);
  return std::move(w.out);
}

ServeRequest ServeRequest::decode(std::span<const std::byte> bytes) {
  ByteReader r(bytes, "client request");
  ServeRequest q;
  q.nonce = {r.u64(), r.u64()};
  q.prompt_length = r.u64();
  q.new_tokens = r.u64();
  q.budget = r.u64();
  q.policy = r.text(max_policy_name);
  const std::uint64_t stops = r.u64();
  if (stops > max_stop_tokens) r.fail(std::to_string(stops) + " stop tokens (at most " + std::to_string(max_stop_tokens) + ")");
  for (std::uint64_t i = 0; i < stops; ++i) {
    const std::uint64_t t = r.u64();
    if (t > 0xFFFFFFFFull) r.fail("stop token " + std::to_string(t) + " is not a token id");
    q.stop_tokens.push_back(static_cast<std::uint32_t>(t));
  }
  const std::uint8_t sampled = r.u8();
  if (sampled > 1) r.fail("sampled is " + std::to_string(sampled) + ", not 0 or 1");
  q.sampled = sampled == 1;
  q.speculate = r.u64();  // its range: admission (request_problem)
  r.end();
  return q;
}

std::vector<std::byte> Reply::encode() const {
  std::vector<std::byte> out{std::byte(static_cast<std::uint8_t>(kind))};
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

Reply Reply::decode(std::span<const std::byte> bytes, const std::string& from) {
  if (bytes.empty()) throw Error(ErrorCode::protocol, from + " sent an empty reply");
  const auto k = std::to_integer<std::uint8_t>(bytes[0]);
  const std::string known = "ARTVDF";
  if (known.find(char(k)) == std::string::npos)
    throw Error(ErrorCode::protocol, from + " sent a reply of unknown kind " + std::to_string(k));
  return Reply{ReplyKind(k), std::vector<std::byte>(bytes.begin() + 1, bytes.end())};
}

Reply Reply::text(ReplyKind kind, const std::string& why) {
  const std::string t = why.substr(0, max_why);
  return Reply{kind, std::vector<std::byte>(reinterpret_cast<const std::byte*>(t.data()),
                                            reinterpret_cast<const std::byte*>(t.data()) + t.size())};
}

Reply Reply::number(ReplyKind kind, std::uint64_t n) {
  ByteWriter w;
  w.u64(n);
  return Reply{kind, std::move(w.out)};
}

std::string Reply::text() const { return std::string(reinterpret_cast<const char*>(body.data()), body.size()); }

std::uint64_t Reply::number() const {
  ByteReader r(body, "server reply");
  const std::uint64_t n = r.u64();
  r.end();
  return n;
}

std::vector<std::byte> Announcement::encode() const {
  ByteWriter w;
  w.u8(admitted ? 1 : 0);
  w.u64(session);
  w.u64(nonce[0]);
  w.u64(nonce[1]);
  w.bytes(request);
  w.text(why);
  return std::move(w.out);
}

Announcement Announcement::decode(std::span<const std::byte> bytes) {
  ByteReader r(bytes, "leader's announcement");
  Announcement a;
  a.admitted = r.u8() == 1;
  a.session = r.u64();
  a.nonce = {r.u64(), r.u64()};
  a.request = r.bytes(1 << 16);
  a.why = r.text(max_why);
  r.end();
  return a;
}

std::vector<std::byte> BatchReady::encode() const {
  ByteWriter w;
  w.u64(session);
  w.u8(joined ? 1 : 0);
  w.text(why);
  return std::move(w.out);
}

BatchReady BatchReady::decode(std::span<const std::byte> bytes) {
  ByteReader r(bytes, "a server's batch readiness");
  BatchReady b;
  b.session = r.u64();
  b.joined = r.u8() == 1;
  b.why = r.text(max_why);
  r.end();
  return b;
}

std::vector<std::byte> DrainNote::encode() const {
  ByteWriter w;
  w.u8(static_cast<std::uint8_t>(kind));
  w.u64(session);
  w.u8(asked_by);
  return std::move(w.out);
}

DrainNote DrainNote::decode(std::span<const std::byte> bytes) {
  ByteReader r(bytes, "a server's drain note");
  DrainNote d;
  const std::uint8_t k = r.u8();
  if (std::string("SECB").find(char(k)) == std::string::npos) r.fail("unknown drain note kind " + std::to_string(k));
  d.kind = static_cast<DrainKind>(k);
  d.session = r.u64();
  d.asked_by = r.u8();
  if (d.asked_by > 2) r.fail("server " + std::to_string(d.asked_by) + " is not one of 0, 1, 2");
  r.end();
  return d;
}

std::vector<std::byte> BatchStep::encode() const {
  ByteWriter w;
  w.u64(lane);
  w.u64(sessions.size());
  for (auto s : sessions) w.u64(s);
  w.u64(departures.size());
  for (const auto& [s, why] : departures) {
    w.u64(s);
    w.text(why);
  }
  return std::move(w.out);
}

BatchStep BatchStep::decode(std::span<const std::byte> bytes) {
  ByteReader r(bytes, "leader's batch step");
  BatchStep b;
  b.lane = r.u64();
  const std::uint64_t n = r.u64();
  if (n > bytes.size() / 8) r.fail(std::to_string(n) + " sessions do not fit");
  for (std::uint64_t i = 0; i < n; ++i) b.sessions.push_back(r.u64());
  const std::uint64_t m = r.u64();
  if (m > bytes.size() / 8) r.fail(std::to_string(m) + " departures do not fit");
  for (std::uint64_t i = 0; i < m; ++i) {
    const std::uint64_t s = r.u64();
    b.departures.emplace_back(s, r.text(max_why));
  }
  r.end();
  return b;
}

std::string nonce_text(const Nonce& nonce) {
  char text[33];
  std::snprintf(text, sizeof text, "%016llx%016llx", static_cast<unsigned long long>(nonce[0]),
                static_cast<unsigned long long>(nonce[1]));
  return text;
}

}  // namespace mpcache::serve
