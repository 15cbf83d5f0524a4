// The kernel's ZAP handler. See zap.hpp for the contract.
#include "zap.hpp"

#include <zmq.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "curve.hpp"
#include "log.hpp"

namespace anna {

namespace {

static_assert(ZapHandler::kMonitorEvents ==
                  (ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL),
              "zap.hpp names the events by value");

constexpr std::size_t kMaxZapFrames = 16;   // RFC 27 requests have 6 + credentials frames
constexpr std::size_t kMaxRateLimitEntries = 1024;

// Reads one multipart message, keeping at most `keep` frames (the rest are read and dropped,
// so the socket is never left in the middle of a message). False when nothing could be read.
bool recv_frames(void* socket, std::vector<std::string>* frames, std::size_t keep) {
  frames->clear();
  bool more = true;
  while (more) {
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    if (zmq_msg_recv(&msg, socket, frames->empty() ? ZMQ_DONTWAIT : 0) < 0) {
      zmq_msg_close(&msg);
      return !frames->empty();
    }
    if (frames->size() < keep)
      frames->emplace_back(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
    more = zmq_msg_more(&msg) != 0;
    zmq_msg_close(&msg);
  }
  return true;
}

void send_frames(void* socket, const std::vector<std::string>& frames) {
  for (std::size_t i = 0; i < frames.size(); ++i) {
    int flags = i + 1 < frames.size() ? ZMQ_SNDMORE : 0;
    // A REP socket's reply never blocks: it goes back on the pipe the request came from.
    zmq_send(socket, frames[i].data(), frames[i].size(), flags);
  }
}

// Printable, truncated rendering of an untrusted string for log lines.
std::string printable(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size() && i < 64; ++i)
    out.push_back(s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?');
  if (s.size() > 64) out += "...";
  return out;
}

std::string handshake_failure_without_detail(std::uint32_t err) {
  switch (err) {
    case EPIPE:
    case ECONNRESET:
      return "the peer hung up during the handshake (usually a peer without CURVE)";
    case EFAULT:
      return "no ZAP handler answered";
    case ETIMEDOUT:
      return "the handshake timed out";
    default:
      return std::string("the handshake failed (") + zmq_strerror(static_cast<int>(err)) + ")";
  }
}

std::string handshake_failure(std::uint32_t code) {
  switch (code) {
    case ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
      return "a peer without CURVE (security mechanism mismatch)";
    case ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC:
      return "a CURVE handshake that does not decrypt (the peer used another server key?)";
    default: {
      char buf[64];
      std::snprintf(buf, sizeof buf, "a handshake protocol error (0x%08x)", code);
      return buf;
    }
  }
}

std::int64_t now_s() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::string zap_decision(const std::map<std::string, std::string>& admitted_raw,
                         const std::string& domain, const std::string& raw_key, std::string* why) {
  if (domain != kZapDomain && domain != kClusterDomain) {
    *why = "not a CURVE peer of this domain";
    return "";
  }
  auto it = admitted_raw.find(raw_key);
  if (it == admitted_raw.end()) {
    *why = "unknown public key";
    return "";
  }
  if (domain == kClusterDomain && it->second != kClusterRole) {
    *why = "cluster keys only";
    return "";
  }
  return it->second;
}

ZapHandler::ZapHandler(void* ctx, std::map<std::string, std::string> admitted, std::string name)
    : ctx_(ctx), name_(std::move(name)) {
  for (const auto& [key, role] : admitted) {
    std::string raw;
    if (z85_to_raw(key, &raw)) admitted_.emplace(std::move(raw), role);
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "inproc://anna-zap-stop-%p", static_cast<void*>(this));
  stop_endpoint_ = buf;
}

ZapHandler::~ZapHandler() { stop(); }

void ZapHandler::watch(const std::string& monitor_endpoint) {
  if (started_) throw std::logic_error("ZapHandler::watch after start");
  monitors_.push_back(monitor_endpoint);
}

void ZapHandler::start() {
  if (started_) throw std::runtime_error("ZapHandler::start: already started");
  int linger = 0, unlimited = 0;
  std::vector<void*> sockets;
  auto fail = [&](const std::string& what) {
    int err = zmq_errno();
    for (void* s : sockets) zmq_close(s);
    throw std::runtime_error(name_ + ": ZAP handler: " + what + ": " + zmq_strerror(err));
  };
  void* zap = zmq_socket(ctx_, ZMQ_REP);
  if (zap == nullptr) fail("zmq_socket");
  sockets.push_back(zap);
  zmq_setsockopt(zap, ZMQ_LINGER, &linger, sizeof linger);
  if (zmq_bind(zap, kEndpoint) != 0) fail(std::string("bind ") + kEndpoint);
  void* control = zmq_socket(ctx_, ZMQ_PULL);
  if (control == nullptr) fail("zmq_socket");
  sockets.push_back(control);
  zmq_setsockopt(control, ZMQ_LINGER, &linger, sizeof linger);
  if (zmq_bind(control, stop_endpoint_.c_str()) != 0) fail("bind " + stop_endpoint_);
  std::vector<void*> monitors;
  for (const auto& endpoint : monitors_) {
    void* m = zmq_socket(ctx_, ZMQ_PAIR);
    if (m == nullptr) fail("zmq_socket");
    sockets.push_back(m);
    zmq_setsockopt(m, ZMQ_LINGER, &linger, sizeof linger);
    // Unbounded: the monitored socket's I/O thread sends its events blocking, and must never
    // wait for this thread.
    zmq_setsockopt(m, ZMQ_RCVHWM, &unlimited, sizeof unlimited);
    if (zmq_connect(m, endpoint.c_str()) != 0) fail("connect " + endpoint);
    monitors.push_back(m);
  }
  // The sockets move to the handler thread; std::thread's start is the memory barrier
  // ZeroMQ asks for when a socket changes threads.
  thread_ = std::thread([this, zap, control, monitors] { run(zap, control, monitors); });
  started_ = true;
  log_info(name_ + ": ZAP handler started, " + std::to_string(admitted_.size()) +
           " admitted key(s)");
}

void ZapHandler::stop() {
  if (!started_ || !thread_.joinable()) return;
  void* s = zmq_socket(ctx_, ZMQ_PUSH);
  bool sent = false;
  if (s != nullptr) {
    int linger = 1000;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    // The endpoint is bound, so the inproc pipe exists as soon as connect returns.
    sent = zmq_connect(s, stop_endpoint_.c_str()) == 0 && zmq_send(s, "", 0, ZMQ_DONTWAIT) == 0;
    zmq_close(s);
  }
  if (!sent) log_error(name_ + ": cannot signal the ZAP handler to stop: " + zmq_strerror(zmq_errno()));
  thread_.join();
}

void ZapHandler::run(void* zap, void* control, std::vector<void*> monitors) {
  std::vector<zmq_pollitem_t> items;
  items.push_back({control, 0, ZMQ_POLLIN, 0});
  items.push_back({zap, 0, ZMQ_POLLIN, 0});
  for (void* m : monitors) items.push_back({m, 0, ZMQ_POLLIN, 0});
  std::vector<std::string> frames;
  bool running = true;
  while (running) {
    int rc = zmq_poll(items.data(), static_cast<int>(items.size()), -1);
    if (rc < 0) {
      if (zmq_errno() == ETERM) break;
      if (zmq_errno() != EINTR) log_error(name_ + ": ZAP handler poll: " + zmq_strerror(zmq_errno()));
      continue;
    }
    if (items[0].revents & ZMQ_POLLIN) break;
    if (items[1].revents & ZMQ_POLLIN) {
      // Answer every waiting request (REP: one at a time, each answered before the next).
      while (recv_frames(zap, &frames, kMaxZapFrames)) send_frames(zap, answer(frames));
    }
    for (std::size_t i = 2; i < items.size(); ++i) {
      if (!(items[i].revents & ZMQ_POLLIN)) continue;
      while (recv_frames(items[i].socket, &frames, 2)) on_monitor_event(frames);
    }
  }
  zmq_close(zap);
  zmq_close(control);
  for (void* m : monitors) zmq_close(m);
}

std::vector<std::string> ZapHandler::answer(const std::vector<std::string>& request) {
  if (request.size() < 6) {
    refuse("(unknown)", "malformed", "a malformed ZAP request");
    return {"1.0", request.size() > 1 ? request[1] : "", "500", "malformed ZAP request", "", ""};
  }
  const std::string& version = request[0];
  const std::string& request_id = request[1];
  const std::string& domain = request[2];
  std::string peer = request[3].empty() ? "(local)" : printable(request[3]);
  const std::string& mechanism = request[5];
  if (version != "1.0") {
    refuse(peer, "version", "a connection from " + peer + ": unsupported ZAP version");
    return {"1.0", request_id, "500", "unsupported ZAP version", "", ""};
  }
  bool known_domain = domain == kZapDomain || domain == kClusterDomain;
  if (mechanism == "CURVE" && request.size() == 7 && request[6].size() == 32 && known_domain) {
    std::string key = raw_to_z85(request[6]), why;
    std::string role = zap_decision(admitted_, domain, request[6], &why);
    if (role.empty()) {
      if (why == "cluster keys only")
        refuse(peer, key, "a connection from " + peer + ": a " + admitted_.at(request[6]) +
                              " key on a cluster-only socket " + key);
      else
        refuse(peer, key, "a connection from " + peer + ": " + why + " " + key);
      return {version, request_id, "400", why, "", ""};
    }
    accepted_.fetch_add(1, std::memory_order_relaxed);
    log_debug(name_ + ": admitted " + role + " from " + peer);
    return {version, request_id, "200", "OK", role, ""};
  }
  refuse(peer, "mechanism " + printable(mechanism),
         "a connection from " + peer + ": mechanism " + printable(mechanism) + " in domain '" +
             printable(domain) + "'");
  return {version, request_id, "400", "not a CURVE peer of this domain", "", ""};
}

void ZapHandler::on_monitor_event(const std::vector<std::string>& event) {
  if (event.size() != 2 || event[0].size() != 6) return;
  std::uint16_t id = 0;
  std::uint32_t value = 0;
  std::memcpy(&id, event[0].data(), sizeof id);
  std::memcpy(&value, event[0].data() + sizeof id, sizeof value);
  std::string reason;
  if (id == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) reason = handshake_failure(value);
  else if (id == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) reason = handshake_failure_without_detail(value);
  else return;  // e.g. MONITOR_STOPPED
  std::string endpoint = printable(event[1]);
  refuse(endpoint, reason, "a connection on " + endpoint + ": " + reason +
                               " (ZeroMQ does not report the peer's address for this failure)");
}

void ZapHandler::refuse(const std::string& peer, const std::string& key_or_reason,
                        const std::string& what) {
  std::uint64_t n = refused_.load(std::memory_order_relaxed) + 1;  // only this thread adds
  std::int64_t now = now_s();
  auto id = std::make_pair(peer, key_or_reason);
  auto it = logged_.find(id);
  if (it == logged_.end() || now - it->second >= kLogEverySeconds) {
    if (it == logged_.end() && logged_.size() >= kMaxRateLimitEntries) logged_.clear();
    logged_[id] = now;
    log_warning(name_ + ": refused " + what + " (" + std::to_string(n) + " refused so far)");
  }
  // Counted after the log line: whoever sees the count can also see the line.
  refused_.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace anna
