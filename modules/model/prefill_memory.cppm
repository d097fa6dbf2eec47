// The prefill within a memory budget: which query rows of the prompt run
// together. Causal attention over T tokens holds, per wave of query rows
// [r0, r1), every head's scores against keys [0, r1) and the softmax's
// temporaries (comparison differences and bit planes, exp's terms): about
// prefill_bytes_per_score bytes per score at each party. Unblocked, that is
// heads x T^2 scores at once (1.3 GB per party for 4 heads at T = 1000).
// Waves run one after another, each as large as the budget allows (the rows
// of a wave share their rounds). Within a wave, rows run in causal blocks
// (causal_block_rows each, concurrently) against the keys up to their own
// last row, so the attention's working set is about
//   prefill_bytes_per_score x heads x (r1 - r0) x (r0 + (r1 - r0) / 2)
//     <=  max(budget, prefill_bytes_per_score x heads x T)
// (the right term: one row per wave, the least a causal row can take). The
// MLP's activation takes rows in waves too: prefill_bytes_per_activation x
// rows x hidden width <= max(budget, prefill_bytes_per_activation x width).
// A wave past the first adds the attention's (or the activation's) rounds
// once more; a prompt that fits the budget runs as one wave, as before.
export module mpcache.model:prefill_memory;
import mpcache.std;
import mpcache.core;

export namespace mpcache {

// Bytes of transient working set per attention score and per activation
// input at one party, measured on rss3 (peak RSS of the 3-process prefill;
// docs/protocols.md, "The prefill within a memory budget").
inline constexpr std::size_t prefill_bytes_per_score = 320;
inline constexpr std::size_t prefill_bytes_per_activation = 320;
// Bytes per element of the one-hot prompt (rows x vocab) at the party that
// inputs it: its 0/1 values, the two components drawn and the third sent,
// then the share's two: the prompt is input and embedded in waves of rows.
inline constexpr std::size_t prefill_bytes_per_one_hot = 48;

// The default budget of that working set per party: 96 MiB, which keeps a
// 1,000-token prefill of our model under 300 MB of peak RSS per party.
inline constexpr std::size_t default_prefill_memory_budget = std::size_t{96} << 20;

// What a prefill returns: every position's logits (count, vocab), or the
// last one's (1, vocab), all that choosing the next token needs: the LM head
// then runs on one row (GPT-2 at T = 512: 0.4 GB of logit shares less).
enum class PrefillLogits { all, last };

struct DecoderOptions {
  std::size_t prefill_memory_budget = default_prefill_memory_budget;  // bytes per party, see above
  PrefillLogits prefill_logits = PrefillLogits::all;
};

// Query rows [begin, end) of one wave.
struct RowBlock {
  std::size_t begin = 0, end = 0;
  bool operator==(const RowBlock&) const = default;
};

// Rows of a causal block: within a wave, query rows run in blocks of this
// many, each against keys [0, its last row] only, so that the wave's
// scores are a staircase along the diagonal, not a rectangle whose upper
// triangle is masked (at most a block's half square of masked scores per
// block). The blocks of a wave run concurrently: their messages share
// rounds.
inline constexpr std::size_t causal_block_rows = 32;

// The causal blocks of a wave, first to last.
inline std::vector<RowBlock> causal_blocks(const RowBlock& wave, std::size_t block_rows = causal_block_rows) {
  std::vector<RowBlock> out;
  for (std::size_t r0 = wave.begin; r0 < wave.end; r0 += block_rows)
    out.push_back({r0, std::min(wave.end, r0 + block_rows)});
  return out;
}

// Scores per head a wave of causal blocks holds: each block's rows times
// its keys.
inline std::size_t causal_scores(const RowBlock& wave, std::size_t block_rows = causal_block_rows) {
  std::size_t scores = 0;
  for (const RowBlock& b : causal_blocks(wave, block_rows)) scores += (b.end - b.begin) * b.end;
  return scores;
}

// Causal attention's waves for `tokens` query rows over `heads` heads: the
// fewest, each taking as many rows as fit (greedy from the first row: a
// later row attends to more keys, so the earliest waves are the widest).
// A wave's scores are causal_scores (blocks of causal_block_rows).
inline std::vector<RowBlock> attention_row_blocks(std::size_t tokens, std::size_t heads, std::size_t budget) {
  if (tokens == 0 || heads == 0) return {};
  const std::size_t scores = std::max<std::size_t>(1, budget / (prefill_bytes_per_score * heads));
  std::vector<RowBlock> out;
  for (std::size_t r0 = 0; r0 < tokens;) {
    // The largest rows whose blocks' scores fit, at least one.
    auto fits = [&](std::size_t rows) { return causal_scores({r0, r0 + rows}) <= scores; };
    // A first guess from rows x (r0 + rows / 2) = scores, then exact.
    std::size_t rows = static_cast<std::size_t>(std::sqrt(double(r0) * double(r0) + 2.0 * double(scores)) - double(r0));
    rows = std::clamp<std::size_t>(rows, 1, tokens - r0);
    while (rows > 1 && !fits(rows)) --rows;
    while (rows < tokens - r0 && fits(rows + 1)) ++rows;
    out.push_back({r0, r0 + rows});
    r0 += rows;
  }
  return out;
}

// Row-wise work over `rows` rows of `width` inputs each: the fewest waves
// within the budget, of near-equal sizes.
inline std::vector<RowBlock> even_row_blocks(std::size_t rows, std::size_t width, std::size_t budget,
                                             std::size_t bytes_per_input = prefill_bytes_per_activation) {
  if (rows == 0) return {};
  const std::size_t per_row = std::max<std::size_t>(1, width * bytes_per_input);
  const std::size_t fit = std::clamp<std::size_t>(budget / per_row, 1, rows);
  const std::size_t waves = (rows + fit - 1) / fit;
  std::vector<RowBlock> out;
  for (std::size_t w = 0, r0 = 0; w < waves; ++w) {
    const std::size_t r1 = rows * (w + 1) / waves;
    out.push_back({r0, r1});
    r0 = r1;
  }
  return out;
}

// "268435456", "256MB", "256MiB", "2GB", "512kB" (MB = 2^20 bytes: memory,
// not disk, sizes). Names what is wrong with a bad one.
inline std::size_t parse_memory_size(const std::string& text) {
  std::size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  auto bad = [&](const std::string& why) {
    return Error(ErrorCode::invalid_argument,
                 "memory size '" + text + "': " + why + " (bytes, or a whole number of kB, MB or GB)");
  };
  if (digits == 0) throw bad("no number");
  if (digits > 15) throw bad("too large");
  const std::size_t number = std::stoull(text.substr(0, digits));
  std::string unit = text.substr(digits);
  for (auto& ch : unit)
    if (ch >= 'A' && ch <= 'Z') ch = static_cast<char>(ch - 'A' + 'a');
  int shift = 0;
  if (unit.empty() || unit == "b") shift = 0;
  else if (unit == "k" || unit == "kb" || unit == "kib") shift = 10;
  else if (unit == "m" || unit == "mb" || unit == "mib") shift = 20;
  else if (unit == "g" || unit == "gb" || unit == "gib") shift = 30;
  else throw bad("unknown unit '" + text.substr(digits) + "'");
  if (number == 0) throw bad("zero");
  if (number > (std::numeric_limits<std::size_t>::max() >> shift)) throw bad("too large");
  return number << shift;
}

}  // namespace mpcache
