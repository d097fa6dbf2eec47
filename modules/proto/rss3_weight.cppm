// rss3's weights (Rss3::input_weight; src/proto/rss3_weights.cpp): how a
// party holds a secret matrix that products read many times.
//
// Of the two components a party holds, rss3's input draws s_o from k_{o-1}
// and s_{o+1} from k_o; the owner o sends s_{o-1}. So parties o+1 and o-1
// each received one component (s_{o-1}) and can draw the other from a key
// they share with the owner, and the owner can draw both. With
// Rss3Options::compact_weights the drawn components are not kept but drawn
// again, from the same key at the same counter, a block of rows at a time
// during each product: parties o+1 and o-1 hold 8 bytes per element, the
// owner none. By default both components are kept (16 bytes, no redraws).
export module mpcache.proto:rss3_weight;
import mpcache.std;
import mpcache.core;

export namespace mpcache {

struct Rss3Weight {
  Shape shape;  // as products read it: (in, out) for a matrix
  // The component this party holds in memory (s_{o-1} at parties o+1 and
  // o-1, s_{o+1} at the owner); null where it is drawn too (the owner's,
  // compact). kept_is_own: kept is s_i (then s_{i+1} is drawn from k_i),
  // else s_{i+1} (s_i drawn from k_{i-1}).
  std::shared_ptr<const RingTensor> kept;
  bool kept_is_own = false;
  StreamId stream = 0;         // where the key streams of both components start
  std::uint64_t block = 0;     // the drawn component's first AES block
  std::uint64_t kept_block = 0;  // the kept component's, when it is drawn too (kept null)
  std::shared_ptr<const RingTensor> drawn;  // the drawn component, held unless weights are compact
  // Stored (and drawn) transposed: rows of the stored matrix are columns of
  // `shape`, e.g. an LM head read from a (vocab, hidden) embedding.
  bool transposed = false;
  // The storage is another weight's (a tied LM head's is the embedding's):
  // its bytes are counted there.
  bool borrowed = false;

  // The matrix as stored: `shape`, reversed when transposed.
  Shape stored_shape() const {
    if (!transposed || shape.size() != 2) return shape;
    return Shape{shape[1], shape[0]};
  }
  // Bytes this weight holds in memory: 8 per element at parties o+1 and
  // o-1 and 0 at the owner when compact, else 16; 0 when borrowed.
  std::size_t resident_bytes() const noexcept {
    if (borrowed) return 0;
    return ((kept ? kept->size() : 0) + (drawn ? drawn->size() : 0)) * sizeof(Ring);
  }
};

// The owner's values of a weight, a piece at a time: elements [first, first
// + count) of the stored matrix in row-major order, encoded. The owner then
// never holds the whole tensor (as reals or encoded).
using Rss3WeightPieces = std::function<RingTensor(std::size_t first, std::size_t count)>;

}  // namespace mpcache
