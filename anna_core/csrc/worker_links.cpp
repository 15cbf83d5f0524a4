// A worker thread's client links. See worker_links.hpp for the contract.
#include "worker_links.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "log.hpp"

namespace anna {

WorkerLinks::WorkerLinks(const std::string& ip, std::size_t max_frame, std::size_t max_links,
                         std::string where)
    : where_(std::move(where)), max_frame_(max_frame), max_links_(max_links) {
  std::string why;
  listen_fd_ = listen_link(ip, &address_, &why);
  if (listen_fd_ < 0) throw std::runtime_error("client links: " + why);
}

WorkerLinks::~WorkerLinks() {
  for (auto& [id, link] : links_) ::close(link->fd);
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

void WorkerLinks::add_poll_items(std::vector<zmq_pollitem_t>* items) {
  // Events 0 while accepting is paused: the item stays, so the indexes below do not move.
  short listen_events =
      std::chrono::steady_clock::now() < accept_paused_until_ ? short{0} : short{ZMQ_POLLIN};
  items->push_back(zmq_pollitem_t{nullptr, listen_fd_, listen_events, 0});
  polled_.clear();
  for (auto& [id, link] : links_) {
    short events = ZMQ_POLLIN;
    if (link->sent < link->out.size()) events |= ZMQ_POLLOUT;
    items->push_back(zmq_pollitem_t{nullptr, link->fd, events, 0});
    polled_.push_back(id);
  }
}

void WorkerLinks::service(const zmq_pollitem_t* items, std::size_t count, const OnFrame& on_frame) {
  if (count == 0) return;
  if (items[0].revents & ZMQ_POLLIN) accept_all();
  for (std::size_t i = 1; i < count && i - 1 < polled_.size(); ++i) {
    if (items[i].revents == 0) continue;
    std::uint64_t id = polled_[i - 1];
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

void WorkerLinks::accept_all() {
  for (int i = 0; i < 64; ++i) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        accept_paused_until_ = std::chrono::steady_clock::now() +
                               std::chrono::milliseconds(kAcceptPauseMs);
        ++refused_;
        warn(std::string("cannot accept client links for ") + std::to_string(kAcceptPauseMs) +
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
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    links_.emplace(next_id_++, std::make_unique<Link>(Link{fd, LinkReader(max_frame_), {}, 0}));
    ++accepted_;
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
    ++frames_;
    on_frame(id, frame);
  }
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
  append_frame(&it->second->out, payload);
}

void WorkerLinks::flush() {
  for (auto& [id, link] : links_) {
    if (link->sent == link->out.size()) continue;
    if (!write(*link)) closing_.push_back(id);
    else if (link->out.size() - link->sent > kMaxPendingBytes) {
      closing_.push_back(id);
      ++dropped_;
      log_warning(where_ + "closed a client link that stopped reading its answers (" +
                  std::to_string(link->out.size() - link->sent) + " bytes unsent)");
    }
  }
  drop_closing();
}

void WorkerLinks::drop_closing() {
  for (std::uint64_t id : closing_) {
    auto it = links_.find(id);
    if (it == links_.end()) continue;
    ::close(it->second->fd);
    links_.erase(it);
  }
  closing_.clear();
}

void WorkerLinks::close_link(std::uint64_t id, const std::string& why) {
  closing_.push_back(id);
  if (why.empty()) return;  // the client closed it: nothing to report
  ++dropped_;
  warn("closed a client link: " + why + " (" + std::to_string(dropped_) + " closed so far)");
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
