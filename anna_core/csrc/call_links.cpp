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

// A farewell's body ("<frames served> <why>"): *taken and *why (taken -1 when it does not parse).
void farewell(std::string_view body, std::int64_t* taken, std::string* why) {
  std::size_t space = body.find(' ');
  std::string count(body.substr(0, space));
  *taken = -1;
  if (!count.empty() && count.size() < 19 &&
      count.find_first_not_of("0123456789") == std::string::npos)
    *taken = std::stoll(count);
  *why = "closed by the worker: " +
         std::string(space == std::string_view::npos ? "(no reason given)"
                                                     : body.substr(space + 1, 512));
}

}  // namespace

CallLinkServer::CallLinkServer(const std::string& ip, std::size_t max_frame,
                               std::size_t max_links, std::string where, const CurveKeys& keys,
                               bool unix_links)
    : links_(ip, max_frame, max_links, std::move(where), keys, "call link", unix_links),
      epoll_fd_(make_epoll()) {
  links_.farewell(std::string(kCallLinkFarewell));
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

std::uint64_t CallLinkClient::begin(const std::string& address, const std::string& server_key,
                                    int timeout_ms, std::string* why) {
  auto link = std::make_unique<Link>(max_frame_);
  if (secured_ && !raw_key(server_key, &link->server)) {
    *why = "the worker's address carries no CURVE key";
    return 0;
  }
  link->fd = open_link(address, why);
  if (link->fd < 0) return 0;
  link->unix_domain = link_is_unix(link->fd);
  link->deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  std::uint64_t id = next_id_++;
  if (!watch(id, *link, EPOLL_CTL_ADD, EPOLLOUT)) {  // writable once connected
    *why = std::string("epoll: ") + std::strerror(errno);
    ::close(link->fd);
    return 0;
  }
  links_.emplace(id, std::move(link));
  ++opening_;
  return id;
}

bool CallLinkClient::watch(std::uint64_t id, const Link& link, int op, std::uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = id;
  return ::epoll_ctl(epoll_fd_, op, link.fd, &ev) == 0;
}

bool CallLinkClient::ready(std::uint64_t id) const {
  auto it = links_.find(id);
  return it != links_.end() && it->second->stage == Stage::kOpen && !it->second->finished;
}

bool CallLinkClient::advance(std::uint64_t id, Link& link, std::uint32_t events,
                             std::string* why) {
  // Handshake frames are a few hundred bytes on a fresh connection: they go out at once.
  constexpr int kWriteMs = 100;
  if (link.stage == Stage::kConnecting) {
    if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) return true;
    if (int err = link_connect_error(link.fd); err != 0) {
      *why = std::string("connect: ") + std::strerror(err);
      return false;
    }
    std::string out;
    if (secured_) {
      link.handshake = std::make_unique<LinkClientHandshake>(public_, secret_, link.server);
      std::string hello = link.handshake->hello();
      if (hello.empty()) {
        *why = "the worker's server key is degenerate";
        return false;
      }
      append_frame(&out, hello);
      link.reader.set_max_frame(kHandshakeFrameMax);
      link.stage = Stage::kWelcome;
    } else {
      // A plain link is ready once the worker answers its probe (a connection in the
      // listen backlog is not one the worker accepted).
      append_frame(&out, kCallLinkProbe);
      link.stage = Stage::kProbe;
    }
    if (!write_all(link.fd, out, kWriteMs)) {
      *why = secured_ ? "handshake: HELLO not written" : "the probe was not written";
      return false;
    }
    if (!watch(id, link, EPOLL_CTL_MOD, EPOLLIN)) {
      *why = std::string("epoll: ") + std::strerror(errno);
      return false;
    }
    return true;
  }
  ReadEnd end = read_available(link.fd, &link.reader, kHandshakeFrameMax * 4);
  std::string_view frame;
  while (link.stage != Stage::kOpen) {
    auto next = link.reader.next(&frame);
    if (next == LinkReader::Next::kNeedMore) break;
    if (next == LinkReader::Next::kTooLarge) {
      *why = "handshake: a frame above the limit";
      return false;
    }
    if (link.stage == Stage::kProbe) {
      if (frame != kCallLinkProbe) {
        *why = "the worker did not answer the link's probe";
        return false;
      }
      link.stage = Stage::kOpen;
    } else if (link.stage == Stage::kWelcome) {
      std::string initiate, out;
      if (!link.handshake->on_welcome(frame, &initiate, why)) {
        *why = "handshake: " + *why;
        return false;
      }
      append_frame(&out, initiate);
      if (!write_all(link.fd, out, kWriteMs)) {
        *why = "handshake: INITIATE not written";
        return false;
      }
      link.stage = Stage::kReady;
    } else {
      link.cipher = std::make_unique<LinkCipher>();
      if (!link.handshake->on_ready(frame, link.cipher.get(), why)) {
        *why = "handshake: " + *why;
        return false;
      }
      link.handshake.reset();
      link.reader.set_max_frame(max_frame_ + kSealOverhead);
      link.stage = Stage::kOpen;
    }
  }
  if (link.stage != Stage::kOpen && end != ReadEnd::kOpen) {
    *why = end == ReadEnd::kClosed ? "closed by the worker before the link opened"
                                   : std::string("read: ") + std::strerror(errno);
    return false;
  }
  return true;
}

bool CallLinkClient::send(std::uint64_t id, std::string_view payload, int timeout_ms) {
  auto it = links_.find(id);
  if (it == links_.end() || it->second->finished) return false;
  Link& link = *it->second;
  if (link.stage != Stage::kOpen) return false;  // still opening: the caller goes another way
  link.out.clear();
  if (link.cipher) link.cipher->seal(payload, &link.out);
  else append_frame(&link.out, payload);
  if (write_all(link.fd, link.out, timeout_ms)) return true;
  finish(id);  // a partial frame is never served: the worker closes the link at its end
  return false;
}

std::size_t CallLinkClient::unix_links() const {
  std::size_t n = 0;
  for (const auto& [id, link] : links_) n += link->unix_domain ? 1 : 0;
  return n;
}

void CallLinkClient::finish(std::uint64_t id) {
  auto it = links_.find(id);
  if (it == links_.end() || it->second->finished) return;
  it->second->finished = true;
  ::shutdown(it->second->fd, SHUT_WR);
}

bool CallLinkClient::watch(int fd) {
  if (fd == watched_) return true;
  if (watched_ >= 0) ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, watched_, nullptr);
  watched_ = -1;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 0;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) return false;
  watched_ = fd;
  return true;
}

int CallLinkClient::ready(epoll_event* events, int timeout_ms) const {
  int n;
  do n = ::epoll_wait(epoll_fd_, events, kMaxEvents, timeout_ms);
  while (n < 0 && errno == EINTR);
  return n < 0 ? 0 : n;
}

bool CallLinkClient::take(const epoll_event* events, int n, Frames* frames, Broken* broken,
                          std::vector<std::uint64_t>* opened) {
  bool watched = false;
  for (int i = 0; i < n; ++i) {
    std::uint64_t id = events[i].data.u64;
    if (id == 0) {  // the watched descriptor
      watched = true;
      continue;
    }
    auto it = links_.find(id);
    if (it == links_.end()) continue;
    Link& link = *it->second;
    std::string why;
    if (link.stage != Stage::kOpen) {
      if (!advance(id, link, events[i].events, &why)) {
        broken->emplace_back(id, why, -1);
        close(id);
      } else if (link.stage == Stage::kOpen) {
        --opening_;
        opened->push_back(id);
      }
      continue;  // a worker sends nothing on a link before a call came on it
    }
    ReadEnd end = read_available(link.fd, &link.reader, 1u << 20);
    std::string_view frame;
    std::int64_t taken = -1;
    while (why.empty()) {
      auto next = link.reader.next(&frame);
      if (next == LinkReader::Next::kNeedMore) break;
      if (next == LinkReader::Next::kTooLarge) {
        why = "a frame of " + std::to_string(link.reader.declared()) + " bytes, above the limit";
        break;
      }
      if (link.cipher) {
        if (link.cipher->open(frame, &plain_) != LinkCipher::Open::kOk) {
          why = "a frame that does not authenticate (tampered, replayed or forged)";
          break;
        }
        frame = plain_;
      }
      if (frame.substr(0, kCallLinkFarewell.size()) == kCallLinkFarewell) {
        farewell(frame.substr(kCallLinkFarewell.size()), &taken, &why);
        if (!link.cipher && taken > 0) --taken;  // the probe was a frame too
        break;
      }
      frames->emplace_back(id, std::string(frame));
    }
    if (why.empty() && end != ReadEnd::kOpen)
      why = end == ReadEnd::kClosed ? "closed by the worker"
                                    : std::string("read: ") + std::strerror(errno);
    if (!why.empty()) {
      broken->emplace_back(id, why, taken);
      close(id);
    }
  }
  if (opening_ == 0) return watched;
  // an opening not done within its deadline is given up (the caller tries again later)
  auto now = std::chrono::steady_clock::now();
  std::vector<std::uint64_t> late;
  for (const auto& [id, link] : links_)
    if (link->stage != Stage::kOpen && now >= link->deadline) late.push_back(id);
  for (std::uint64_t id : late) {
    broken->emplace_back(id, "the link was not open within its deadline (the worker did not "
                             "answer the connect or the handshake)", -1);
    close(id);
  }
  return watched;
}

void CallLinkClient::close(std::uint64_t id) {
  auto it = links_.find(id);
  if (it == links_.end()) return;
  if (it->second->stage != Stage::kOpen) --opening_;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, it->second->fd, nullptr);
  ::close(it->second->fd);
  links_.erase(it);
}

}  // namespace anna
