// Session scopes are 16-bit (scope_of: 1 + session % max_scope): after
// 65,534 sessions they come round again. Servers that number sessions from
// just below the wrap (ServeOptions::first_session, a test's option) run
// sessions on both sides of it, at once and one after another, each with
// exactly the tokens generate gives its prompt.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache;

#include "../support/fixture_generation.hpp"

using namespace mpcache;
using testing::fixture_dir;

#include "service_harness.hpp"

using namespace mpcache::serve_test;

TEST_CASE("sessions numbered across the wrap of the 16-bit scopes each get their exact tokens") {
  serve::ServeOptions options;
  options.first_session = max_scope - 3;  // sessions 65531..65536: scopes 65532..65534, then 1..3
  options.max_sessions = 3;               // the later ones wait for earlier ones' scopes to end
  Service service(options);
  const std::vector<std::string> prompts = {emma, "Mr. Knightley, a sensible man", "It is a truth universally",
                                            "The real evils of Emma's", "Emma Woodhouse", "handsome, clever, and rich"};
  std::vector<Outcome> out(prompts.size());
  std::vector<Task<void>> clients;
  for (std::size_t c = 0; c < prompts.size(); ++c)
    clients.push_back(ask(service.connect("client " + std::to_string(c)), request_for(prompts[c], 3), out[c]));
  service.run(std::move(clients));
  for (std::size_t c = 0; c < prompts.size(); ++c) {
    INFO("client " << c << ": " << out[c].error);
    CHECK(out[c].tokens == generated(bytes_of(prompts[c]), 3));
  }
  CHECK(service.logged("server 0: session 65533 for"));  // the last scope before the wrap (65534)
  CHECK(service.logged("server 0: session 65534 for"));  // scope 1 again
  CHECK(service.logged("server 0: session 65536 for"));
}
