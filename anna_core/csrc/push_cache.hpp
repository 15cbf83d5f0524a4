// A worker thread's cache of ZMQ PUSH sockets, one per destination address.
//
// Contract: send(address, kind, payload) sends [kind][payload] (or [payload] when kind is
// empty), the payload split in frames of at most kFramePartBytes (the receiver joins them),
// without blocking (ZMQ_DONTWAIT) and returns false if the address cannot be connected
// or the destination's queue is full (the caller logs). Addresses listed in the rewrite map
// (this node's own workers' tcp addresses) are connected over their inproc endpoint instead.
// An address that is not "tcp://host:port" (port 1..65535), "ipc://path" or "inproc://name"
// (at most kMaxAddressBytes) is refused before any socket is made: send returns false and a
// warning names the address (at most kMaxWarningsPerSecond such warnings a second; the rest
// are counted in refused()). A message can therefore never make the worker connect to an
// arbitrary string.
// At most `capacity` sockets stay open (the node config's max_push_sockets, see node.cpp);
// beyond that the least recently used one is closed (O(1)).
// A socket's first message to a new peer leaves only once the peer has answered the
// connection and, with CURVE, the handshake (several round trips between two processes: 100 ms
// and more on a loaded machine). Closing the socket before that drops the message. So a
// caller that can wait asks ready_at(address, now) first: while the cache is full and its least
// recently used socket was used less than `handshake_ms` ago (the constructor's; the node
// config's push_handshake_ms), a new address has to wait until then, and the caller holds the
// message (the node's worker holds its answers and stops reading requests meanwhile: a flood of
// new addresses is slowed to `capacity` new sockets per handshake_ms instead of cutting every
// handshake short; the queue is the flooding sender's). A full cache also makes room at most
// once per handshake_ms / capacity (ready_at says so too): the sockets of a flood then differ
// in age and come due one at a time, so the caller waits that long per new address rather
// than a whole handshake_ms for a batch made at once. send() itself never waits for that:
// it closes the least recently used socket whatever its age (a client's transport, a node
// that is stopping). An evicted socket lingers only
// for what is left of kEvictLingerMs since its last use, so a message queued just before the
// eviction still leaves; at most max_lingering(capacity) (a quarter of capacity, at least 1)
// evicted sockets linger at once for that long, and descriptors_for(capacity) covers them
// (kFdsPerSocket each: a mailbox and one connection). Beyond that (a flood of distinct
// addresses) an evicted socket lingers at most kFloodLingerMs, enough for a handshake on a
// fast path, so an answer to a new peer is not dropped unsent; the node's context limit
// (node.cpp), which counts such sockets until ZeroMQ has closed them, bounds their number.
// When the context refuses a new socket (its ZMQ_MAX_SOCKETS is reached), the least recently
// used one is closed and the socket asked for again, for at most kReaperWaitMs (the context
// frees a closed socket's slot asynchronously); then the message is dropped (logged).
// A TCP connection attempt is given up after kConnectTimeoutMs and tried again, resolving the
// address's host name afresh (runtime/sockets.py's CONNECT_TIMEOUT_MS, the same value): a
// destination whose host vanished without an answer holds an attempt that long, not the
// kernel's two minutes of SYN retries, so a routing given by a stable name that came back at
// a new address (a StatefulSet pod made again) is reached there.
// Sockets are created with a bounded send queue (kSendHwm messages) and a short linger
// (kLingerMs unless the constructor says otherwise, on destruction). Belongs to one thread (ZMQ sockets are not thread-safe);
// closes everything on destruction.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <list>
#include <string>
#include <unordered_map>

#include "curve.hpp"

namespace anna {

// The largest frame any of the kernel's sockets accepts (ZMQ_MAXMSGSIZE); a larger payload is
// sent as several frames of kFramePartBytes (and one shorter): under the limit by more than
// what CURVE adds to a frame on the wire, which the receiver's limit also counts.
constexpr std::size_t kMaxFrameBytes = 16u << 20;
constexpr std::size_t kFramePartBytes = kMaxFrameBytes - (64u << 10);

class PushCache {
 public:
  static constexpr int kSendHwm = 100000;
  static constexpr int kLingerMs = 200;
  static constexpr int kEvictLingerMs = 100;
  static constexpr std::size_t kDefaultCapacity = 1024;
  static constexpr std::size_t kMaxAddressBytes = 1024;
  static constexpr int kMaxWarningsPerSecond = 10;
  static constexpr std::size_t kFdsPerSocket = 2;
  static constexpr int kReaperWaitMs = 200;
  static constexpr int kFloodLingerMs = 20;
  static constexpr int kConnectTimeoutMs = 1000;
  static constexpr int kDefaultHandshakeMs = 250;

  // Evicted sockets that may linger at once, for a cache of `capacity`.
  static constexpr std::size_t max_lingering(std::size_t capacity) {
    return capacity / 4 < 1 ? 1 : capacity / 4;
  }
  // The most descriptors a cache of `capacity` holds: open and lingering sockets.
  static constexpr std::size_t descriptors_for(std::size_t capacity) {
    return kFdsPerSocket * (capacity + max_lingering(capacity));
  }

  // `linger_ms`: how long a socket may still deliver what it queued once closed (kLingerMs;
  // a client that must never wait on close passes 0). `handshake_ms`: see ready_at().
  PushCache(void* zmq_context, std::unordered_map<std::string, std::string> rewrite,
            std::size_t capacity = kDefaultCapacity, CurveKeys keys = {},
            int linger_ms = kLingerMs, int handshake_ms = kDefaultHandshakeMs);
  ~PushCache();
  PushCache(const PushCache&) = delete;
  PushCache& operator=(const PushCache&) = delete;

  bool send(const std::string& address, const std::string& kind, const std::string& payload);
  // When a send to `address` opens no socket used within the last handshake_ms: `now` if it
  // has a socket or the cache has room, else when its least recently used socket reaches that
  // age (see the contract).
  std::chrono::steady_clock::time_point ready_at(const std::string& address,
                                                 std::chrono::steady_clock::time_point now) const;
  std::size_t size() const { return sockets_.size(); }
  std::size_t capacity() const { return capacity_; }
  std::uint64_t evictions() const { return evictions_; }
  std::uint64_t refused() const { return refused_; }

  // True if `address` is a form a PUSH socket may connect to (see the contract).
  static bool valid_address(const std::string& address);

 private:
  using Clock = std::chrono::steady_clock;
  struct Entry {
    void* socket = nullptr;
    std::list<std::string>::iterator position;  // in lru_, most recent at the back
    Clock::time_point last_use;
  };
  void* socket_for(const std::string& address);
  void evict_one(Clock::time_point now);
  void warn_refused(const std::string& address, const std::string& why);

  void* ctx_;
  std::unordered_map<std::string, std::string> rewrite_;
  CurveKeys keys_;
  std::size_t capacity_;
  int linger_ms_;
  std::chrono::milliseconds handshake_;
  std::chrono::microseconds spacing_;  // handshake_ / capacity_: between two makings of room
  Clock::time_point made_room_{};      // when a full cache last closed a socket for a new one
  std::unordered_map<std::string, Entry> sockets_;
  std::list<std::string> lru_;
  std::deque<Clock::time_point> lingering_;  // when each lingering evicted socket is gone
  std::uint64_t evictions_ = 0;
  std::uint64_t refused_ = 0;
  Clock::time_point warn_window_{};
  int warnings_in_window_ = 0;
};

}  // namespace anna
