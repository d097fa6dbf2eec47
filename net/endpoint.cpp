module mpcache.net;
import mpcache.std;
import mpcache.core;
import mpcache.async;

namespace mpcache {

std::array<std::byte, frame_header_bytes> FrameHeader::encode() const {
  std::array<std::byte, frame_header_bytes> out{};
  for (int i = 0; i < 8; ++i) out[i] = std::byte((stream >> (8 * i)) & 0xFF);
  for (int i = 0; i < 4; ++i) out[8 + i] = std::byte((length >> (8 * i)) & 0xFF);
  for (int i = 0; i < 4; ++i) out[12 + i] = std::byte((clock >> (8 * i)) & 0xFF);
  return out;
}

FrameHeader FrameHeader::decode(const std::byte* bytes) {
  FrameHeader h;
  for (int i = 0; i < 8; ++i) h.stream |= std::uint64_t(bytes[i]) << (8 * i);
  for (int i = 0; i < 4; ++i) h.length |= std::uint32_t(bytes[8 + i]) << (8 * i);
  for (int i = 0; i < 4; ++i) h.clock |= std::uint32_t(bytes[12 + i]) << (8 * i);
  return h;
}

Endpoint::Endpoint(Scheduler& scheduler, PartyId self, std::size_t parties)
    : scheduler_(scheduler), self_(self), parties_(parties), outbox_(parties), failed_(parties) {
  if (parties < 2 || self >= parties)
    throw Error(ErrorCode::bad_party, "party id " + std::to_string(self) + " with " +
                                          std::to_string(parties) + " parties");
  costs_.per_peer.resize(parties);
  scheduler_.add_listener(this);
}

Endpoint::~Endpoint() { scheduler_.remove_listener(this); }

void Endpoint::check_peer(PartyId peer, const char* what) const {
  if (peer >= parties_ || peer == self_)
    throw Error(ErrorCode::bad_party, std::string(what) + ": party " + std::to_string(self_) +
                                          " cannot talk to party " + std::to_string(peer) +
                                          " (parties are 0.." + std::to_string(parties_ - 1) +
                                          ")");
}

void Endpoint::send(PartyId to, StreamId stream, std::vector<std::byte>&& payload, CostTag tag) {
  check_peer(to, "send");
  if (payload.size() > max_frame_payload)
    throw Error(ErrorCode::invalid_argument,
                "message of " + std::to_string(payload.size()) + " bytes exceeds the frame limit");
  // Counted when the protocol sends, so counters read right after an
  // operation include everything it sent; writes are counted at the flush.
  auto& t = costs_.per_peer[to];
  t.messages_sent += 1;
  t.frame_bytes_sent += frame_header_bytes;
  t.payload_bytes_sent += payload.size();
  costs_.by_tag[static_cast<std::size_t>(tag)].payload_bytes_sent += payload.size();
  outbox_[to].push_back(
      Frame{stream, static_cast<std::uint32_t>(costs_.rounds), std::move(payload)});
}

void Endpoint::send(PartyId to, StreamId stream, std::span<const std::byte> payload, CostTag tag) {
  send(to, stream, std::vector<std::byte>(payload.begin(), payload.end()), tag);
}

Endpoint::RecvAwaiter Endpoint::recv(PartyId from, StreamId stream, CostTag tag) {
  check_peer(from, "recv");
  return RecvAwaiter{this, from, stream, tag, {}};
}

Endpoint::RecvAwaiter Endpoint::recv_idle(PartyId from, StreamId stream) {
  check_peer(from, "recv");
  return RecvAwaiter{this, from, stream, CostTag::other, {}, false, true};
}

bool Endpoint::RecvAwaiter::await_ready() {
  if (endpoint->cancelled()) endpoint->throw_unreceivable(from);
  if (stream_scope(stream) != no_scope) {
    const std::string why = endpoint->scope_cancelled(stream_scope(stream));
    if (!why.empty()) throw Error(ErrorCode::cancelled, "party " + std::to_string(endpoint->self_) + ": " + why);
  }
  auto it = endpoint->mailbox_.find(Key{from, stream});
  if (it != endpoint->mailbox_.end() && !it->second.empty()) {
    frame = std::move(it->second.front());
    it->second.pop_front();
    if (it->second.empty()) endpoint->mailbox_.erase(it);
    endpoint->take(frame, from, tag, !idle);
    return true;
  }
  if (!endpoint->failed_[from].empty()) endpoint->throw_unreceivable(from);
  return false;
}

bool Endpoint::RecvAwaiter::suspend(std::coroutine_handle<> h, const StopSignal* signal) {
  stop_signal = signal;
  if (signal && signal->stop_requested()) {
    stopped = true;
    return false;
  }
  auto [it, inserted] = endpoint->waiters_.try_emplace(Key{from, stream}, Waiter{h, this});
  if (!inserted)
    throw Error(ErrorCode::protocol,
                "party " + std::to_string(endpoint->self_) + ": two receivers on stream " +
                    std::to_string(stream) + " from party " + std::to_string(from) +
                    "; concurrent sub-protocols need their own stream (fork())");
  if (signal) on_stop.emplace(signal->token(), OnStop{this});
  return true;
}

void Endpoint::RecvAwaiter::OnStop::operator()() const noexcept {
  // Only a wait still registered: one already woken (a frame came, its link
  // failed) keeps its outcome.
  Endpoint& e = *self->endpoint;
  auto it = e.waiters_.find(Key{self->from, self->stream});
  if (it == e.waiters_.end() || it->second.awaiter != self) return;
  self->stopped = true;
  e.scheduler_.post(it->second.handle);  // a post, never a resume: the stop may come from deep inside a child
  e.waiters_.erase(it);
}

std::vector<std::byte> Endpoint::RecvAwaiter::await_resume() {
  on_stop.reset();
  if (stopped)
    throw Error(ErrorCode::cancelled, "party " + std::to_string(endpoint->self_) + ": " + stop_signal->why());
  if (unreceivable && stream_scope(stream) != no_scope) {
    const std::string why = endpoint->scope_cancelled(stream_scope(stream));
    if (!why.empty()) throw Error(ErrorCode::cancelled, "party " + std::to_string(endpoint->self_) + ": " + why);
  }
  if (unreceivable) endpoint->throw_unreceivable(from);
  return std::move(frame.payload);
}

void Endpoint::throw_unreceivable(PartyId from) const {
  if (cancelled())
    throw Error(ErrorCode::cancelled, "party " + std::to_string(self_) + ": " + cancelled_);
  throw Error(ErrorCode::network, "party " + std::to_string(self_) + ": link to party " +
                                      std::to_string(from) + " failed: " + failed_[from]);
}

void Endpoint::take(Frame& frame, PartyId from, CostTag tag, bool advance_clock) {
  const std::uint64_t clock = std::uint64_t(frame.clock) + 1;
  if (advance_clock && clock > costs_.rounds) {
    auto& t = costs_.by_tag[static_cast<std::size_t>(tag)];
    const auto now = std::chrono::steady_clock::now();
    t.rounds += clock - costs_.rounds;
    t.seconds += std::chrono::duration<double>(now - last_advance_).count();
    last_advance_ = now;
    costs_.rounds = clock;
  }
  costs_.per_peer[from].payload_bytes_received += frame.payload.size();
  costs_.per_peer[from].messages_received += 1;
}

void Endpoint::deliver(PartyId from, std::vector<Frame>&& frames) {
  check_peer(from, "deliver");
  for (auto& f : frames) {
    const auto text = [&] {
      return std::string(reinterpret_cast<const char*>(f.payload.data()), f.payload.size());
    };
    if (f.stream == abort_stream) {
      fail(from, "party " + std::to_string(from) + " stopped: " + text());
      continue;
    }
    if (f.stream == cancel_stream) {
      cancel_on_peers_word(from, from, text());
      continue;
    }
    if (f.stream == cancel_relay_stream) {
      if (f.payload.size() < 4) continue;  // not ours to make sense of
      PartyId canceller = 0;
      for (int i = 3; i >= 0; --i) canceller = canceller << 8 | std::to_integer<PartyId>(f.payload[i]);
      if (canceller >= parties_ || canceller == self_) canceller = from;  // a garbled name: blame the relayer
      cancel_on_peers_word(from, canceller, std::string(reinterpret_cast<const char*>(f.payload.data()) + 4, f.payload.size() - 4));
      continue;
    }
    if (f.stream == scope_cancel_stream) {
      if (f.payload.size() < 2) continue;  // not ours to make sense of
      const ScopeId scope = ScopeId(std::to_integer<unsigned>(f.payload[0]) | std::to_integer<unsigned>(f.payload[1]) << 8);
      const std::string why(reinterpret_cast<const char*>(f.payload.data()) + 2, f.payload.size() - 2);
      if (scope != no_scope) cancel_scope_locally(scope, "party " + std::to_string(from) + " cancelled " + why);
      continue;
    }
    if (stream_scope(f.stream) != no_scope && cancelled_scope_bits_[stream_scope(f.stream)]) continue;
    auto w = waiters_.find(Key{from, f.stream});
    if (w != waiters_.end()) {
      RecvAwaiter* a = w->second.awaiter;
      auto h = w->second.handle;
      waiters_.erase(w);
      a->frame = std::move(f);
      take(a->frame, from, a->tag, !a->idle);
      scheduler_.post(h);
    } else {
      mailbox_[Key{from, f.stream}].push_back(std::move(f));
    }
  }
}

void Endpoint::fail(PartyId peer, const std::string& why) {
  check_peer(peer, "fail");
  if (!failed_[peer].empty()) return;
  failed_[peer] = why.empty() ? "link closed" : why;
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (it->first.peer == peer) {
      it->second.awaiter->unreceivable = true;
      scheduler_.post(it->second.handle);
      it = waiters_.erase(it);
    } else {
      ++it;
    }
  }
}

void Endpoint::abort(const std::string& why) {
  if (cancelled()) return;  // the peers were told already, and why
  tell_peers(abort_stream, why);
}

void Endpoint::cancel(const std::string& why) {
  if (cancelled()) return;
  // Sends queued in this tick would only feed work the peers are about to
  // drop; the cancellation goes out at once, ahead of anything later.
  for (auto& box : outbox_) box.clear();
  // Cancelled here first: over an in-process transport a peer's relay comes
  // back inside tell_peers, and must find this party cancelled already.
  cancel_locally(why);
  tell_peers(cancel_stream, why);
}

void Endpoint::cancel_on_peers_word(PartyId from, PartyId canceller, const std::string& why) {
  if (cancelled()) return;
  cancel_locally("party " + std::to_string(canceller) + " cancelled: " + why);
  std::string relay(4, '\0');
  for (int i = 0; i < 4; ++i) relay[i] = char(canceller >> (8 * i) & 0xFF);
  relay += why.substr(0, 4096);
  for (PartyId to = 0; to < parties_; ++to)
    if (to != from && to != canceller) tell_peers_one(to, cancel_relay_stream, relay);
}

void Endpoint::cancel_locally(const std::string& why) {
  if (cancelled()) return;
  cancelled_ = why.empty() ? "cancelled" : why;
  for (auto& [key, w] : waiters_) {
    w.awaiter->unreceivable = true;
    scheduler_.post(w.handle);
  }
  waiters_.clear();
}

void Endpoint::cancel_scope(ScopeId scope, const std::string& why) {
  if (scope == no_scope || scope > max_scope)
    throw Error(ErrorCode::invalid_argument, "cancel_scope: " + std::to_string(scope) + " is not a scope");
  if (cancelled_scope_bits_[scope]) return;
  std::vector<std::byte> payload{std::byte(scope & 0xFF), std::byte(scope >> 8)};
  const std::string text = why.substr(0, 4096);
  payload.insert(payload.end(), reinterpret_cast<const std::byte*>(text.data()),
                 reinterpret_cast<const std::byte*>(text.data()) + text.size());
  // Queued sends of the scope would only feed work the peers drop.
  for (auto& box : outbox_)
    std::erase_if(box, [&](const Frame& f) { return stream_scope(f.stream) == scope; });
  for (PartyId to = 0; to < parties_; ++to)
    if (to != self_ && failed_[to].empty()) outbox_[to].push_back(Frame{scope_cancel_stream, static_cast<std::uint32_t>(costs_.rounds), payload});
  cancel_scope_locally(scope, why);
}

void Endpoint::cancel_scope_locally(ScopeId scope, const std::string& why) {
  if (cancelled_scope_bits_[scope]) return;
  cancelled_scope_bits_[scope] = true;
  ++cancelled_scope_count_;
  if (!why.empty()) {
    cancel_reasons_[scope] = {++cancel_serial_, why};
    cancel_reasons_by_age_.emplace_back(scope, cancel_serial_);
    if (cancel_reasons_by_age_.size() > kept_cancel_reasons) {
      const auto [old, serial] = cancel_reasons_by_age_.front();
      cancel_reasons_by_age_.pop_front();
      if (auto it = cancel_reasons_.find(old); it != cancel_reasons_.end() && it->second.first == serial)
        cancel_reasons_.erase(it);
    }
  }
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (stream_scope(it->first.stream) == scope) {
      it->second.awaiter->unreceivable = true;
      scheduler_.post(it->second.handle);
      it = waiters_.erase(it);
    } else {
      ++it;
    }
  }
  std::erase_if(mailbox_, [&](const auto& entry) { return stream_scope(entry.first.stream) == scope; });
}

std::string Endpoint::scope_cancelled(ScopeId scope) const {
  if (!cancelled_scope_bits_[scope]) return {};
  auto it = cancel_reasons_.find(scope);
  return it == cancel_reasons_.end() ? "scope " + std::to_string(scope) + " cancelled" : it->second.second;
}

void Endpoint::open_scope(ScopeId scope) {
  if (!cancelled_scope_bits_[scope]) return;
  cancelled_scope_bits_[scope] = false;
  --cancelled_scope_count_;
  cancel_reasons_.erase(scope);  // its entry by age, if any, goes when it is the oldest
}

Endpoint::StreamCounts Endpoint::stream_counts() const noexcept {
  StreamCounts c;
  c.receiving = waiters_.size();
  c.holding = mailbox_.size();
  for (const auto& [key, frames] : mailbox_) c.held_frames += frames.size();
  c.cancelled_scopes = cancelled_scope_count_;
  return c;
}

void Endpoint::tell_peers(StreamId stream, const std::string& why) {
  const std::string text = why.substr(0, 4096);
  for (PartyId to = 0; to < parties_; ++to) tell_peers_one(to, stream, text);
}

void Endpoint::tell_peers_one(PartyId to, StreamId stream, const std::string& text) {
  if (!transport_ || to == self_ || !failed_[to].empty()) return;
  std::vector<Frame> batch;
  batch.push_back(Frame{stream, static_cast<std::uint32_t>(costs_.rounds),
                        std::vector<std::byte>(reinterpret_cast<const std::byte*>(text.data()),
                                               reinterpret_cast<const std::byte*>(text.data()) + text.size())});
  try {
    transport_->write(self_, to, std::move(batch));
  } catch (const std::exception&) {
    // That link is gone too: nothing to tell.
  }
}

bool Endpoint::waiting_on(PartyId peer) const {
  for (const auto& [key, w] : waiters_)
    if (key.peer == peer && !w.awaiter->idle) return true;
  return false;
}

void Endpoint::on_tick_end() {
  if (stop_.stop_requested() && !cancelled()) cancel("stopped by its caller");
  if (cancelled()) {
    for (auto& box : outbox_) box.clear();  // nobody is listening any more
    return;
  }
  for (PartyId to = 0; to < parties_; ++to) {
    auto& box = outbox_[to];
    if (box.empty()) continue;
    costs_.per_peer[to].writes += 1;
    std::vector<Frame> batch = std::move(box);
    box.clear();
    if (!transport_)
      throw Error(ErrorCode::network,
                  "party " + std::to_string(self_) + " has no transport attached");
    transport_->write(self_, to, std::move(batch));
  }
}

std::string Endpoint::describe_waiting() const {
  std::string s;
  for (const auto& [key, w] : waiters_) {
    if (!s.empty()) s += ", ";
    s += "party " + std::to_string(self_) + " <- party " + std::to_string(key.peer) +
         " on stream " + std::to_string(key.stream);
  }
  return s;
}

}  // namespace mpcache
