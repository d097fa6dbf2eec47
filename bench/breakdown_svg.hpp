// An SVG of the paper presets' per-token rows: one horizontal bar per row,
// stacked by operator (CostTag), in two panels: model seconds and bytes per
// party. No plotting dependency: plain SVG text.
#pragma once

namespace mpcache::bench {

// Plots rows with "phase":"decode" and the Table 8 rows whose prefill is the
// per-token cost ("arm":"without KV cache"); needs their "breakdown".
void write_breakdown_svg(const std::filesystem::path& path, const std::string& title,
                         const std::vector<nlohmann::json>& rows);

}  // namespace mpcache::bench
