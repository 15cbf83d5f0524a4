// Call links. See call_links.hpp for the contract.
#include "call_links.hpp"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <sodium.h>

namespace anna {

namespace {

std::uint32_t epoll_events(short zmq_events) {
  std::uint32_t e = 0;
  if (zmq_events & ZMQ_POLLIN) e |= EPOLLIN;
  if (zmq_events & ZMQ_POLLOUT) e |= EPOLLOUT;
  return e;
}

int make_epoll() {
  int fd = ::epoll_create1(EPOLL_CLOEXEC);
  if (fd < 0) throw std::runtime_error(std::string("call links: epoll: ") + std::strerror(errno));
  return fd;
}

}  // namespace

CallLinkServer::CallLinkServer(const std::string& ip, std::size_t max_frame,
                               std::size_t max_links, std::string where, const CurveKeys& keys)
    : links_(ip, max_frame, max_links, std::move(where), keys), epoll_fd_(make_epoll()) {
  sync();
}

CallLinkServer::~CallLinkServer() {
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
}

void CallLinkServer::sync() {
  items_.clear();
  links_.add_poll_items(&items_);
  // A link closed and another accepted can reuse a descriptor number that epoll already
  // forgot (closing removes it): whenever the set of links may have changed, start over.
  bool changed = links_.accepted() != synced_accepted_ || links_.open() != synced_open_ ||
                 items_.size() != registered_.size();
  if (changed) {
    for (const auto& [fd, events] : registered_) ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
    registered_.clear();
    for (const auto& item : items_) {
      epoll_event ev{};
      ev.events = epoll_events(item.events);
      ev.data.fd = item.fd;
      if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, item.fd, &ev) == 0) registered_[item.fd] = item.events;
    }
    synced_accepted_ = links_.accepted();
    synced_open_ = links_.open();
    return;
  }
  for (const auto& item : items_) {
    auto it = registered_.find(item.fd);
    if (it == registered_.end() || it->second == item.events) continue;
    epoll_event ev{};
    ev.events = epoll_events(item.events);
    ev.data.fd = item.fd;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, item.fd, &ev);
    it->second = item.events;
  }
}

void CallLinkServer::service(std::vector<Frame>* out) {
  items_.clear();
  links_.add_poll_items(&items_);
  int n;
  do n = zmq_poll(items_.data(), static_cast<int>(items_.size()), 0);
  while (n < 0 && zmq_errno() == EINTR);
  if (n > 0) {
    const bool plain = !links_.secured();
    links_.service(items_.data(), items_.size(),
                   [&](std::uint64_t link, std::string_view payload, std::string_view role) {
                     if (plain && payload == kCallLinkProbe) {
                       probes_.push_back(link);
                       return;
                     }
                     out->emplace_back(link, std::string(payload), std::string(role));
                   });
    for (std::uint64_t link : probes_) links_.queue(link, kCallLinkProbe);
    probes_.clear();
  }
  links_.flush();  // handshake replies, probes, and answers left over from a full socket
  sync();
}

bool CallLinkServer::send(std::uint64_t link, std::string_view payload) {
  if (!links_.has(link)) return false;
  links_.queue(link, payload);
  links_.flush();
  sync();
  return true;
}

CallLinkClient::CallLinkClient(const std::string& public_key, const std::string& secret_key,
                               std::size_t max_frame)
    : max_frame_(max_frame), secured_(!secret_key.empty()) {
  if (secured_) {
    if (!secure_links_available()) throw std::runtime_error("call links: libsodium cannot start");
    if (!raw_key(public_key, &public_) || !raw_key(secret_key, &secret_))
      throw std::invalid_argument("call links: the client's keys are not Z85 CURVE keys");
  }
  epoll_fd_ = make_epoll();
}

CallLinkClient::~CallLinkClient() {
  for (auto& [id, link] : links_) ::close(link->fd);
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
  sodium_memzero(secret_.data(), secret_.size());
}

std::uint64_t CallLinkClient::open(const std::string& address, const std::string& server_key,
                                   int timeout_ms, std::string* why) {
  RawKey server{};
  if (secured_ && !raw_key(server_key, &server)) {
    *why = "the worker's address carries no CURVE key";
    return 0;
  }
  auto start = std::chrono::steady_clock::now();
  auto left = [&] {
    auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(
                     std::chrono::steady_clock::now() - start).count();
    return static_cast<int>(std::max<long long>(timeout_ms - spent, 1));
  };
  int fd = connect_link(address, timeout_ms, why);
  if (fd < 0) return 0;
  auto link = std::make_unique<Link>(max_frame_);
  link->fd = fd;
  bool ok;
  if (secured_) {
    link->cipher = std::make_unique<LinkCipher>();
    ok = secure_client_link(fd, &link->reader, public_, secret_, server, left(),
                            link->cipher.get(), why);
  } else {
    // A plain link is ready once the worker answers its probe (a connection in the listen
    // backlog is not one the worker accepted).
    std::string out, frame;
    append_frame(&out, kCallLinkProbe);
    ok = write_all(fd, out, left()) && read_frame(fd, &link->reader, left(), &frame, why);
    if (ok && frame != kCallLinkProbe) {
      *why = "the worker did not answer the link's probe";
      ok = false;
    } else if (!ok && why->empty()) {
      *why = "the probe was not written";
    }
  }
  if (!ok) {
    ::close(fd);
    return 0;
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  std::uint64_t id = next_id_++;
  ev.data.u64 = id;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    *why = std::string("epoll: ") + std::strerror(errno);
    ::close(fd);
    return 0;
  }
  links_.emplace(id, std::move(link));
  return id;
}

bool CallLinkClient::send(std::uint64_t id, std::string_view payload, int timeout_ms) {
  auto it = links_.find(id);
  if (it == links_.end() || it->second->finished) return false;
  Link& link = *it->second;
  link.out.clear();
  if (link.cipher) link.cipher->seal(payload, &link.out);
  else append_frame(&link.out, payload);
  if (write_all(link.fd, link.out, timeout_ms)) return true;
  finish(id);  // a partial frame is never served: the worker closes the link at its end
  return false;
}

void CallLinkClient::finish(std::uint64_t id) {
  auto it = links_.find(id);
  if (it == links_.end() || it->second->finished) return;
  it->second->finished = true;
  ::shutdown(it->second->fd, SHUT_WR);
}

void CallLinkClient::read(std::vector<std::pair<std::uint64_t, std::string>>* frames,
                          std::vector<std::pair<std::uint64_t, std::string>>* broken) {
  epoll_event events[16];
  int n;
  do n = ::epoll_wait(epoll_fd_, events, 16, 0);
  while (n < 0 && errno == EINTR);
  for (int i = 0; i < n; ++i) {
    std::uint64_t id = events[i].data.u64;
    auto it = links_.find(id);
    if (it == links_.end()) continue;
    Link& link = *it->second;
    ReadEnd end = read_available(link.fd, &link.reader, 1u << 20);
    std::string why;
    std::string_view frame;
    while (why.empty()) {
      auto next = link.reader.next(&frame);
      if (next == LinkReader::Next::kNeedMore) break;
      if (next == LinkReader::Next::kTooLarge) {
        why = "a frame of " + std::to_string(link.reader.declared()) + " bytes, above the limit";
        break;
      }
      if (!link.cipher) {
        frames->emplace_back(id, std::string(frame));
        continue;
      }
      if (link.cipher->open(frame, &plain_) != LinkCipher::Open::kOk)
        why = "a frame that does not authenticate (tampered, replayed or forged)";
      else
        frames->emplace_back(id, plain_);
    }
    if (why.empty() && end != ReadEnd::kOpen)
      why = end == ReadEnd::kClosed ? "closed by the worker"
                                    : std::string("read: ") + std::strerror(errno);
    if (!why.empty()) {
      broken->emplace_back(id, why);
      close(id);
    }
  }
}

void CallLinkClient::close(std::uint64_t id) {
  auto it = links_.find(id);
  if (it == links_.end()) return;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, it->second->fd, nullptr);
  ::close(it->second->fd);
  links_.erase(it);
}

}  // namespace anna
