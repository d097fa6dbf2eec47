// Inputs and outputs of a party outside the computation: a service's client
// gives the three rss3 servers a secret and learns one, without any single
// server learning it (docs/protocols.md, "Clients outside the parties").
//
// x = s0 + s1 + s2 and server i holds (s_i, s_{i+1}), as in rss3. The client
// draws s0 and s1 from two fresh 16-byte seeds and sets s2 = x - s0 - s1.
// Server 0 gets both seeds, server 1 seed 1 and s2, server 2 s2 and seed 0:
// each server sees two of the three components, which are uniform and
// independent of x; the client sends x's size twice, not three times.
// To open a share to the client, every server sends its two components; each
// component thus comes from two servers, and the client refuses a result
// whose copies disagree (a server that lies is caught unless both lie).
export module mpcache.proto:client_shares;
import mpcache.std;
import mpcache.core;
import :prg;
import :rss3;

export namespace mpcache::client_shares {

// What the client sends server `i` (0..2) for a secret x: two components,
// each a 16-byte seed or the values. Fresh seeds from the OS RNG.
std::array<std::vector<std::byte>, 3> split(const RingTensor& x);
// Server `server`'s share from the client's part for a secret of `shape`.
// A part of the wrong size or form throws Error(protocol) naming what.
Rss3Share assemble(PartyId server, std::span<const std::byte> part, const Shape& shape);
// The same checks, without assembling: a part fit for the shape, or throws.
void check_part(PartyId server, std::span<const std::byte> part, const Shape& shape);
// Rows [begin, end) (along the first axis) of server `server`'s share: a
// service's prompt is embedded a wave of rows at a time, never held whole.
Rss3Share assemble_rows(PartyId server, std::span<const std::byte> part, const Shape& shape, std::size_t begin,
                        std::size_t end);
// What a server sends the client to open `share`: its two components.
std::vector<std::byte> open_part(const Rss3Share& share);
// The client: x from the three servers' parts, checking that every
// component's two copies agree. Throws Error(protocol) naming the servers.
RingTensor reconstruct(const std::array<std::vector<std::byte>, 3>& parts, const Shape& shape);

}  // namespace mpcache::client_shares
