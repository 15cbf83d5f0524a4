// A worker thread's client links (link.hpp): its listener and the connections it accepted,
// read and written by the worker thread itself in its poll loop.
//
// Contract:
//   * WorkerLinks(ip, max_frame, max_links, where, keys, kind, unix_links) listens on a free
//     port of ip and, with unix_links, on a Unix-domain socket (LinkListener, link.hpp;
//     address() names both; when the Unix one cannot be made, TCP alone and a warning);
//     throws std::runtime_error when it cannot listen on TCP. Links over either are served
//     alike (unix_accepted() counts those that came over the Unix-domain socket).
//   * add_poll_items appends the listener's and every link's pollitem (POLLIN; POLLOUT too
//     while a link has unsent answers); service(items, count, on_frame) handles the returned
//     events of those items: accepts connections (beyond max_links a new one is closed at
//     once and counted in refused()), reads what is waiting (at most kReadBytes per link and
//     turn, so one busy client cannot starve the rest), calls on_frame(link, payload) for every
//     whole frame, and writes what a link has pending.
//   * When accept fails for want of descriptors (EMFILE, ENFILE), the waiting connections are
//     refused: each is accepted with a spare descriptor kept for this and closed at once
//     (counted in refused(), logged), so no client waits on a connection the worker cannot
//     serve (the client then uses ZeroMQ). Without a spare descriptor (it could not be
//     opened again), or for want of memory, the listener is left out of the poll set for
//     kAcceptPauseMs (logged), so a full descriptor table never makes the worker spin.
//   * A frame above max_frame, a closed peer or a read/write error closes that link (logged
//     at most kMaxWarningsPerSecond a second, counted in dropped()); the worker goes on.
//   * farewell(prefix) (off unless called; call links turn it on): a link closed for a fault
//     (not its client's own close, nor a link still in its handshake) first gets, as best it
//     can without blocking, one last frame: prefix, the number of frames served from that
//     link, a space, and why, so its client knows which frames never will be. The names in
//     the log say what the links serve (the constructor's kind; "client link" unless told).
//   * queue(link, payload) appends an answer frame to that link's pending output (nothing
//     when the link is gone); flush() writes every link's pending output without blocking. A
//     link whose unsent output exceeds kMaxPendingBytes (a client that stopped reading) is
//     closed. Belongs to one thread.
//   * Secured (keys.enabled(), secure_link.hpp): every connection first runs the link
//     handshake with this node's key pair; until it is done the link reads frames of at most
//     kHandshakeFrameMax bytes and serves nothing, and a handshake not done within
//     kHandshakeMs is closed. The client's key is admitted as the node's ZAP handler admits it
//     on the workers' sockets (zap_decision, domain "cloudburst"): an unknown key gets an ERROR
//     frame and the link is closed; an admitted one gets READY and its role, which on_frame
//     receives with every payload. From then on every frame is a sealed MESSAGE; one that does
//     not open (tampered, replayed, reordered, forged) closes the link. Failed and refused
//     handshakes are counted in auth_refused() and logged like other link faults. Without
//     keys, links are plain and on_frame's role is empty.
#pragma once

#include <zmq.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "curve.hpp"
#include "link.hpp"
#include "secure_link.hpp"

namespace anna {

class WorkerLinks {
 public:
  static constexpr std::size_t kReadBytes = 256u << 10;
  static constexpr std::size_t kMaxPendingBytes = 256u << 20;
  static constexpr std::size_t kDefaultMaxLinks = 256;
  static constexpr int kMaxWarningsPerSecond = 10;
  static constexpr int kAcceptPauseMs = 100;
  static constexpr int kHandshakeMs = 1000;
  using OnFrame =
      std::function<void(std::uint64_t link, std::string_view payload, std::string_view role)>;

  // keys: the node's own CURVE keys and the keys it admits; not enabled: plain links.
  // kind: what the links serve, as the log and the constructor's errors name them.
  // unix_links: listen on a Unix-domain socket too (link.hpp's LinkListener).
  WorkerLinks(const std::string& ip, std::size_t max_frame, std::size_t max_links, std::string where,
              const CurveKeys& keys = CurveKeys{}, std::string kind = "client link",
              bool unix_links = true);
  ~WorkerLinks();
  WorkerLinks(const WorkerLinks&) = delete;
  WorkerLinks& operator=(const WorkerLinks&) = delete;

  const std::string& address() const { return listener_.address(); }
  void add_poll_items(std::vector<zmq_pollitem_t>* items);
  void service(const zmq_pollitem_t* items, std::size_t count, const OnFrame& on_frame);
  void queue(std::uint64_t link, std::string_view payload);
  void flush();
  void farewell(std::string prefix) { farewell_ = std::move(prefix); }

  std::size_t open() const { return links_.size(); }
  bool has(std::uint64_t link) const { return links_.count(link) != 0; }
  std::uint64_t accepted() const { return accepted_; }
  std::uint64_t unix_accepted() const { return unix_accepted_; }  // of them, Unix-domain
  std::uint64_t refused() const { return refused_; }
  std::uint64_t dropped() const { return dropped_; }
  std::uint64_t frames() const { return frames_; }
  std::uint64_t auth_refused() const { return auth_refused_; }
  bool secured() const { return secured_; }

 private:
  struct Link {
    Link(int fd_, std::size_t max_frame) : fd(fd_), reader(max_frame) {}
    int fd;
    LinkReader reader;
    std::string out;
    std::size_t sent = 0;  // out[0, sent) is written
    // Secured links only: the handshake until it is done, then the cipher and the key's role.
    std::unique_ptr<LinkServerHandshake> handshake;
    std::chrono::steady_clock::time_point handshake_deadline{};
    std::unique_ptr<LinkCipher> cipher;
    std::string role;
    std::uint64_t served = 0;  // frames handed to on_frame
    std::string fault;         // why it is closed for a fault (its farewell says so)
  };
  // One handshake frame of a secured link; false when the link is closed.
  bool handshake_step(std::uint64_t id, Link& link, std::string_view frame);
  void close_stalled_handshakes();
  void accept_all(int listen_fd, bool unix_domain);
  void read(std::uint64_t id, const OnFrame& on_frame);
  bool write(Link& link);
  void close_link(std::uint64_t id, const std::string& why);
  void drop_closing();  // closes and forgets the links close_link marked
  void warn(const std::string& what);  // at most kMaxWarningsPerSecond a second

  std::string where_;
  std::string farewell_;                 // empty: no farewell frames
  std::string kind_;                     // what the log calls a link
  std::size_t max_frame_, max_links_;
  LinkListener listener_;
  std::size_t listeners_ = 1;  // poll items of listeners (TCP, and Unix-domain if any)
  int spare_fd_ = -1;  // held for refusing connections when out of descriptors
  std::uint64_t next_id_ = 1;
  std::unordered_map<std::uint64_t, std::unique_ptr<Link>> links_;
  std::vector<std::uint64_t> polled_;  // link ids in the order add_poll_items listed them
  std::vector<std::uint64_t> closing_;
  std::uint64_t accepted_ = 0, unix_accepted_ = 0, refused_ = 0, dropped_ = 0, frames_ = 0, auth_refused_ = 0;
  bool secured_ = false;
  RawKey public_{}, secret_{};
  std::map<std::string, std::string> admitted_;  // raw key -> role (zap_decision)
  std::string plain_;  // the last opened MESSAGE
  std::size_t handshaking_ = 0;
  std::chrono::steady_clock::time_point warn_window_{};
  int warnings_ = 0;
  std::chrono::steady_clock::time_point accept_paused_until_{};
};

}  // namespace anna
