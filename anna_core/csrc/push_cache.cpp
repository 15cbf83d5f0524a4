// PUSH socket cache. See push_cache.hpp for the contract.
#include "push_cache.hpp"

#include <zmq.h>

#include <cerrno>

#include "log.hpp"

namespace anna {

PushCache::PushCache(void* zmq_context, std::unordered_map<std::string, std::string> rewrite,
                     std::size_t capacity)
    : ctx_(zmq_context), rewrite_(std::move(rewrite)), capacity_(capacity < 1 ? 1 : capacity) {}

PushCache::~PushCache() {
  for (auto& [address, e] : sockets_) zmq_close(e.socket);
}

void PushCache::evict_one() {
  auto oldest = sockets_.begin();
  for (auto it = sockets_.begin(); it != sockets_.end(); ++it)
    if (it->second.last_use < oldest->second.last_use) oldest = it;
  zmq_close(oldest->second.socket);
  sockets_.erase(oldest);
}

void* PushCache::socket_for(const std::string& address) {
  auto it = sockets_.find(address);
  if (it != sockets_.end()) {
    it->second.last_use = ++clock_;
    return it->second.socket;
  }
  if (sockets_.size() >= capacity_) evict_one();
  void* s = zmq_socket(ctx_, ZMQ_PUSH);
  if (s == nullptr) {
    log_error("zmq_socket(PUSH) failed: " + std::string(zmq_strerror(errno)));
    return nullptr;
  }
  int hwm = kSendHwm, linger = kLingerMs;
  zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm);
  zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
  auto rw = rewrite_.find(address);
  const std::string& endpoint = rw == rewrite_.end() ? address : rw->second;
  if (zmq_connect(s, endpoint.c_str()) != 0) {
    log_warning("cannot connect to '" + address + "': " + zmq_strerror(errno));
    zmq_close(s);
    return nullptr;
  }
  sockets_.emplace(address, Entry{s, ++clock_});
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
  return zmq_send(s, payload.data(), payload.size(), ZMQ_DONTWAIT) >= 0;
}

}  // namespace anna
