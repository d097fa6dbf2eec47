module mpcache.model;
import mpcache.std;
import mpcache.core;

namespace mpcache {

WeightSource weights_from_file(const std::filesystem::path& path, UnusedTensors unused) {
  auto file = make_shared<SafeTensorsFile>(SafeTensorsFile::open(path));
  auto get = [file](const std::string& name, const Shape& shape) -> std::optional<xt::xarray<double>> {
    if (!file->contains(name))
      throw Error(ErrorCode::format, file->path().string() + ": missing tensor '" + name + "'");
    return file->load(name, shape);
  };
  auto finish = [file, unused](const std::set<std::string>& requested) {
    if (unused == UnusedTensors::allow) return;
    std::vector<std::string> left;
    // Buffers that checkpoints carry but that are not weights (GPT-2's causal
    // mask, LLaMA's RoPE frequencies) are never asked for and never an error.
    auto buffer = [](const std::string& n) {
      return n.ends_with(".attn.bias") || n.ends_with(".attn.masked_bias") || n.ends_with("rotary_emb.inv_freq");
    };
    for (const auto& [name, entry] : file->entries())
      if (!requested.count(name) && !buffer(name)) left.push_back(name);
    if (left.empty()) return;
    std::string names;
    for (std::size_t i = 0; i < left.size() && i < 4; ++i) names += (i ? ", '" : "'") + left[i] + "'";
    if (left.size() > 4) names += ", ...";
    throw Error(ErrorCode::format,
                file->path().string() + ": " + std::to_string(left.size()) + " of " +
                    std::to_string(file->entries().size()) + " tensors are not used by the config (" + names +
                    "); config.json and the weights disagree (num_hidden_layers?). Allow it explicitly "
                    "(UnusedTensors::allow, --allow-unused-weights) to run on a subset");
  };
  return WeightSource(std::move(get), std::move(finish));
}

WeightSource random_weights(std::uint64_t seed, double scale) {
  return [seed, scale](const std::string& name, const Shape& shape) -> std::optional<xt::xarray<double>> {
    std::uint64_t h = seed ^ 0x9E3779B97F4A7C15ull;
    for (char ch : name) h = (h ^ static_cast<unsigned char>(ch)) * 0x100000001B3ull;
    RingTensor bits = ring_sample(shape, h);
    xt::xarray<double> out = xt::xarray<double>::from_shape(shape);
    const bool norm_name = name.find("norm") != std::string::npos || name.find("ln_") != std::string::npos;
    const bool norm = norm_name && name.size() >= 6 && name.compare(name.size() - 6, 6, "weight") == 0;
    const double half_width = scale * std::sqrt(3.0);  // uniform with std `scale`
    auto b = bits.begin();
    for (auto& v : out) {
      const double u = static_cast<double>(*b++ >> 11) * 0x1p-53 * 2.0 - 1.0;
      v = norm ? 1.0 + 0.1 * u : half_width * u;
    }
    return out;
  };
}

WeightSource no_weights() {
  return [](const std::string&, const Shape&) -> std::optional<xt::xarray<double>> { return std::nullopt; };
}

}  // namespace mpcache
