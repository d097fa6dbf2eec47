// See cost_rows.hpp.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <nlohmann/json.hpp>
import mpcache;
#include "cost_rows.hpp"

namespace mpcache::jobs {

PartyCost party_cost_of_row(const nlohmann::json& row, bool offline) {
  return {.end_s = row.at("latency_s").get<double>(),
          .bytes_sent = row.at("bytes_sent").get<std::uint64_t>(),
          .clock_before = row.at("clock_before").get<std::uint64_t>(),
          .clock_after = row.at("clock_after").get<std::uint64_t>(),
          .offline = offline};
}

}  // namespace mpcache::jobs
