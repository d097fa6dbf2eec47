// Runs `mpcache local ARGS` (three party processes on loopback) and returns
// its JSON report; throws an Error with the report if any party failed.
#pragma once

namespace mpcache::bench {
nlohmann::json run_local_job(const std::string& args);
}
