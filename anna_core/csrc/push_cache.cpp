// PUSH socket cache. See push_cache.hpp for the contract.
#include "push_cache.hpp"

#include <zmq.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <thread>

#include "log.hpp"

namespace anna {

namespace {

// Printable, truncated rendering of an untrusted address for log lines.
std::string shown(const std::string& s) {
  std::string out = "'";
  for (std::size_t i = 0; i < s.size() && i < 80; ++i) {
    char c = s[i];
    out.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  }
  if (s.size() > 80) out += "...";
  return out + "'";
}

bool has_space(const std::string& s, std::size_t from) {
  for (std::size_t i = from; i < s.size(); ++i)
    if (std::isspace(static_cast<unsigned char>(s[i])) || s[i] == '\0') return true;
  return false;
}

}  // namespace

bool PushCache::valid_address(const std::string& address) {
  if (address.size() > kMaxAddressBytes) return false;
  std::string a, key;
  if (!split_keyed_address(address, &a, &key)) return false;
  auto starts = [&](const char* p) { return a.rfind(p, 0) == 0; };
  if (starts("ipc://")) return a.size() > 6 && !has_space(a, 6);
  if (starts("inproc://")) return a.size() > 9 && !has_space(a, 9);
  if (!starts("tcp://")) return false;
  std::size_t colon = a.rfind(':');
  if (colon == std::string::npos || colon <= 6) return false;
  for (std::size_t i = 6; i < colon; ++i) {
    char c = a[i];
    if (c == ':' || c == '/' || std::isspace(static_cast<unsigned char>(c)) || c == '\0')
      return false;
  }
  std::size_t digits = a.size() - colon - 1;
  if (digits < 1 || digits > 5) return false;
  long port = 0;
  for (std::size_t i = colon + 1; i < a.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(a[i]))) return false;
    port = port * 10 + (a[i] - '0');
  }
  return port >= 1 && port <= 65535;
}

PushCache::PushCache(void* zmq_context, std::unordered_map<std::string, std::string> rewrite,
                     std::size_t capacity, CurveKeys keys, int linger_ms, int handshake_ms)
    : ctx_(zmq_context), rewrite_(std::move(rewrite)), keys_(std::move(keys)),
      capacity_(capacity < 1 ? 1 : capacity), linger_ms_(linger_ms < 0 ? 0 : linger_ms),
      handshake_(handshake_ms < 0 ? 0 : handshake_ms),
      spacing_(std::chrono::duration_cast<std::chrono::microseconds>(handshake_) /
               static_cast<long>(capacity_)) {}

PushCache::Clock::time_point PushCache::ready_at(const std::string& address,
                                                 Clock::time_point now) const {
  if (sockets_.size() < capacity_ || lru_.empty() || sockets_.count(address) != 0) return now;
  // The least recently used socket is the one send() would close; every other one was used
  // later still.
  return std::max({now, sockets_.at(lru_.front()).last_use + handshake_, made_room_ + spacing_});
}

PushCache::~PushCache() {
  for (auto& [address, e] : sockets_) zmq_close(e.socket);
}

void PushCache::evict_one(Clock::time_point now) {
  const std::string& address = lru_.front();
  auto it = sockets_.find(address);
  long age = std::chrono::duration_cast<std::chrono::milliseconds>(now - it->second.last_use).count();
  int linger = age >= kEvictLingerMs ? 0 : static_cast<int>(kEvictLingerMs - age);
  linger = std::min(linger, linger_ms_);
  while (!lingering_.empty() && lingering_.front() <= now) lingering_.pop_front();
  if (lingering_.size() >= max_lingering(capacity_)) {
    // A flood: no more tracked lingering sockets. This one still gets a moment for what it
    // queued (an answer to a new peer must not be dropped before its handshake completes);
    // the context's socket limit, which counts it until it is gone, holds the descriptors.
    linger = std::min(linger, kFloodLingerMs);
  } else if (linger > 0) {
    lingering_.push_back(now + std::chrono::milliseconds(linger));
  }
  zmq_setsockopt(it->second.socket, ZMQ_LINGER, &linger, sizeof linger);
  zmq_close(it->second.socket);
  sockets_.erase(it);
  lru_.pop_front();
  ++evictions_;
}

void PushCache::warn_refused(const std::string& address, const std::string& why) {
  ++refused_;
  auto now = Clock::now();
  if (now - warn_window_ >= std::chrono::seconds(1)) {
    warn_window_ = now;
    warnings_in_window_ = 0;
  }
  if (++warnings_in_window_ <= kMaxWarningsPerSecond)
    log_warning("push cache: not sending to " + shown(address) + ": " + why + " (" +
                std::to_string(refused_) + " refused so far)");
}

void* PushCache::socket_for(const std::string& address) {
  auto now = Clock::now();
  auto it = sockets_.find(address);
  if (it != sockets_.end()) {
    it->second.last_use = now;
    lru_.splice(lru_.end(), lru_, it->second.position);
    return it->second.socket;
  }
  if (!valid_address(address)) {
    warn_refused(address, "not a tcp://host:port, ipc:// or inproc:// address");
    return nullptr;
  }
  auto rw = rewrite_.find(address);
  std::string endpoint, server_key;
  if (rw != rewrite_.end()) {
    endpoint = rw->second;  // one of this node's workers, over inproc
  } else {
    split_keyed_address(address, &endpoint, &server_key);  // valid_address checked the form
    if (endpoint.rfind("inproc://", 0) == 0) server_key.clear();
    if (keys_.enabled() && server_key.empty() && endpoint.rfind("inproc://", 0) != 0) {
      warn_refused(address, "it carries no server key and authentication is on");
      return nullptr;
    }
    if (!keys_.enabled()) server_key.clear();
  }
  if (sockets_.size() >= capacity_) made_room_ = now;
  while (sockets_.size() >= capacity_) evict_one(now);
  void* s = zmq_socket(ctx_, ZMQ_PUSH);
  int err = s == nullptr ? errno : 0;
  if (err == EMFILE || err == ENFILE) {
    // The context is out of sockets: close one of ours, and give the context's reaper thread
    // a bounded moment to free slots of sockets closed just before (zmq_close is asynchronous).
    if (!sockets_.empty()) evict_one(now);
    auto deadline = Clock::now() + std::chrono::milliseconds(kReaperWaitMs);
    auto pause = std::chrono::microseconds(500);
    while (s == nullptr && (err == EMFILE || err == ENFILE) && Clock::now() < deadline) {
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(20000));
      s = zmq_socket(ctx_, ZMQ_PUSH);
      err = s == nullptr ? errno : 0;
    }
  }
  if (s == nullptr) {
    // not counted in refused(): the address was fine
    auto t = Clock::now();
    if (t - warn_window_ >= std::chrono::seconds(1)) {
      warn_window_ = t;
      warnings_in_window_ = 0;
    }
    if (++warnings_in_window_ <= kMaxWarningsPerSecond)
      log_warning("push cache: no socket for " + shown(address) + " (" + zmq_strerror(err) +
                  "; the context's socket limit holds the process' descriptors); dropped");
    return nullptr;
  }
  int hwm = kSendHwm, linger = linger_ms_, connect_timeout = kConnectTimeoutMs;
  zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm);
  zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
  zmq_setsockopt(s, ZMQ_CONNECT_TIMEOUT, &connect_timeout, sizeof connect_timeout);
  std::string why;
  if (!server_key.empty() && !make_curve_client(s, keys_, server_key, &why)) {
    warn_refused(address, why);
    zmq_close(s);
    return nullptr;
  }
  if (zmq_connect(s, endpoint.c_str()) != 0) {
    warn_refused(address, std::string("cannot connect: ") + zmq_strerror(errno));
    zmq_close(s);
    return nullptr;
  }
  lru_.push_back(address);
  sockets_.emplace(address, Entry{s, std::prev(lru_.end()), now});
  return s;
}

bool PushCache::send(const std::string& address, const std::string& kind,
                     const std::string& payload) {
  void* s = socket_for(address);
  if (s == nullptr) return false;
  if (!kind.empty()) {
    if (zmq_send(s, kind.data(), kind.size(), ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) return false;
  }
  // Once the first frame of a multipart message is queued, the rest is queued too.
  std::size_t at = 0;
  while (payload.size() - at > kFramePartBytes) {
    if (zmq_send(s, payload.data() + at, kFramePartBytes, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
      return false;
    at += kFramePartBytes;
  }
  return zmq_send(s, payload.data() + at, payload.size() - at, ZMQ_DONTWAIT) >= 0;
}

}  // namespace anna
