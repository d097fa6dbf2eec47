// Party keys (see modules/net/keys.cppm), made by net/sys/handshake.
module;
#include "prelude.hpp"
#include "sys/handshake.hpp"
module mpcache.net;
import mpcache.core;

namespace mpcache {

std::pair<std::string, std::string> generate_party_key() {
  try {
    return sys::generate_ed25519_pem();
  } catch (const std::runtime_error& e) {
    throw Error(ErrorCode::invalid_argument, e.what());
  }
}

}  // namespace mpcache
