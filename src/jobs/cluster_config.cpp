#include "cluster_config.hpp"
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

namespace mpcache::jobs {

std::string read_text_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + what + " '" + path + "'");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_text_file(const std::string& path, const std::string& text, bool secret) {
  if (secret) {
    write_key_file(path, text, 0600, /*overwrite=*/false);
    return;
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error("cannot write '" + path + "'");
  out << text;
  out.close();
}

void write_key_file(const std::string& path, const std::string& text, unsigned mode, bool overwrite) {
  // Never follow a link planted at the path, never open an existing file:
  // the file is born with its final mode, so the secret is never readable by
  // others, not even for a moment. Overwriting removes the old entry (a link
  // itself, not its target) first.
  if (overwrite && ::unlink(path.c_str()) != 0 && errno != ENOENT)
    throw std::runtime_error("cannot replace '" + path + "': " + std::strerror(errno));
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) {
    if (errno == EEXIST)
      throw std::runtime_error("'" + path + "' already exists; refusing to overwrite a key file (--force replaces it)");
    throw std::runtime_error("cannot create '" + path + "': " + std::strerror(errno));
  }
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      throw std::runtime_error("cannot write '" + path + "': " + why);
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) throw std::runtime_error("cannot write '" + path + "': " + std::strerror(errno));
}

namespace {

// A JSON integer within [lo, hi], or an error naming the key. nlohmann keeps
// unsigned and signed integers apart and get<int>() would silently drop the
// high bits of 4294974608 or 2^40, so check before narrowing.
long long integer_in(const nlohmann::json& v, const std::string& key, long long lo, long long hi) {
  const std::string range = " (" + std::to_string(lo) + ".." + std::to_string(hi) + ")";
  if (!v.is_number_integer()) throw std::runtime_error(key + " must be an integer" + range + ", not " + v.dump());
  const bool fits = v.is_number_unsigned() ? v.get<std::uint64_t>() <= static_cast<std::uint64_t>(hi)
                                           : v.get<std::int64_t>() >= lo && v.get<std::int64_t>() <= hi;
  if (!fits || v.get<std::int64_t>() < lo) throw std::runtime_error(key + " is out of range" + range + ": " + v.dump());
  return v.get<std::int64_t>();
}

}  // namespace

ClusterConfig read_cluster_config(const std::string& path) {
  const std::string text = read_text_file(path, "cluster config");
  const auto base = std::filesystem::path(path).parent_path();
  auto resolve = [&](const std::string& p) {
    if (p.empty() || std::filesystem::path(p).is_absolute()) return p;
    return (base / p).string();
  };
  ClusterConfig c;
  try {
    const auto j = nlohmann::json::parse(text);
    if (!j.is_object()) throw std::runtime_error("the config must be a JSON object");
    if (!j.contains("parties") || !j["parties"].is_array())
      throw std::runtime_error("missing array 'parties'");
    std::size_t i = 0;
    for (const auto& p : j["parties"]) {
      const std::string at = "parties[" + std::to_string(i++) + "]";
      if (!p.is_object()) throw std::runtime_error(at + " must be an object");
      if (!p.contains("host") || !p["host"].is_string() || p["host"].get<std::string>().empty())
        throw std::runtime_error(at + ".host missing or not a host name");
      if (!p.contains("port")) throw std::runtime_error(at + ".port missing");
      const auto port = integer_in(p["port"], at + ".port", 1, 65535);
      for (const char* key : {"public_key", "secret_key"})
        if (p.contains(key) && !p[key].is_string())
          throw std::runtime_error(at + "." + key + " must be a path (string)");
      ClusterParty party{p["host"].get<std::string>(), static_cast<std::uint16_t>(port),
                         resolve(p.value("public_key", "")), resolve(p.value("secret_key", ""))};
      if (p.contains("client_port"))
        party.client_port = static_cast<std::uint16_t>(integer_in(p["client_port"], at + ".client_port", 1, 65535));
      if (party.client_port == party.port) throw std::runtime_error(at + ".client_port is its mesh port too");
      for (std::size_t k = 0; k < c.parties.size(); ++k)
        if (c.parties[k].host == party.host && c.parties[k].port == party.port)
          throw std::runtime_error(at + " has the same host and port as parties[" + std::to_string(k) + "]");
      c.parties.push_back(party);
    }
    if (c.parties.size() != 3) throw std::runtime_error("rss3 needs exactly 3 parties, found " +
                                                        std::to_string(c.parties.size()));
    if (j.contains("timeout_ms"))
      c.timeout_ms = static_cast<int>(integer_in(j["timeout_ms"], "timeout_ms", 1, max_timeout_ms));
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error("cluster config '" + path + "': " + e.what());
  } catch (const std::runtime_error& e) {
    throw std::runtime_error("cluster config '" + path + "': " + e.what());
  }
  return c;
}

void write_cluster_config(const std::string& path, const ClusterConfig& config) {
  nlohmann::json j;
  j["timeout_ms"] = config.timeout_ms;
  j["parties"] = nlohmann::json::array();
  for (const auto& p : config.parties) {
    nlohmann::json e = {{"host", p.host}, {"port", p.port}};
    if (!p.public_key.empty()) e["public_key"] = p.public_key;
    if (!p.secret_key.empty()) e["secret_key"] = p.secret_key;
    if (p.client_port != 0) e["client_port"] = p.client_port;
    j["parties"].push_back(e);
  }
  write_text_file(path, j.dump(2) + "\n", false);
}

}  // namespace mpcache::jobs
