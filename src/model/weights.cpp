module;
#include "prelude.hpp"
module mpcache.model;
import mpcache.core;

namespace mpcache {

WeightSource weights_from_file(const std::filesystem::path& path) {
  auto file = std::make_shared<SafeTensorsFile>(SafeTensorsFile::open(path));
  return [file](const std::string& name, const Shape& shape) -> std::optional<xt::xarray<double>> {
    if (!file->contains(name))
      throw Error(ErrorCode::format, file->path().string() + ": missing tensor '" + name + "'");
    return file->load(name, shape);
  };
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
