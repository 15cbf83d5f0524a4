// A worker thread's client links. See worker_links.hpp for the contract.
#include "worker_links.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <sodium.h>

#include "log.hpp"
#include "zap.hpp"

namespace anna {

WorkerLinks::WorkerLinks(const std::string& ip, std::size_t max_frame, std::size_t max_links,
                         std::string where, const CurveKeys& keys, std::string kind,
                         bool unix_links)
    : where_(std::move(where)), kind_(std::move(kind)), max_frame_(max_frame),
      max_links_(max_links), secured_(keys.enabled()) {
  std::string why, unix_why;
  if (secured_) {
    if (!secure_links_available()) throw std::runtime_error(kind_ + "s: libsodium cannot start");
    if (!raw_key(keys.public_key, &public_) || !raw_key(keys.secret_key, &secret_))
      throw std::runtime_error(kind_ + "s: the node's keys are not Z85 CURVE keys");
    for (const auto& [key, role] : keys.admitted) {
      std::string raw;
      if (z85_to_raw(key, &raw)) admitted_.emplace(std::move(raw), role);
    }
  }
  if (!listener_.open(ip, unix_links, &why, &unix_why))
    throw std::runtime_error(kind_ + "s: " + why);
  if (!unix_why.empty()) log_warning(where_ + kind_ + "s over TCP only: " + unix_why);
  listeners_ = listener_.unix_fd() >= 0 ? 2 : 1;
  spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
}

WorkerLinks::~WorkerLinks() {
  for (auto& [id, link] : links_) ::close(link->fd);
  if (spare_fd_ >= 0) ::close(spare_fd_);
  sodium_memzero(secret_.data(), secret_.size());
}

void WorkerLinks::close_stalled_handshakes() {
  if (handshaking_ == 0) return;
  auto now = std::chrono::steady_clock::now();
  std::size_t left = 0;
  for (auto& [id, link] : links_) {
    if (!link->handshake) continue;
    if (now < link->handshake_deadline) {
      ++left;
      continue;
    }
    ++auth_refused_;
    close_link(id, "handshake not done within " + std::to_string(kHandshakeMs) + " ms");
  }
  handshaking_ = left;
  drop_closing();
}

void WorkerLinks::add_poll_items(std::vector<zmq_pollitem_t>* items) {
  close_stalled_handshakes();
  // Events 0 while accepting is paused: the item stays, so the indexes below do not move.
  short listen_events =
      std::chrono::steady_clock::now() < accept_paused_until_ ? short{0} : short{ZMQ_POLLIN};
  items->push_back(zmq_pollitem_t{nullptr, listener_.tcp_fd(), listen_events, 0});
  if (listener_.unix_fd() >= 0)
    items->push_back(zmq_pollitem_t{nullptr, listener_.unix_fd(), listen_events, 0});
  polled_.clear();
  for (auto& [id, link] : links_) {
    short events = ZMQ_POLLIN;
    if (link->sent < link->out.size()) events |= ZMQ_POLLOUT;
    items->push_back(zmq_pollitem_t{nullptr, link->fd, events, 0});
    polled_.push_back(id);
  }
}

void WorkerLinks::service(const zmq_pollitem_t* items, std::size_t count, const OnFrame& on_frame) {
  if (count < listeners_) return;
  if (items[0].revents & ZMQ_POLLIN) accept_all(listener_.tcp_fd(), false);
  if (listeners_ == 2 && (items[1].revents & ZMQ_POLLIN)) accept_all(listener_.unix_fd(), true);
  for (std::size_t i = listeners_; i < count && i - listeners_ < polled_.size(); ++i) {
    if (items[i].revents == 0) continue;
    std::uint64_t id = polled_[i - listeners_];
    auto it = links_.find(id);
    if (it == links_.end()) continue;
    if (items[i].revents & ZMQ_POLLOUT) {
      if (!write(*it->second)) {
        close_link(id, "write failed");
        continue;
      }
    }
    if (items[i].revents & (ZMQ_POLLIN | ZMQ_POLLERR)) read(id, on_frame);
  }
  drop_closing();
}

void WorkerLinks::accept_all(int listen_fd, bool unix_domain) {
  for (int i = 0; i < 64; ++i) {
    int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if ((errno == EMFILE || errno == ENFILE) && spare_fd_ >= 0) {
        // Out of descriptors: a connection the kernel completed into the backlog would wait
        // there while its client waits for it. Refuse it instead (accept it with the spare
        // descriptor, close it at once), so the client sees the link closed and uses ZeroMQ.
        const int full = errno;
        ::close(spare_fd_);
        int refused = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        const int accept_errno = errno;
        if (refused >= 0) ::close(refused);
        spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (refused >= 0) {
          ++refused_;
          warn("cannot accept " + kind_ + "s (" + std::strerror(full) +
               "): refused one");
          if (spare_fd_ >= 0) continue;  // the next one in the backlog
        } else if (accept_errno == EAGAIN || accept_errno == EWOULDBLOCK) {
          if (spare_fd_ >= 0) return;  // nothing was waiting after all
        }
        errno = full;
      }
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // No spare descriptor (or no memory): stop polling the listener for a while rather
        // than spinning on it.
        accept_paused_until_ = std::chrono::steady_clock::now() +
                               std::chrono::milliseconds(kAcceptPauseMs);
        warn("cannot accept " + kind_ + "s for " + std::to_string(kAcceptPauseMs) +
             " ms: " + std::strerror(errno));
      }
      return;  // EAGAIN, or an error that the next turn sees again
    }
    if (links_.size() >= max_links_) {
      ::close(fd);
      ++refused_;
      continue;  // the client falls back to ZeroMQ
    }
    int one = 1;
    if (!unix_domain) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    auto link = std::make_unique<Link>(fd, secured_ ? kHandshakeFrameMax : max_frame_);
    if (secured_) {
      link->handshake = std::make_unique<LinkServerHandshake>(public_, secret_);
      link->handshake_deadline =
          std::chrono::steady_clock::now() + std::chrono::milliseconds(kHandshakeMs);
      ++handshaking_;
    }
    links_.emplace(next_id_++, std::move(link));
    ++accepted_;
    if (unix_domain) ++unix_accepted_;
  }
}

void WorkerLinks::read(std::uint64_t id, const OnFrame& on_frame) {
  Link& link = *links_.at(id);
  ReadEnd end = read_available(link.fd, &link.reader, kReadBytes);
  if (end != ReadEnd::kOpen)  // frames already read are still served below
    close_link(id, end == ReadEnd::kClosed ? "" : std::string("read: ") + std::strerror(errno));
  std::string_view frame;
  while (true) {
    auto next = link.reader.next(&frame);
    if (next == LinkReader::Next::kNeedMore) break;
    if (next == LinkReader::Next::kTooLarge) {
      close_link(id, "a frame of " + std::to_string(link.reader.declared()) +
                         " bytes, above the limit of " + std::to_string(max_frame_));
      break;
    }
    if (link.handshake) {
      if (!handshake_step(id, link, frame)) break;
      continue;
    }
    if (link.cipher) {
      auto opened = link.cipher->open(frame, &plain_);
      if (opened != LinkCipher::Open::kOk) {
        close_link(id, opened == LinkCipher::Open::kOutOfOrder
                           ? "a frame out of order (replayed, reordered or dropped)"
                           : "a frame that does not authenticate (tampered or forged)");
        break;
      }
      ++frames_;
      ++link.served;
      on_frame(id, plain_, link.role);
      continue;
    }
    ++frames_;
    ++link.served;
    on_frame(id, frame, std::string_view());
  }
}

bool WorkerLinks::handshake_step(std::uint64_t id, Link& link, std::string_view frame) {
  std::string reply, why;
  switch (link.handshake->on_frame(frame, &reply, &why)) {
    case LinkServerHandshake::Step::kReply:
      append_frame(&link.out, reply);
      return true;
    case LinkServerHandshake::Step::kFailed:
      ++auth_refused_;
      close_link(id, "link handshake failed: " + why);
      return false;
    case LinkServerHandshake::Step::kAuthenticated:
      break;
  }
  const RawKey& key = link.handshake->client_key();
  std::string raw(reinterpret_cast<const char*>(key.data()), key.size());
  std::string role = zap_decision(admitted_, kZapDomain, raw, &why);
  if (role.empty()) {
    // As the ZAP handler answers a refused key: the client hears why, then the link closes.
    append_frame(&link.out, LinkServerHandshake::refusal(why));
    write(link);
    ++auth_refused_;
    close_link(id, "refused a link from key " + raw_to_z85(raw) + ": " + why);
    return false;
  }
  link.role = std::move(role);
  link.cipher = std::make_unique<LinkCipher>();
  append_frame(&link.out, link.handshake->ready(link.cipher.get()));
  link.handshake.reset();
  link.reader.set_max_frame(max_frame_ + kSealOverhead);
  return true;
}

bool WorkerLinks::write(Link& link) {
  while (link.sent < link.out.size()) {
    ssize_t n = ::send(link.fd, link.out.data() + link.sent, link.out.size() - link.sent,
                       MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      link.sent += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    return false;
  }
  if (link.sent == link.out.size()) {
    link.out.clear();
    link.sent = 0;
  } else if (link.sent > (1u << 20)) {
    link.out.erase(0, link.sent);
    link.sent = 0;
  }
  return true;
}

void WorkerLinks::queue(std::uint64_t id, std::string_view payload) {
  auto it = links_.find(id);
  if (it == links_.end()) return;
  Link& link = *it->second;
  if (link.cipher) link.cipher->seal(payload, &link.out);
  else if (!link.handshake) append_frame(&link.out, payload);
}

void WorkerLinks::flush() {
  for (auto& [id, link] : links_) {
    if (link->sent == link->out.size()) continue;
    if (!write(*link)) closing_.push_back(id);
    else if (link->out.size() - link->sent > kMaxPendingBytes) {
      closing_.push_back(id);
      ++dropped_;
      log_warning(where_ + "closed a " + kind_ + " that stopped reading its answers (" +
                  std::to_string(link->out.size() - link->sent) + " bytes unsent)");
    }
  }
  drop_closing();
}

void WorkerLinks::drop_closing() {
  for (std::uint64_t id : closing_) {
    auto it = links_.find(id);
    if (it == links_.end()) continue;
    Link& link = *it->second;
    if (!link.fault.empty()) {  // (after the frames read with the fault are served)
      queue(id, farewell_ + std::to_string(link.served) + " " + link.fault);
      write(link);
    }
    ::close(it->second->fd);
    links_.erase(it);
  }
  closing_.clear();
}

void WorkerLinks::close_link(std::uint64_t id, const std::string& why) {
  closing_.push_back(id);
  if (why.empty()) return;  // the client closed it: nothing to report
  ++dropped_;
  auto it = links_.find(id);
  if (!farewell_.empty() && it != links_.end() && !it->second->handshake &&
      (it->second->cipher || !secured_))
    it->second->fault = why;
  warn("closed a " + kind_ + ": " + why + " (" + std::to_string(dropped_) + " closed so far)");
}

void WorkerLinks::warn(const std::string& what) {
  auto now = std::chrono::steady_clock::now();
  if (now - warn_window_ >= std::chrono::seconds(1)) {
    warn_window_ = now;
    warnings_ = 0;
  }
  if (++warnings_ <= kMaxWarningsPerSecond) log_warning(where_ + what);
}

}  // namespace anna
