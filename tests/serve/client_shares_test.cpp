// A client's secret shares for the three rss3 servers, and its check of what
// they open to it.
#include "prelude.hpp"  // first: same std headers as the modules (see prelude.hpp)
#include <doctest/doctest.h>
import mpcache;

using namespace mpcache;

namespace {
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool same(const RingTensor& a, const RingTensor& b) {
  return shape_of(a) == shape_of(b) && std::equal(a.data(), a.data() + a.size(), b.data());
}

// Rows [begin, end) of a matrix, copied.
RingTensor ring_rows(const RingTensor& a, std::size_t begin, std::size_t end) {
  const std::size_t width = shape_of(a)[1];
  RingTensor out = RingTensor::from_shape({end - begin, width});
  std::copy(a.data() + begin * width, a.data() + end * width, out.data());
  return out;
}
}  // namespace

TEST_CASE("the servers' shares add up to the client's secret, as rss3 holds it") {
  const RingTensor x = ring_sample({3, 5}, 11);
  const auto parts = client_shares::split(x);
  std::array<Rss3Share, 3> held;
  for (PartyId i = 0; i < 3; ++i) held[i] = client_shares::assemble(i, parts[i], {3, 5});
  for (PartyId i = 0; i < 3; ++i) CHECK(same(held[i].next, held[(i + 1) % 3].own));  // replicated
  RingTensor sum = held[0].own;
  ring_add_inplace(sum, held[1].own);
  ring_add_inplace(sum, held[2].own);
  CHECK(same(sum, x));
  // Server 0 gets two seeds (33 bytes each with their form byte); the others
  // one seed and the values.
  CHECK(parts[0].size() == 2 * 17);
  CHECK(parts[1].size() == 17 + 1 + 15 * 8);
  CHECK(parts[2].size() == 17 + 1 + 15 * 8);
  // Fresh seeds: the same secret shares differently each time.
  CHECK(client_shares::split(x)[0] != parts[0]);
}

TEST_CASE("opened parts reconstruct the value, and copies that disagree are refused naming the servers") {
  const RingTensor x = ring_sample({1, 1}, 3);
  const auto in = client_shares::split(x);
  std::array<std::vector<std::byte>, 3> out;
  for (PartyId i = 0; i < 3; ++i) out[i] = client_shares::open_part(client_shares::assemble(i, in[i], {1, 1}));
  CHECK(same(client_shares::reconstruct(out, {1, 1}), x));
  auto lying = out;
  lying[2][1] ^= std::byte{1};  // server 2's copy of component 2
  CHECK(error_of([&] { (void)client_shares::reconstruct(lying, {1, 1}); }) ==
        "protocol error: servers 1 and 2 sent different copies of component 2: a server is faulty or lying; the "
        "result is refused");
}

TEST_CASE("malformed parts are refused naming what is wrong") {
  const auto parts = client_shares::split(ring_zeros({2, 2}));
  auto truncated = parts[1];
  truncated.resize(20);
  CHECK(error_of([&] { (void)client_shares::assemble(1, truncated, {2, 2}); }) ==
        "protocol error: client share for server 1: 2 bytes of values where the shape (2,2) needs 32");
  auto extra = parts[0];
  extra.push_back(std::byte{0});
  CHECK(error_of([&] { (void)client_shares::assemble(0, extra, {2, 2}); }) ==
        "protocol error: client share for server 0: 1 bytes too many");
  auto form = parts[2];
  form[0] = std::byte{9};
  CHECK(error_of([&] { (void)client_shares::assemble(2, form, {2, 2}); }) ==
        "protocol error: client share for server 2: unknown component form 9");
  CHECK(error_of([&] { (void)client_shares::assemble(1, {}, {2, 2}); }) ==
        "protocol error: client share for server 1: truncated (0 bytes)");
  CHECK(error_of([&] { (void)client_shares::assemble(3, parts[0], {2, 2}); }).find("server 3") != std::string::npos);
}

TEST_CASE("a share's rows, assembled alone, are the rows of the whole share") {
  // 5 columns: row 1 starts at element 5, the second half of an AES block of
  // a seed's stream, so the seeded components are drawn from mid-block too.
  const Shape shape{7, 5};
  const auto parts = client_shares::split(ring_sample(shape, 23));
  for (PartyId i = 0; i < 3; ++i) {
    const Rss3Share whole = client_shares::assemble(i, parts[i], shape);
    for (const auto& [begin, end] : {std::pair<std::size_t, std::size_t>{0, 7}, {1, 2}, {1, 4}, {2, 7}, {6, 7}}) {
      CAPTURE(i);
      CAPTURE(begin);
      const Rss3Share rows = client_shares::assemble_rows(i, parts[i], shape, begin, end);
      CHECK(same(rows.own, ring_rows(whole.own, begin, end)));
      CHECK(same(rows.next, ring_rows(whole.next, begin, end)));
    }
  }
  CHECK(error_of([&] { (void)client_shares::assemble_rows(1, parts[1], shape, 3, 8); }) ==
        "invalid argument: client share rows [3, 8) of (7,5)");
  // check_part refuses what assemble refuses, naming the same thing.
  auto truncated = parts[2];
  truncated.pop_back();
  CHECK(error_of([&] { client_shares::check_part(2, truncated, shape); }) ==
        error_of([&] { (void)client_shares::assemble(2, truncated, shape); }));
  CHECK(error_of([&] { client_shares::check_part(2, truncated, shape); }) ==
        "protocol error: client share for server 2: truncated seed");  // values, then seed 0
  CHECK(error_of([&] { client_shares::check_part(0, parts[0], shape); }).empty());
}
