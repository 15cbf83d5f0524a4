// A worker thread's cache of ZMQ PUSH sockets, one per destination address.
//
// Contract: send(address, kind, payload) sends [kind][payload] (or [payload] when kind is
// empty) without blocking (ZMQ_DONTWAIT) and returns false if the address cannot be connected
// or the destination's queue is full (the caller logs). Addresses listed in the rewrite map
// (this node's own workers' tcp addresses) are connected over their inproc endpoint instead.
// At most `capacity` sockets stay open; the least recently used one is closed beyond that.
// Sockets are created with a bounded send queue (kSendHwm messages) and a short linger.
// Belongs to one thread (ZMQ sockets are not thread-safe); closes everything on destruction.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>

namespace anna {

class PushCache {
 public:
  static constexpr int kSendHwm = 100000;
  static constexpr int kLingerMs = 200;

  PushCache(void* zmq_context, std::unordered_map<std::string, std::string> rewrite,
            std::size_t capacity = 4096);
  ~PushCache();
  PushCache(const PushCache&) = delete;
  PushCache& operator=(const PushCache&) = delete;

  bool send(const std::string& address, const std::string& kind, const std::string& payload);
  std::size_t size() const { return sockets_.size(); }

 private:
  struct Entry {
    void* socket = nullptr;
    std::uint64_t last_use = 0;
  };
  void* socket_for(const std::string& address);
  void evict_one();

  void* ctx_;
  std::unordered_map<std::string, std::string> rewrite_;
  std::size_t capacity_;
  std::unordered_map<std::string, Entry> sockets_;
  std::uint64_t clock_ = 0;
};

}  // namespace anna
