// The Anna client's native transport. See client_transport.hpp for the contract.
#include "client_transport.hpp"

#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "log.hpp"

namespace anna {

bool ClientTransport::find_field(const char* data, std::size_t size, int field,
                                 std::string* value) {
  return find_proto_field(data, size, field, value);
}

ClientTransport::ClientTransport(const std::string& ip, CurveKeys keys,
                                 std::size_t max_answer_bytes, std::size_t max_sockets)
    : max_answer_bytes_(max_answer_bytes), secured_(keys.enabled()) {
  if (max_answer_bytes == 0) throw std::invalid_argument("max_answer_bytes must be > 0");
  if (max_sockets == 0) throw std::invalid_argument("max_sockets must be > 0");
  if (keys.enabled()) {
    bool cluster = false;
    for (const auto& [key, role] : keys.admitted) cluster = cluster || role == kClusterRole;
    if (!cluster) throw std::invalid_argument("authentication is on but no cluster key is admitted");
    try {
      check_curve_keys(keys);
    } catch (const std::invalid_argument& e) {
      std::string why = e.what();
      const std::string prefix = "node config: ";
      if (why.rfind(prefix, 0) == 0) why = why.substr(prefix.size());
      throw std::invalid_argument("client keys: " + why);
    }
    // Without libsodium the transport still works, over ZeroMQ alone.
    links_enabled_ = secure_links_available() && raw_key(keys.public_key, &public_) &&
                     raw_key(keys.secret_key, &secret_);
  }
  if (ip.empty() || ip.size() > 255 || ip.find_first_of(" \t\n/:#") != std::string::npos)
    throw std::invalid_argument("not an IP address to bind on: '" + ip.substr(0, 64) + "'");
  ctx_ = zmq_ctx_new();
  if (ctx_ == nullptr) throw std::runtime_error(std::string("zmq_ctx_new: ") + zmq_strerror(errno));
  try {
    if (keys.enabled()) {
      // The client's answer socket admits only the cluster's key (runtime/auth.py's
      // bind_pull(auth=...) with its default audience).
      std::map<std::string, std::string> cluster;
      for (const auto& [key, role] : keys.admitted)
        if (role == kClusterRole) cluster.emplace(key, role);
      zap_ = std::make_unique<ZapHandler>(ctx_, cluster, "client");
      zap_->start();
    }
    pull_ = zmq_socket(ctx_, ZMQ_PULL);
    if (pull_ == nullptr) throw std::runtime_error(std::string("zmq_socket: ") + zmq_strerror(errno));
    int hwm = kRcvHwm, linger = 0;
    zmq_setsockopt(pull_, ZMQ_RCVHWM, &hwm, sizeof hwm);
    zmq_setsockopt(pull_, ZMQ_LINGER, &linger, sizeof linger);
    std::int64_t max_frame = static_cast<std::int64_t>(kMaxFrameBytes);
    zmq_setsockopt(pull_, ZMQ_MAXMSGSIZE, &max_frame, sizeof max_frame);
    if (keys.enabled()) {
      std::string why;
      if (!make_curve_server(pull_, keys, kClusterDomain, &why)) throw std::runtime_error(why);
    }
    std::string endpoint = "tcp://" + ip + ":*";
    if (zmq_bind(pull_, endpoint.c_str()) != 0)
      throw std::runtime_error("bind " + endpoint + ": " + zmq_strerror(errno));
    char buf[256];
    std::size_t len = sizeof buf;
    if (zmq_getsockopt(pull_, ZMQ_LAST_ENDPOINT, buf, &len) != 0)
      throw std::runtime_error(std::string("ZMQ_LAST_ENDPOINT: ") + zmq_strerror(errno));
    address_.assign(buf, strnlen(buf, len));
    const std::string wildcard = "tcp://0.0.0.0:";
    if (address_.rfind(wildcard, 0) == 0) address_ = "tcp://127.0.0.1:" + address_.substr(wildcard.size());
    if (keys.enabled()) address_ = keyed_address(address_, keys.public_key);
    std::size_t fd_size = sizeof pull_fd_;
    if (zmq_getsockopt(pull_, ZMQ_FD, &pull_fd_, &fd_size) != 0) pull_fd_ = -1;
    push_ = std::make_unique<PushCache>(ctx_, std::unordered_map<std::string, std::string>{},
                                        max_sockets, keys, /*linger_ms=*/0);
  } catch (...) {
    close();
    throw;
  }
}

ClientTransport::~ClientTransport() {
  close();
  std::fill(secret_.begin(), secret_.end(), 0);
}

void ClientTransport::keep_late(const std::string& id) {
  if (late_ids_.size() >= kMaxLate) late_ids_.pop_front();
  late_ids_.push_back(id);
}

void ClientTransport::close() {
  if (ctx_ == nullptr) return;
  for (auto& [address, link] : links_) ::close(link->fd);
  links_.clear();
  setting_up_ = 0;
  link_targets_.clear();
  push_.reset();
  if (pull_ != nullptr) {
    zmq_close(pull_);
    pull_ = nullptr;
  }
  if (zap_) zap_->stop();
  zmq_ctx_term(ctx_);
  ctx_ = nullptr;
  zap_.reset();
}

namespace {

// The request id of a plain link's probe: an empty GET, answered on the link.
constexpr char kLinkProbeId[] = "anna-link-probe";
constexpr int kResponseAddressField = 3;  // KeyRequest.response_address

std::string link_probe(const std::string& reply_to) {
  std::string probe("\x08\x01", 2);  // KeyRequest.type = GET, no tuples
  append_proto_field(&probe, kResponseAddressField, reply_to);
  append_proto_field(&probe, ClientTransport::kRequestIdField, kLinkProbeId);
  std::string frame;
  append_frame(&frame, probe);
  return frame;
}

}  // namespace

bool ClientTransport::send(const std::string& address, const std::string& kind,
                           const std::string& payload) {
  if (ctx_ == nullptr) return false;
  if (kind.empty() && links_enabled_ && payload.size() < (1u << 31)) {
    if (Link* link = link_for(address)) {
      std::string frame;
      frame.reserve(kLinkHeaderBytes + kSealOverhead + payload.size());
      if (link->cipher) link->cipher->seal(payload, &frame);
      else append_frame(&frame, payload);
      if (write_all(link->fd, frame, kLinkWriteMs)) {
        ++link_requests_;
        if (link->unanswered.size() < kMaxLinkPending) {
          std::string id;
          find_field(payload.data(), payload.size(), kRequestIdField, &id);
          link->unanswered.emplace_back(std::move(id), payload);
        }
        return true;
      }
      // A partial frame is never served: the worker closes the link at its end.
      log_info("client: link to " + address + " failed on write; using ZeroMQ");
      fail_link(address);
    }
  }
  return push_->send(address, kind, payload);
}

ClientTransport::Link* ClientTransport::link_for(const std::string& address) {
  auto it = links_.find(address);
  if (it != links_.end()) {
    Link* link = it->second.get();
    if (link->state == Link::State::kReady) return link;
    advance_link(address, 0);  // only its deadline: collect() advances it
    return nullptr;
  }
  start_link(address);
  return nullptr;
}

bool ClientTransport::backed_off(const std::string& target) {
  auto it = no_link_.find(target);
  return it != no_link_.end() && Clock::now() < it->second.until;
}

void ClientTransport::back_off(const std::string& target) {
  if (no_link_.size() >= kMaxAdvertised && no_link_.count(target) == 0) no_link_.clear();
  Backoff& b = no_link_[target];
  long long ms = kLinkRetryMs;
  for (int i = 0; i < b.failures && ms < kLinkRetryMaxMs; ++i) ms *= 2;
  b.until = Clock::now() + std::chrono::milliseconds(std::min<long long>(ms, kLinkRetryMaxMs));
  ++b.failures;
}

void ClientTransport::start_link(const std::string& address) {
  auto adv = advertised_.find(address);
  if (adv == advertised_.end() || links_.size() >= kMaxLinks || push_ == nullptr) return;
  std::string target = adv->second, why, endpoint, server_key;
  advertised_.erase(adv);
  if (backed_off(target)) return;
  // The worker's server key: the one its ZeroMQ address carries (and the transport trusts).
  if (!split_keyed_address(address, &endpoint, &server_key) || server_key.empty() != !secured_)
    return;
  auto link = std::make_unique<Link>(secured_ ? kHandshakeFrameMax : max_answer_bytes_);
  link->target = target;
  if (secured_ && !raw_key(server_key, &link->server)) return;
  link->fd = open_link(target, &why);
  if (link->fd < 0) {
    ++link_failures_;
    back_off(target);
    log_info("client: no link to " + address + " (" + why + "); using ZeroMQ");
    return;
  }
  link->unix_domain = link_is_unix(link->fd);
  link->deadline = Clock::now() + std::chrono::milliseconds(kLinkConnectMs);
  links_.emplace(address, std::move(link));
  link_targets_[address] = target;
  ++setting_up_;
}

std::size_t ClientTransport::links_unix() const {
  std::size_t n = 0;
  for (const auto& [address, link] : links_) n += link->unix_domain ? 1 : 0;
  return n;
}

void ClientTransport::fail_setup(const std::string& address, const std::string& why) {
  auto it = links_.find(address);
  if (it == links_.end()) return;
  ++link_failures_;
  --setting_up_;
  back_off(it->second->target);
  ::close(it->second->fd);
  log_info("client: no link to " + address + " (" + why + "); using ZeroMQ");
  links_.erase(it);
  link_targets_.erase(address);
}

void ClientTransport::advance_link(const std::string& address, short revents) {
  auto it = links_.find(address);
  if (it == links_.end()) return;
  Link& link = *it->second;
  if (link.state == Link::State::kReady) return;
  if (link.state == Link::State::kConnecting) {
    if (revents != 0) {
      int err = link_connect_error(link.fd);
      if (err != 0) return fail_setup(address, std::string("connect: ") + std::strerror(err));
      std::string first;
      if (secured_) {
        link.cipher = std::make_unique<LinkCipher>();
        link.handshake = std::make_unique<LinkClientHandshake>(public_, secret_, link.server);
        std::string hello = link.handshake->hello();
        if (hello.empty()) return fail_setup(address, "the worker's server key is degenerate");
        append_frame(&first, hello);
      } else {
        first = link_probe(address_);
      }
      // A few hundred bytes on a new connection: its socket buffer takes them at once.
      if (!write_all(link.fd, first, 0)) return fail_setup(address, "the first frame not written");
      link.state = Link::State::kHandshake;
      link.deadline = Clock::now() + std::chrono::milliseconds(kLinkHandshakeMs);
      return;
    }
  } else if (revents != 0) {
    bool closed = read_available(link.fd, &link.reader, 64u << 10) != ReadEnd::kOpen;
    std::string_view frame;
    while (link.state != Link::State::kReady) {
      auto next = link.reader.next(&frame);
      if (next == LinkReader::Next::kNeedMore) break;
      if (next == LinkReader::Next::kTooLarge)
        return fail_setup(address, "a setup frame of " + std::to_string(link.reader.declared()) +
                                       " bytes");
      std::string why, initiate;
      if (!secured_) {
        std::string id;
        if (!find_field(frame.data(), frame.size(), kAnswerIdField, &id) || id != kLinkProbeId)
          return fail_setup(address, "the worker's first answer is not the probe's");
      } else if (!link.welcomed) {
        if (!link.handshake->on_welcome(frame, &initiate, &why))
          return fail_setup(address, "handshake: " + why);
        std::string out;
        append_frame(&out, initiate);
        if (!write_all(link.fd, out, kLinkWriteMs))
          return fail_setup(address, "handshake: INITIATE not written");
        link.welcomed = true;
        continue;
      } else {
        if (!link.handshake->on_ready(frame, link.cipher.get(), &why))
          return fail_setup(address, "handshake: " + why);
        link.handshake.reset();
        link.reader.set_max_frame(max_answer_bytes_ + kSealOverhead);
      }
      link.state = Link::State::kReady;
      --setting_up_;
    }
    if (link.state == Link::State::kReady) {
      // The worker sends nothing unasked after READY or the probe's answer.
      if (closed || link.reader.buffered() != 0) fail_link(address);
      return;
    }
    if (closed) return fail_setup(address, "closed by the worker");
  }
  if (Clock::now() >= link.deadline)
    fail_setup(address, link.state == Link::State::kConnecting
                            ? "not connected within " + std::to_string(kLinkConnectMs) + " ms"
                            : "not ready within " + std::to_string(kLinkHandshakeMs) + " ms");
}

void ClientTransport::pump_setups() {
  if (setting_up_ == 0) return;
  items_.clear();
  polled_.clear();
  for (const auto& [address, link] : links_) {
    if (link->state == Link::State::kReady) continue;
    short events = link->state == Link::State::kConnecting ? ZMQ_POLLOUT : ZMQ_POLLIN;
    items_.push_back(zmq_pollitem_t{nullptr, link->fd, events, 0});
    polled_.push_back(address);
  }
  if (zmq_poll(items_.data(), static_cast<int>(items_.size()), 0) < 0) return;
  for (std::size_t i = 0; i < items_.size(); ++i) advance_link(polled_[i], items_[i].revents);
}

void ClientTransport::fail_link(const std::string& address) {
  auto it = links_.find(address);
  if (it == links_.end()) return;
  ++link_failures_;
  std::unique_ptr<Link> link = std::move(it->second);
  links_.erase(it);
  ::close(link->fd);
  link_targets_.erase(address);
  // Closed before its first answer (a worker at its bound of links closes new ones at once):
  // keep off that link for a while.
  if (link->answers == 0) back_off(link->target);
  for (auto& [id, payload] : link->unanswered) {
    if (push_->send(address, "", payload)) ++link_resent_;
  }
}

void ClientTransport::read_link(const std::string& address) {
  auto it = links_.find(address);
  if (it == links_.end()) return;
  Link& link = *it->second;
  // a bounded read per turn; the next poll sees the rest
  bool closed = read_available(link.fd, &link.reader, 1u << 20) != ReadEnd::kOpen;
  std::string_view frame;
  while (true) {
    auto next = link.reader.next(&frame);
    if (next == LinkReader::Next::kNeedMore) break;
    if (next == LinkReader::Next::kTooLarge) {
      // Dropped as an oversize ZeroMQ answer is; the stream cannot be followed past it.
      ++oversize_;
      last_oversize_ = link.reader.declared();
      closed = true;
      break;
    }
    if (link.cipher) {
      if (link.cipher->open(frame, &opened_) != LinkCipher::Open::kOk) {
        log_warning("client: an answer on the link to " + address +
                    " does not authenticate; closing the link");
        closed = true;
        break;
      }
      frame = opened_;
    }
    ++link.answers;
    std::string id;
    if (find_field(frame.data(), frame.size(), kAnswerIdField, &id)) {
      // Answers come in order as a rule: the front matches at once.
      for (auto u = link.unanswered.begin(); u != link.unanswered.end(); ++u)
        if (u->first == id) {
          link.unanswered.erase(u);
          break;
        }
    }
    link_answers_.emplace_back(frame);
  }
  if (closed) fail_link(address);
}

void ClientTransport::learn_link(const std::string& payload) {
  std::string link, responder, endpoint, server_key, link_host, responder_host, unix_path;
  int port = 0;
  if (!find_field(payload.data(), payload.size(), kLinkAddressField, &link)) return;
  if (!find_field(payload.data(), payload.size(), kResponderField, &responder)) return;
  // Only a tcp worker address (with its server key exactly when this transport has keys),
  // and a link on that worker's own host.
  if (!split_keyed_address(responder, &endpoint, &server_key) ||
      server_key.empty() != !secured_ || !split_link_address(link, &link_host, &port, &unix_path) ||
      !split_tcp_address(endpoint, &responder_host, &port) || link_host != responder_host)
    return;
  if (links_.count(responder) != 0 || backed_off(link)) return;
  if (advertised_.size() >= kMaxAdvertised) advertised_.clear();
  advertised_[responder] = link;
}

bool ClientTransport::recv_one(std::string* payload, bool* dropped) {
  payload->clear();
  *dropped = false;
  std::size_t total = 0;
  bool first = true, more = true;
  while (more) {
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    // The first frame only if one is waiting; the rest of a message is already here.
    if (zmq_msg_recv(&msg, pull_, first ? ZMQ_DONTWAIT : 0) < 0) {
      zmq_msg_close(&msg);
      if (first) return false;
      *dropped = true;  // cannot happen with ZeroMQ's atomic multipart delivery
      return true;
    }
    first = false;
    std::size_t n = zmq_msg_size(&msg);
    total += n;
    if (total > max_answer_bytes_) {
      if (!*dropped) payload->clear();
      *dropped = true;
    } else if (!*dropped) {
      payload->append(static_cast<const char*>(zmq_msg_data(&msg)), n);
    }
    more = zmq_msg_more(&msg) != 0;
    zmq_msg_close(&msg);
  }
  if (*dropped) {
    ++oversize_;
    last_oversize_ = total;
    payload->clear();
  }
  return true;
}

ClientTransport::Wait ClientTransport::collect(
    const std::vector<std::string>& ids, int id_field, Clock::time_point deadline,
    std::size_t enough, std::vector<std::pair<std::string, std::string>>* out) {
  if (ctx_ == nullptr) return Wait::kClosed;
  std::unordered_set<std::string> wanted(ids.begin(), ids.end());
  for (const auto& [id, payload] : *out) wanted.erase(id);
  enough = std::min(enough, ids.size());
  std::string payload, id, late_id;
  auto take = [&](std::string&& answer) {
    if (!find_field(answer.data(), answer.size(), id_field, &id)) {
      ++malformed_;
      return;
    }
    auto it = wanted.find(id);
    if (it == wanted.end()) {
      // An answer the caller may still wait for (keep_late) is kept for that wait.
      if (!late_ids_.empty() && late_bytes_ + answer.size() <= kMaxLateBytes &&
          find_field(answer.data(), answer.size(), kAnswerIdField, &late_id) &&
          std::find(late_ids_.begin(), late_ids_.end(), late_id) != late_ids_.end()) {
        if (late_answers_.size() >= kMaxLate) {
          late_bytes_ -= late_answers_.front().size();
          late_answers_.pop_front();
        }
        late_bytes_ += answer.size();
        late_answers_.push_back(std::move(answer));
        return;
      }
      ++stale_;
      return;
    }
    wanted.erase(it);
    out->emplace_back(std::move(id), std::move(answer));
    id.clear();
  };
  for (auto a = late_answers_.begin(); a != late_answers_.end() && !wanted.empty();) {
    if (!find_field(a->data(), a->size(), id_field, &id) || wanted.count(id) == 0) {
      ++a;
      continue;
    }
    auto named = std::find(late_ids_.begin(), late_ids_.end(), id);
    if (named != late_ids_.end()) late_ids_.erase(named);
    late_bytes_ -= a->size();
    wanted.erase(id);
    out->emplace_back(std::move(id), std::move(*a));
    a = late_answers_.erase(a);
  }
  while (out->size() < enough) {
    if (link_answers_taken_ < link_answers_.size()) {
      ++link_answers_n_;
      take(std::move(link_answers_[link_answers_taken_++]));
      if (link_answers_taken_ == link_answers_.size()) {
        link_answers_.clear();
        link_answers_taken_ = 0;
      }
      continue;
    }
    bool dropped;
    if (recv_one(&payload, &dropped)) {
      if (dropped) continue;
      if (links_enabled_) learn_link(payload);
      take(std::move(payload));
      payload.clear();
      continue;
    }
    auto now = Clock::now();
    if (now >= deadline) {
      pump_setups();
      return Wait::kDeadline;
    }
    // Until the deadline, or the first deadline of a link being set up. Rounded up, so a
    // wait never ends just before its deadline.
    auto until = deadline;
    for (const auto& [address, link] : links_)
      if (link->state != Link::State::kReady) until = std::min(until, link->deadline);
    auto wait = std::chrono::duration_cast<std::chrono::microseconds>(until - now).count();
    long ms = static_cast<long>((std::max<long long>(wait, 0) + 999) / 1000);
    items_.clear();
    polled_.clear();
    // The answer socket through its ZMQ_FD (recv_one found it empty just now, so a message
    // arriving makes that descriptor readable): zmq_poll on the socket itself would process
    // its mailbox before and after the wait, two more syscalls a request.
    if (pull_fd_ >= 0) items_.push_back(zmq_pollitem_t{nullptr, pull_fd_, ZMQ_POLLIN, 0});
    else items_.push_back(zmq_pollitem_t{pull_, 0, ZMQ_POLLIN, 0});
    for (const auto& [address, link] : links_) {
      short events = link->state == Link::State::kConnecting ? ZMQ_POLLOUT : ZMQ_POLLIN;
      items_.push_back(zmq_pollitem_t{nullptr, link->fd, events, 0});
      polled_.push_back(address);
    }
    int n = zmq_poll(items_.data(), static_cast<int>(items_.size()),
                     ms > 0x7fffffff ? 0x7fffffff : ms);
    if (n < 0) {
      if (errno == EINTR) return Wait::kInterrupted;
      if (errno == ETERM) return Wait::kClosed;
      log_warning(std::string("client: poll failed: ") + zmq_strerror(errno));
      return Wait::kDeadline;
    }
    // Copied: reading or advancing a link may close it (and a setup's poll reuses items_).
    events_.clear();
    for (std::size_t i = 1; i < items_.size(); ++i)
      events_.emplace_back(polled_[i - 1], items_[i].revents);
    for (const auto& [address, revents] : events_) {
      auto it = links_.find(address);
      if (it == links_.end()) continue;
      if (it->second->state == Link::State::kReady) {
        if (revents != 0) read_link(address);
      } else {
        advance_link(address, revents);  // and its deadline
      }
    }
  }
  pump_setups();
  return Wait::kDone;
}

}  // namespace anna
