// rss3's truncation pairs: an offline store that makes an exact fused
// product (mul_trunc, matmul_trunc, dot_trunc) take one online round
// instead of two (src/proto/rss3_pairs.cpp has the protocol and why it is
// private).
//
// A pair is three replicated sharings that no single party knows the
// values of: a uniform r mod 2^64, high = floor(r / 2^d) (or one more) and
// top = msb(r) as 0/1, d = the parties' fraction bits. Every party holds
// the same pairs, numbered 0, 1, 2, ... in the order they were made
// (Rss3Party::prepare_truncations, a collective call at a quiet point).
//
// Which pairs a call uses must be the same at all three parties before the
// call's only round, yet concurrent streams reach the parties in different
// orders. So party 0 alone hands out numbers: a stream owns a range it was
// granted (Rss3TruncationGrant), and party 0 grants a stream its next range
// in the messages of a call on that stream, so parties 1 and 2 learn it
// before the stream's next call. A stream's first call, or one that has
// outgrown its range, takes the two-round path. Filling the store at a
// quiet point ends every grant (a new epoch) and drops the pairs granted
// before it, used or not.
export module mpcache.proto:rss3_pairs;
import mpcache.std;
import mpcache.core;

export namespace mpcache {

// A stream's range of pairs [next, end), valid in one epoch of the store.
struct Rss3TruncationGrant {
  std::uint64_t epoch = 0, next = 0, end = 0;
  std::uint64_t left() const noexcept { return end - next; }
};

// What a party's truncation pairs did (Rss3Party::truncation_stats).
struct Rss3TruncationStats {
  std::uint64_t prepared = 0;        // pairs made by prepare_truncations
  std::uint64_t offline_bytes = 0;   // this party's payload bytes sent making them
  double offline_seconds = 0;        // wall time in prepare_truncations
  std::uint64_t from_pairs = 0;      // elements truncated with a pair (one round)
  std::uint64_t two_round = 0;       // elements of exact fused truncations at d that took two rounds
  std::uint64_t granted = 0;         // pairs granted to streams (party 0 counts; the others learn them)
  std::uint64_t ran_dry = 0;         // pairs a grant asked for that the store no longer had
  std::uint64_t store_bytes = 0, store_peak = 0;  // bytes of unused pairs held, now and at most
};

// One party's pairs, as replicated components (own: s_i, next: s_{i+1}).
class Rss3TruncationStore {
 public:
  static constexpr std::uint64_t bytes_per_pair = 6 * sizeof(Ring);

  std::uint64_t epoch() const noexcept { return epoch_; }
  // Pairs not yet granted to any stream (from party 0's view; parties 1
  // and 2 see every grant, so at a quiet point they agree).
  std::uint64_t ungranted() const noexcept { return base_ + size() - granted_end_; }
  std::uint64_t bytes() const noexcept { return size() * bytes_per_pair; }

  // A quiet point: drops every pair granted so far, appends the new ones
  // (each span: own then next component of one sharing, count words each)
  // and starts a new epoch, ending every grant.
  void refill(std::span<const Ring> r_own, std::span<const Ring> r_next, std::span<const Ring> high_own,
              std::span<const Ring> high_next, std::span<const Ring> top_own, std::span<const Ring> top_next);
  // Party 0: the next `count` ungranted pairs (fewer when the store has
  // fewer), as a grant in this epoch.
  Rss3TruncationGrant grant(std::uint64_t count);
  // Parties 1 and 2: a grant party 0 announced.
  void note_grant(const Rss3TruncationGrant& g);
  // The components of pairs [first, first + n) (they must be held).
  struct Slice {
    const Ring *r_own, *r_next, *high_own, *high_next, *top_own, *top_next;
  };
  Slice slice(std::uint64_t first, std::size_t n) const;

 private:
  std::size_t size() const noexcept { return r_own_.size(); }
  std::uint64_t epoch_ = 0;
  std::uint64_t base_ = 0;         // number of the first pair held
  std::uint64_t granted_end_ = 0;  // every pair below it has been granted
  std::vector<Ring> r_own_, r_next_, high_own_, high_next_, top_own_, top_next_;
};

}  // namespace mpcache
