// The offline store of rss3's dcf comparisons: correlations a dealer made
// ahead of time (Rss3Party::prepare_comparisons, src/proto/rss3_offline.cpp)
// and kept until an online msb_bits uses them (src/proto/rss3_dcf.cpp).
//
// Per slot (the width, + 64 for arithmetic output: rss3_dcf_slot), each dealer D numbers its correlations 0, 1, 2, ... in the
// order it deals them; its pair (A = D+1, B = D+2) files them under the same
// numbers. D alone decides which ones a call uses and tells A and B the first
// number with the call's other messages, so the pair never needs to agree on
// an order of its own: concurrent calls may reach A and B in any order.
// Byte accounting: rss3_dcf_stored_bytes(width) per unused correlation at A
// and B, 8 at D. Every party tracks the unused counts of all three dealers
// (it is D, A or B for each), so at a quiet point every party can work out
// what every party holds (held_by), and all agree on how much to deal.
export module mpcache.proto:rss3_store;
import mpcache.std;
import mpcache.core;
import :dcf;

export namespace mpcache {

// One receiver's correlations from one of its dealer's deals.
struct Rss3DcfBatch {
  std::uint64_t first = 0;  // number of its first correlation
  std::size_t count = 0, used = 0;
  std::vector<std::byte> corrections;  // dcf_serialize of `count` keys on width - 1 bits
  std::vector<DcfSeed> roots;          // this receiver's tree roots
  // One mask bit per element, 64 to a word: A's t_A, B's r_m ^ t_A; or
  // with arithmetic output (a slot above 64) a word per element: A's rho, B's r_m - rho.
  std::vector<Ring> bits;
};

class Rss3DcfStore {
 public:
  explicit Rss3DcfStore(PartyId self) : self_(self) {}

  // The dealer's side: the masks r of the correlations it dealt, in order.
  void push_masks(int width, std::span<const Ring> masks);
  // Up to n unused masks: the number of the first, and the masks.
  std::pair<std::uint64_t, std::vector<Ring>> take_masks(int width, std::size_t n);

  // A receiver's side; role 1: A, 2: B. The batch's `first` is set here.
  void push_batch(int width, int role, Rss3DcfBatch batch);
  // DCF outputs at x (values below 2^(width-1)) of correlations [start,
  // start + x.size()), and their mask bits; frees a batch once it is used up.
  std::vector<Ring> evaluate(int width, int role, std::uint64_t start, std::span<const Ring> x,
                             std::vector<Ring>& mask_bits);

  // Unused correlations of `dealer` at `width`, as this party sees them.
  std::uint64_t remaining(int width, PartyId dealer) const;
  // Accounted bytes party j holds, from the unused counts.
  std::uint64_t held_by(PartyId j) const;

 private:
  struct Masks {
    std::uint64_t front = 0;  // number of r.front()
    std::deque<Ring> r;
  };
  std::array<std::uint64_t, 3>& counts(int width) { return remaining_[width]; }

  PartyId self_;
  std::map<int, Masks> masks_;
  std::map<std::pair<int, int>, std::map<std::uint64_t, Rss3DcfBatch>> batches_;  // (width, role) -> by first
  std::map<std::pair<int, int>, std::uint64_t> received_;  // (width, role) -> correlations filed so far
  std::map<int, std::array<std::uint64_t, 3>> remaining_;  // width -> unused per dealer
};

}  // namespace mpcache
