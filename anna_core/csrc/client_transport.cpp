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

void ClientTransport::close() {
  if (ctx_ == nullptr) return;
  for (auto& [address, link] : links_) ::close(link->fd);
  links_.clear();
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
  if (it != links_.end()) return it->second.get();
  auto adv = advertised_.find(address);
  if (adv == advertised_.end() || links_.size() >= kMaxLinks || push_ == nullptr) return nullptr;
  std::string target = adv->second, why, endpoint, server_key;
  advertised_.erase(adv);
  if (no_link_.count(target) != 0) return nullptr;
  // The worker's server key: the one its ZeroMQ address carries (and the transport trusts).
  if (!split_keyed_address(address, &endpoint, &server_key) || server_key.empty() != !secured_)
    return nullptr;
  int fd = connect_link(target, kLinkConnectMs, &why);
  auto link = std::make_unique<Link>(Link{fd, LinkReader(max_answer_bytes_), 0, {}, nullptr});
  if (fd >= 0 && secured_) {
    link->cipher = std::make_unique<LinkCipher>();
    if (!secure(fd, &link->reader, server_key, link->cipher.get(), &why)) {
      ::close(fd);
      fd = -1;
    }
  }
  if (fd < 0) {
    ++link_failures_;
    if (no_link_.size() >= kMaxAdvertised) no_link_.clear();
    no_link_.insert(target);
    log_info("client: no link to " + address + " (" + why + "); using ZeroMQ");
    return nullptr;
  }
  Link* raw = link.get();
  links_.emplace(address, std::move(link));
  link_targets_[address] = target;
  return raw;
}

bool ClientTransport::secure(int fd, LinkReader* reader, const std::string& server_key_z85,
                             LinkCipher* cipher, std::string* why) {
  RawKey server;
  if (!raw_key(server_key_z85, &server)) {
    *why = "the worker's server key is not a CURVE key";
    return false;
  }
  return secure_client_link(fd, reader, public_, secret_, server, kLinkHandshakeMs, cipher, why);
}

void ClientTransport::fail_link(const std::string& address) {
  auto it = links_.find(address);
  if (it == links_.end()) return;
  ++link_failures_;
  std::unique_ptr<Link> link = std::move(it->second);
  links_.erase(it);
  ::close(link->fd);
  auto target = link_targets_.find(address);
  if (target != link_targets_.end()) {
    // Refused at once (a worker at its bound closes new links): do not try that link again.
    if (link->answers == 0) {
      if (no_link_.size() >= kMaxAdvertised) no_link_.clear();
      no_link_.insert(target->second);
    }
    link_targets_.erase(target);
  }
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
  std::string link, responder, endpoint, server_key, link_host, responder_host;
  int port = 0;
  if (!find_field(payload.data(), payload.size(), kLinkAddressField, &link)) return;
  if (!find_field(payload.data(), payload.size(), kResponderField, &responder)) return;
  // Only a tcp worker address (with its server key exactly when this transport has keys),
  // and a link on that worker's own host.
  if (!split_keyed_address(responder, &endpoint, &server_key) ||
      server_key.empty() != !secured_ || !split_tcp_address(link, &link_host, &port) ||
      !split_tcp_address(endpoint, &responder_host, &port) || link_host != responder_host)
    return;
  if (links_.count(responder) != 0 || no_link_.count(link) != 0) return;
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
  std::string payload, id;
  auto take = [&](std::string&& answer) {
    if (!find_field(answer.data(), answer.size(), id_field, &id)) {
      ++malformed_;
      return;
    }
    auto it = wanted.find(id);
    if (it == wanted.end()) {
      ++stale_;
      return;
    }
    wanted.erase(it);
    out->emplace_back(std::move(id), std::move(answer));
    id.clear();
  };
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
    if (now >= deadline) return Wait::kDeadline;
    // Rounded up, so a wait never ends just before its deadline.
    auto wait = std::chrono::duration_cast<std::chrono::microseconds>(deadline - now).count();
    long ms = static_cast<long>((wait + 999) / 1000);
    items_.clear();
    polled_.clear();
    items_.push_back(zmq_pollitem_t{pull_, 0, ZMQ_POLLIN, 0});
    for (const auto& [address, link] : links_) {
      items_.push_back(zmq_pollitem_t{nullptr, link->fd, ZMQ_POLLIN, 0});
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
    for (std::size_t i = 1; i < items_.size(); ++i)
      if (items_[i].revents != 0) read_link(polled_[i - 1]);
  }
  return Wait::kDone;
}

}  // namespace anna
