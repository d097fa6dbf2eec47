// Party keys: the long-term Ed25519 key pair each party of an encrypted
// cluster holds; peers pin its public half (see ConnectOptions).
export module mpcache.net:keys;
import mpcache.std;

export namespace mpcache {

// A new Ed25519 key pair as PEM texts (secret, public).
std::pair<std::string, std::string> generate_party_key();

}  // namespace mpcache
