// The I/O drivers of the TCP transport, in the order "auto" tries them:
// one entry per driver (see io_driver.hpp).
#include "io_driver.hpp"

namespace mpcache::sys {

const std::vector<DriverChoice>& io_drivers() {
  static const std::vector<DriverChoice> drivers = {
      {"io_uring", {"uring"}, [] { return make_uring_driver(64); }},
      {"poll", {}, [] { return make_poll_driver(); }},
      {"asio", {}, [] { return make_asio_driver(); }},
  };
  return drivers;
}

}  // namespace mpcache::sys
