// Call links: direct calls between a client and an executor worker over a TCP connection
// written and read on the calling thread (client links, link.hpp, reused for calls), so a
// call and its result cross no ZeroMQ I/O thread on either side.
//
// Contract:
//   * CallLinkServer(ip, max_frame, max_links, where, keys, unix_links) is a worker's side
//     (unix_links: a Unix-domain socket next to the TCP port, link.hpp): a WorkerLinks
//     (worker_links.hpp: its listener, bounds, handshake deadline, admission by the node's
//     ZAP decision with the keys the worker's direct socket admits) behind one epoll
//     descriptor, fd(), readable whenever a link has something to accept, read or write, so
//     a ZeroMQ poller can wait on it next to ZeroMQ sockets. service(out) accepts, runs
//     handshakes, reads and writes without blocking, and appends every whole frame that
//     arrived as (link id, payload, role: the admitted key's role, "" on plain links).
//     send(link, payload) seals (secured links) and writes what it can now, the rest at the
//     next service(); false when the link is gone (the caller answers another way).
//   * Plain links (no keys) open with a probe: the client sends kProbe, the server answers
//     kProbe on the link, so a client never sends a call on a connection the worker did not
//     accept. Secured links need none: READY is that proof. A probe is not a frame for the
//     caller.
//   * A link the worker closes for a fault (a frame above the limit, one that does not open)
//     gets a farewell first (WorkerLinks::farewell): kCallLinkFarewell, the number of the
//     client's frames the worker served from it (the probe not counted), a space, and why.
//     The client reports it in `broken` as that why and the number (`taken`; -1 when the
//     link closed without one: the worker died, or stopped serving it for a reason that
//     lost the farewell), so it knows which of its frames were never served.
//   * CallLinkClient(public_key, secret_key, max_frame) is a client's side: its links to
//     workers behind one epoll descriptor, fd(). begin(address, server_key, timeout_ms)
//     starts opening a link without blocking (a non-blocking connect): the link id, or 0
//     with *why set when it cannot even start. The connect, then the handshake (secured,
//     when the client has a key pair: the worker's server key is the one its keyed direct
//     address carries) or the probe, advance in take() as the link's descriptor becomes
//     ready; once done take() reports the link in `opened`, and one that fails or is not
//     done within timeout_ms in `broken` (closed and forgotten). ready(link): whether it
//     is open and takes frames. send(link, payload, timeout_ms) writes one whole frame on a
//     ready link, or fails (false; a link still opening stays so, any other is half-closed):
//     a frame only partly written is never served (the worker serves whole frames only, and
//     closes the link at the end of the stream). finish(link) half-closes a link too. A
//     half-closed link takes no more frames but is still read, so answers the worker wrote
//     before it saw the end arrive; the worker then closes it (and sends later answers
//     another way). take(events, n, frames, broken, opened) reads what ready() found:
//     whole frames as (link, payload), links that closed or failed (a frame above
//     max_frame, one that does not open, a handshake that failed or timed out) as (link,
//     why), each closed and forgotten, and links whose opening finished. close(link) closes
//     at once. watch(fd), ready() and take() wait for a link or one more descriptor (below).
//   * Neither is thread-safe: the caller serialises (the bindings hold a lock), except
//     CallLinkClient::ready(), which only waits on the epoll descriptor (the bindings wait
//     without their lock, so another thread can send while one waits).
#pragma once

#include <sys/epoll.h>
#include <zmq.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "curve.hpp"
#include "link.hpp"
#include "secure_link.hpp"
#include "worker_links.hpp"

namespace anna {

inline constexpr std::string_view kCallLinkProbe = "CL1P";
// (neither starts as a Cloudburst frame does: its first byte is a message kind's code, < 64)
inline constexpr std::string_view kCallLinkFarewell = "CL1F";

class CallLinkServer {
 public:
  using Frame = std::tuple<std::uint64_t, std::string, std::string>;
  CallLinkServer(const std::string& ip, std::size_t max_frame, std::size_t max_links,
                 std::string where, const CurveKeys& keys, bool unix_links = true);
  ~CallLinkServer();
  CallLinkServer(const CallLinkServer&) = delete;
  CallLinkServer& operator=(const CallLinkServer&) = delete;

  const std::string& address() const { return links_.address(); }
  int fd() const { return epoll_fd_; }
  void service(std::vector<Frame>* out);
  bool send(std::uint64_t link, std::string_view payload);
  const WorkerLinks& links() const { return links_; }

 private:
  void sync();  // the epoll set follows the links' poll items
  WorkerLinks links_;
  int epoll_fd_ = -1;
  std::vector<zmq_pollitem_t> items_;
  std::unordered_map<int, short> registered_;
  std::uint64_t synced_accepted_ = ~std::uint64_t{0};
  std::size_t synced_open_ = 0;
  std::vector<std::uint64_t> probes_;  // plain links that sent a probe: answered after reading
};

class CallLinkClient {
 public:
  CallLinkClient(const std::string& public_key, const std::string& secret_key,
                 std::size_t max_frame);
  ~CallLinkClient();
  CallLinkClient(const CallLinkClient&) = delete;
  CallLinkClient& operator=(const CallLinkClient&) = delete;

  int fd() const { return epoll_fd_; }
  bool secured() const { return secured_; }
  std::uint64_t begin(const std::string& address, const std::string& server_key, int timeout_ms,
                      std::string* why);
  bool ready(std::uint64_t link) const;
  bool send(std::uint64_t link, std::string_view payload, int timeout_ms);
  using Frames = std::vector<std::pair<std::uint64_t, std::string>>;
  using Broken = std::vector<std::tuple<std::uint64_t, std::string, std::int64_t>>;
  // Waiting in two steps, so that a caller may wait without its lock and take the events
  // under it: watch(fd) adds a descriptor (the client's ZeroMQ answer socket's ZMQ_FD) to
  // the epoll set once, reported by take() as its `watched` result; ready(events,
  // timeout_ms) waits up to timeout_ms (0: not at all) for events, touching no state;
  // take(events, n, frames, broken, opened) reads what they name (below).
  static constexpr int kMaxEvents = 16;
  bool watch(int fd);
  int ready(epoll_event* events, int timeout_ms) const;
  bool take(const epoll_event* events, int n, Frames* frames, Broken* broken,
            std::vector<std::uint64_t>* opened);
  void finish(std::uint64_t link);
  void close(std::uint64_t link);
  std::size_t open_links() const { return links_.size(); }
  std::size_t unix_links() const;  // of them, over a Unix-domain socket (link.hpp)

 private:
  // How far a link's opening got: connecting, then (secured) waiting for WELCOME and READY
  // or (plain) for the probe's answer, then ready.
  enum class Stage { kConnecting, kWelcome, kReady, kProbe, kOpen };
  struct Link {
    explicit Link(std::size_t max_frame) : reader(max_frame) {}
    int fd = -1;
    LinkReader reader;
    std::unique_ptr<LinkCipher> cipher;
    std::string out;
    bool finished = false;  // half-closed: read until the worker closes it
    bool unix_domain = false;  // over the worker's Unix-domain socket (same host)
    Stage stage = Stage::kConnecting;
    std::chrono::steady_clock::time_point deadline;  // of the opening
    RawKey server{};                                  // the key the worker must prove
    std::unique_ptr<LinkClientHandshake> handshake;
  };
  // Advances an opening link on its descriptor's events; false with *why set when it failed.
  bool advance(std::uint64_t id, Link& link, std::uint32_t events, std::string* why);
  bool watch(std::uint64_t id, const Link& link, int op, std::uint32_t events);
  std::size_t opening_ = 0;  // links not yet open (their deadlines are looked at in read)
  std::size_t max_frame_;
  bool secured_ = false;
  RawKey public_{}, secret_{};
  int epoll_fd_ = -1;
  std::uint64_t next_id_ = 1;  // (0 is the watched descriptor's, in the epoll set)
  int watched_ = -1;
  std::unordered_map<std::uint64_t, std::unique_ptr<Link>> links_;
  std::string plain_;
};

}  // namespace anna
