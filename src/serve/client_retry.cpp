// A client's retries (modules/serve/client.cppm, RetryOptions): a request
// that failed because of the service (a server lost, the service busy or
// shutting down) is sent again once the wait is over. The prompt is still
// at the client, so nothing is lost but time. Tokens the failed attempt
// streamed were already handed to the caller: the retry's first tokens are
// checked against them instead of being handed over twice.
module mpcache.serve;
import mpcache.std;
import mpcache.core;

namespace mpcache::serve {

namespace {
// Waits `wait` on the caller's thread (run_client blocks it anyway), in
// slices so that a stop requested meanwhile ends it soon: Error(cancelled).
void wait_before_retry(std::chrono::milliseconds wait, const std::stop_token& stop) {
  const auto until = std::chrono::steady_clock::now() + wait;
  for (;;) {
    if (stop.stop_requested()) throw Error(ErrorCode::cancelled, "the request was stopped while it waited to retry");
    const auto now = std::chrono::steady_clock::now();
    if (now >= until) return;
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(until - now, std::chrono::milliseconds(20)));
  }
}
}  // namespace

ClientResult with_retries(const RetryOptions& retry, std::stop_token stop,
                          const std::function<ClientResult(const std::function<void(std::uint32_t)>&)>& attempt,
                          const std::function<void(std::uint32_t)>& on_token) {
  std::vector<std::uint32_t> streamed;  // handed to on_token, by any attempt
  for (std::size_t n = 1;; ++n) {
    std::size_t seen = 0;  // this attempt's tokens so far
    const auto sink = [&](std::uint32_t id) {
      if (seen < streamed.size()) {
        // Greedy choice, or sampling from the same seed, picks the same
        // tokens again; if not, the caller's text cannot be continued.
        if (streamed[seen] != id)
          throw RequestError(ErrorCode::protocol,
                             "attempt " + std::to_string(n) + " chose token " + std::to_string(id) + " at position " +
                                 std::to_string(seen) + ", where an earlier attempt streamed " +
                                 std::to_string(streamed[seen]) + "; the output so far cannot be continued",
                             false);
        ++seen;
        return;
      }
      ++seen;
      streamed.push_back(id);
      if (on_token) on_token(id);
    };
    try {
      ClientResult r = attempt(sink);
      if (r.tokens.size() < streamed.size())
        throw RequestError(ErrorCode::protocol,
                           "attempt " + std::to_string(n) + " ended after " + std::to_string(r.tokens.size()) +
                               " tokens, where an earlier attempt had streamed " + std::to_string(streamed.size()),
                           false);
      r.attempts = n;
      return r;
    } catch (const RequestError& e) {
      if (!e.retryable() || n > retry.retries) {
        if (n == 1) throw;
        throw RequestError(e.code(), reason_of(e) + " (" + std::to_string(n) + " attempts)", false);
      }
      std::string note = "attempt " + std::to_string(n) + " of " + std::to_string(retry.retries + 1) + " failed (" +
                         e.what() + "); retrying in " + std::to_string(retry.wait.count()) + " ms";
      if (!streamed.empty())
        note += "; " + std::to_string(streamed.size()) +
                " tokens were already streamed: the retry checks its first ones against them and does not repeat them";
      if (retry.on_retry) retry.on_retry(note);
    }
    wait_before_retry(retry.wait, stop);
  }
}

}  // namespace mpcache::serve
