#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>
import mpcache;
#include "breakdown_svg.hpp"

namespace mpcache::bench {
namespace {

constexpr std::array<const char*, cost_tag_count> colors = {
    "#7f7f7f", "#1f77b4", "#aec7e8", "#ff7f0e", "#2ca02c", "#98df8a",
    "#d62728", "#ff9896", "#9467bd", "#8c564b", "#e377c2", "#17becf"};

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else out += c;
  }
  return out;
}

std::string number(double v, const char* unit) {
  char buf[64];
  if (std::string_view(unit) == "B") {
    if (v >= 1e9) std::snprintf(buf, sizeof buf, "%.2f GB", v / 1e9);
    else if (v >= 1e6) std::snprintf(buf, sizeof buf, "%.2f MB", v / 1e6);
    else std::snprintf(buf, sizeof buf, "%.1f kB", v / 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.3f s", v);
  }
  return buf;
}

}  // namespace

void write_breakdown_svg(const std::filesystem::path& path, const std::string& title,
                         const std::vector<nlohmann::json>& rows) {
  std::vector<const nlohmann::json*> plotted;
  for (const auto& r : rows)
    if (r.value("phase", "") == "decode" || r.value("arm", "") == "without KV cache") plotted.push_back(&r);
  const int label_w = 230, panel_w = 360, bar_h = 16, gap = 6, top = 50, legend_h = 40;
  const int height = top + int(plotted.size()) * (bar_h + gap) + legend_h + 20;
  const int width = label_w + 2 * (panel_w + 90);
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"10\" y=\"18\" font-size=\"14\">" << escape(title)
      << ": per token, rss3, three parties (model_s: paper LAN model)</text>\n";
  struct Panel {
    const char* field;  // breakdown field
    const char* unit;
    const char* heading;
  };
  const std::array<Panel, 2> panels = {Panel{"model_s", "s", "model seconds per token"},
                                       Panel{"bytes", "B", "bytes per party per token"}};
  for (std::size_t k = 0; k < panels.size(); ++k) {
    const int x0 = label_w + int(k) * (panel_w + 90);
    double largest = 0;
    for (const auto* r : plotted) {
      double sum = 0;
      for (const auto& [tag, c] : (*r)["breakdown"].items()) sum += c[panels[k].field].get<double>();
      largest = std::max(largest, sum);
    }
    svg << "<text x=\"" << x0 << "\" y=\"40\">" << panels[k].heading << "</text>\n";
    for (std::size_t i = 0; i < plotted.size(); ++i) {
      const auto& r = *plotted[i];
      const int y = top + int(i) * (bar_h + gap);
      if (k == 0)
        svg << "<text x=\"10\" y=\"" << y + bar_h - 4 << "\">" << escape("T=" + std::to_string(r["length"].get<std::size_t>()) +
                                                                       "  " + r["arm"].get<std::string>())
            << "</text>\n";
      double x = x0, sum = 0;
      for (std::size_t t = 0; t < cost_tag_count; ++t) {
        const std::string name(cost_tag_name(static_cast<CostTag>(t)));
        if (!r["breakdown"].contains(name)) continue;
        const double v = r["breakdown"][name][panels[k].field].get<double>();
        const double w = largest > 0 ? v / largest * panel_w : 0;
        svg << "<rect x=\"" << x << "\" y=\"" << y << "\" width=\"" << w << "\" height=\"" << bar_h << "\" fill=\""
            << colors[t] << "\"><title>" << name << ": " << number(v, panels[k].unit) << "</title></rect>\n";
        x += w, sum += v;
      }
      svg << "<text x=\"" << x + 4 << "\" y=\"" << y + bar_h - 4 << "\">" << number(sum, panels[k].unit) << "</text>\n";
    }
  }
  const int ly = top + int(plotted.size()) * (bar_h + gap) + 16;
  for (std::size_t t = 0; t < cost_tag_count; ++t) {
    const int lx = 10 + int(t % 6) * 150, row = int(t / 6);
    svg << "<rect x=\"" << lx << "\" y=\"" << ly + row * 16 << "\" width=\"10\" height=\"10\" fill=\"" << colors[t]
        << "\"/><text x=\"" << lx + 14 << "\" y=\"" << ly + row * 16 + 9 << "\">" << cost_tag_name(static_cast<CostTag>(t))
        << "</text>\n";
  }
  svg << "</svg>\n";
  std::ofstream out(path);
  out << svg.str();
  if (!out) throw Error(ErrorCode::invalid_argument, "cannot write " + path.string());
}

}  // namespace mpcache::bench
