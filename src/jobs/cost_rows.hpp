// A party's report row of a stretch of work (a generation step, a job's
// case) as merge_party_costs (mpcache.core) takes it: the row's
// "latency_s", "bytes_sent", "clock_before" and "clock_after". Each party
// times itself, so its window is 0 to its own latency and the merged latency
// is the slowest party's. Include after `import mpcache;`.
#pragma once
#include <nlohmann/json.hpp>

namespace mpcache::jobs {

PartyCost party_cost_of_row(const nlohmann::json& row, bool offline = false);

}  // namespace mpcache::jobs
