// Who talks and on which stream: the names every layer above core uses to
// address a party or a sub-protocol, kept here so proto, kv and model need
// not import net just to name a peer.
export module mpcache.core:ids;
import mpcache.std;

export namespace mpcache {

using PartyId = std::uint32_t;
using StreamId = std::uint64_t;

}  // namespace mpcache
