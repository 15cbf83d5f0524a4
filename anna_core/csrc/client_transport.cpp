// The Anna client's native transport. See client_transport.hpp for the contract.
#include "client_transport.hpp"

#include <zmq.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "log.hpp"

namespace anna {

namespace {

// A protobuf varint at data[*at..size); false when it runs past the end or past 10 bytes.
bool read_varint(const unsigned char* data, std::size_t size, std::size_t* at,
                 std::uint64_t* value) {
  std::uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (*at >= size) return false;
    unsigned char b = data[(*at)++];
    v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) {
      *value = v;
      return true;
    }
  }
  return false;
}

}  // namespace

bool ClientTransport::find_field(const char* data, std::size_t size, int field,
                                 std::string* value) {
  const auto* p = reinterpret_cast<const unsigned char*>(data);
  std::size_t at = 0;
  bool found = false;
  while (at < size) {
    std::uint64_t tag;
    if (!read_varint(p, size, &at, &tag)) return false;
    std::uint64_t number = tag >> 3;
    if (number == 0) return false;
    switch (tag & 7) {
      case 0: {
        std::uint64_t ignored;
        if (!read_varint(p, size, &at, &ignored)) return false;
        break;
      }
      case 1:
        if (size - at < 8) return false;
        at += 8;
        break;
      case 5:
        if (size - at < 4) return false;
        at += 4;
        break;
      case 2: {
        std::uint64_t length;
        if (!read_varint(p, size, &at, &length) || length > size - at) return false;
        if (number == static_cast<std::uint64_t>(field)) {
          value->assign(data + at, static_cast<std::size_t>(length));
          found = true;
        }
        at += static_cast<std::size_t>(length);
        break;
      }
      default:  // groups (3, 4) are not used by the platform's schema; 6, 7 do not exist
        return false;
    }
  }
  return found;
}

ClientTransport::ClientTransport(const std::string& ip, CurveKeys keys,
                                 std::size_t max_answer_bytes, std::size_t max_sockets)
    : max_answer_bytes_(max_answer_bytes) {
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

ClientTransport::~ClientTransport() { close(); }

void ClientTransport::close() {
  if (ctx_ == nullptr) return;
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
  return push_->send(address, kind, payload);
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
  while (out->size() < enough) {
    bool dropped;
    if (recv_one(&payload, &dropped)) {
      if (dropped) continue;
      if (!find_field(payload.data(), payload.size(), id_field, &id)) {
        ++malformed_;
        continue;
      }
      auto it = wanted.find(id);
      if (it == wanted.end()) {
        ++stale_;
        continue;
      }
      wanted.erase(it);
      out->emplace_back(std::move(id), std::move(payload));
      id.clear();
      payload.clear();
      continue;
    }
    auto now = Clock::now();
    if (now >= deadline) return Wait::kDeadline;
    // Rounded up, so a wait never ends just before its deadline.
    auto wait = std::chrono::duration_cast<std::chrono::microseconds>(deadline - now).count();
    long ms = static_cast<long>((wait + 999) / 1000);
    zmq_pollitem_t item{pull_, 0, ZMQ_POLLIN, 0};
    int n = zmq_poll(&item, 1, ms > 0x7fffffff ? 0x7fffffff : ms);
    if (n < 0) {
      if (errno == EINTR) return Wait::kInterrupted;
      if (errno == ETERM) return Wait::kClosed;
      log_warning(std::string("client: poll failed: ") + zmq_strerror(errno));
      return Wait::kDeadline;
    }
  }
  return Wait::kDone;
}

}  // namespace anna
