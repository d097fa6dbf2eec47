#include "cluster_config.hpp"
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <sys/stat.h>
#include <nlohmann/json.hpp>

namespace mpcache::tools {

std::string read_text_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + what + " '" + path + "'");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_text_file(const std::string& path, const std::string& text, bool secret) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error("cannot write '" + path + "'");
  out << text;
  out.close();
  if (secret) ::chmod(path.c_str(), 0600);
}

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
    if (!j.contains("parties") || !j["parties"].is_array())
      throw std::runtime_error("missing array 'parties'");
    std::size_t i = 0;
    for (const auto& p : j["parties"]) {
      const std::string at = "parties[" + std::to_string(i++) + "]";
      if (!p.contains("host") || !p["host"].is_string()) throw std::runtime_error(at + ".host missing");
      if (!p.contains("port") || !p["port"].is_number_integer() || p["port"].get<int>() < 0 ||
          p["port"].get<int>() > 65535)
        throw std::runtime_error(at + ".port missing or not a port number");
      ClusterParty party{p["host"].get<std::string>(), static_cast<std::uint16_t>(p["port"].get<int>()),
                         resolve(p.value("public_key", "")), resolve(p.value("secret_key", ""))};
      c.parties.push_back(party);
    }
    if (c.parties.size() != 3) throw std::runtime_error("rss3 needs exactly 3 parties, found " +
                                                        std::to_string(c.parties.size()));
    c.timeout_ms = j.value("timeout_ms", 10000);
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
    j["parties"].push_back(e);
  }
  write_text_file(path, j.dump(2) + "\n", false);
}

}  // namespace mpcache::tools
