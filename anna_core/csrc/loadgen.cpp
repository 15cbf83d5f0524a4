// Native closed-loop load generators: one for Anna (ZMQ + protobuf), one for Redis (RESP over
// TCP), driven by the same workload so the server-capacity comparison is fair.
//
// Contract: Workload describes `clients` closed-loop clients (each with exactly one request
// outstanding), keys "k<index>" drawn Zipf(zipf) over `keys`, `read_ratio` GETs and the rest
// PUT/SET of `value_size` bytes. Both generators first write every key once (prefill), then run
// `warmup_s` unmeasured and `duration_s` measured, then stop issuing and drain outstanding
// requests for at most `drain_s`. They return throughput and latency percentiles in
// microseconds. Every wait is bounded; an unreachable server yields an error, never a hang.
// Both run in one thread on purpose: the generator's own cost is then the same on both sides.
// Authentication (Anna only, optional): given a client's credentials (runtime.auth.Credentials:
// its key pair and the cluster key it admits), load_anna's response socket is a CURVE server
// of domain "cloudburst.cluster" with its own ZAP handler (zap.hpp) admitting only cluster
// keys, its response address carries its key, and it pushes to keyed worker addresses
// ("#k=<hex>") as a CURVE client. An address whose authentication does not match (a keyed
// one without credentials, a keyless one with them) is an error before any load is sent.
// TLS (Redis only, optional): given a CA file, every Redis connection is TLS (OpenSSL, 1.2 or
// later) verifying the server's certificate against that CA and the host as an IP address;
// with a certificate and key file too, the client presents them (mutual TLS, as a Redis
// started with --tls-auth-clients yes requires). The handshake has the connection's 5 s
// deadline; a failed one is an error naming the reason, before any load is sent.
// Client links (Anna; link.hpp): with `links`, a worker's answer during the prefill that
// advertises its link (KeyResponse.link_address) moves the generator's requests to that
// worker onto one TCP connection to it, as anna_core.Client does; the answers come back on
// it. With credentials the link is secured as anna_core.Client's (secure_link.hpp: the key
// handshake with the worker's server key, then every frame sealed). A link that cannot be
// connected or fails is an error (a benchmark must not silently measure another path).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <memory>
#include <unordered_map>
#include <vector>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "anna.pb.h"
#include "curve.hpp"
#include "link.hpp"
#include "zap.hpp"
#include "zipf.hpp"

namespace py = pybind11;

namespace anna {
namespace {

using Clock = std::chrono::steady_clock;

struct Workload {
  int clients = 50;
  double duration_s = 5.0;
  double warmup_s = 1.0;
  double drain_s = 2.0;
  std::size_t keys = 100000;
  double zipf = 1.0;
  double read_ratio = 0.5;
  std::size_t value_size = 256;
  std::uint64_t seed = 1;
};

std::string key_name(std::size_t index) { return "k" + std::to_string(index); }

struct LoadResult {
  std::string system;
  std::size_t ops = 0;
  std::size_t errors = 0;
  double throughput = 0;
  double p50_us = 0;
  double p99_us = 0;
  int clients = 0;
  std::size_t links = 0;  // load_anna: workers served over client links (link.hpp)

  py::dict to_dict() const {
    py::dict out;
    out["system"] = system;
    out["ops"] = ops;
    out["errors"] = errors;
    out["throughput"] = throughput;
    out["p50_us"] = p50_us;
    out["p99_us"] = p99_us;
    out["clients"] = clients;
    out["links"] = links;
    return out;
  }
};

// Measurement shared by both generators.
class Recorder {
 public:
  explicit Recorder(const Workload& w) : w_(w) {}

  void start(Clock::time_point now) {
    measure_from_ = now + to_duration(w_.warmup_s);
    measure_until_ = measure_from_ + to_duration(w_.duration_s);
  }
  bool issuing(Clock::time_point now) const { return now < measure_until_; }
  void record(Clock::time_point sent, Clock::time_point done, bool is_error) {
    if (sent < measure_from_ || done > measure_until_) return;
    latencies_us_.push_back(std::chrono::duration<double, std::micro>(done - sent).count());
    if (is_error) ++errors_;
  }

  LoadResult result(const char* system) {
    std::sort(latencies_us_.begin(), latencies_us_.end());
    auto pct = [&](double p) -> double {
      if (latencies_us_.empty()) return 0.0;
      std::size_t i = static_cast<std::size_t>(p * (latencies_us_.size() - 1));
      return latencies_us_[i];
    };
    LoadResult out;
    out.system = system;
    out.ops = latencies_us_.size();
    out.errors = errors_;
    out.throughput = latencies_us_.size() / w_.duration_s;
    out.p50_us = pct(0.50);
    out.p99_us = pct(0.99);
    out.clients = w_.clients;
    return out;
  }

  static Clock::duration to_duration(double s) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  }

 private:
  const Workload& w_;
  Clock::time_point measure_from_, measure_until_;
  std::vector<double> latencies_us_;
  std::size_t errors_ = 0;
};

// ---------------------------------------------------------------- Anna

class AnnaLoad {
  struct LinkConn {
    int fd;
    std::unique_ptr<LinkReader> reader;
    std::string out;  // requests not written yet
    std::unique_ptr<LinkCipher> cipher;  // secured links (with credentials)
  };

 public:
  AnnaLoad(const Workload& w, const std::vector<std::string>& key_addresses, CurveKeys keys,
           bool links)
      : w_(w), key_addresses_(key_addresses), zipf_(w.keys, w.zipf, w.seed), recorder_(w),
        value_(w.value_size, 'x'), keys_(std::move(keys)), use_links_(links) {
    if (key_addresses_.size() != w.keys)
      throw std::invalid_argument("load_anna: key_addresses must have one address per key");
    for (const auto& address : key_addresses_) check_address(address);
    ctx_ = zmq_ctx_new();
    try {
      open_response_socket();
    } catch (...) {
      close_all();
      throw;
    }
  }

  ~AnnaLoad() { close_all(); }

  LoadResult run() {
    prefill();
    open_links();
    recorder_.start(Clock::now());
    sent_at_.assign(w_.clients, Clock::time_point{});
    for (int c = 0; c < w_.clients; ++c) issue(c, pick_key(), !is_read());
    int outstanding = w_.clients;
    Clock::time_point drain_deadline = Clock::time_point::max();
    while (outstanding > 0) {
      auto now = Clock::now();
      if (!recorder_.issuing(now) && drain_deadline == Clock::time_point::max())
        drain_deadline = now + Recorder::to_duration(w_.drain_s);
      if (now > drain_deadline) break;
      KeyResponse response;
      if (!receive(&response, 100)) continue;
      int client = 0;
      if (!parse_client(response.request_id(), &client)) continue;
      now = Clock::now();
      bool error = response.error() != NO_ERROR ||
                   (response.tuples_size() > 0 && response.tuples(0).error() != NO_ERROR &&
                    response.tuples(0).error() != KEY_DNE);
      recorder_.record(sent_at_[client], now, error);
      if (recorder_.issuing(now)) {
        issue(client, pick_key(), !is_read());
      } else {
        --outstanding;
      }
    }
    LoadResult result = recorder_.result("anna");
    result.links = links_.size();
    return result;
  }

 private:
  void prefill() {
    // Pipelined, `clients` writes in flight, so prefill takes a fraction of a second.
    std::size_t next = 0, done = 0;
    int in_flight = 0;
    auto deadline = Clock::now() + std::chrono::seconds(30) +
                    std::chrono::microseconds(static_cast<long>(w_.keys) * 200);
    while (done < w_.keys) {
      while (in_flight < w_.clients && next < w_.keys) {
        issue(0, next++, true);
        ++in_flight;
      }
      if (Clock::now() > deadline)
        throw std::runtime_error("load_anna: prefill timed out (is the cluster up?)");
      KeyResponse response;
      if (!receive(&response, 100)) continue;
      if (response.error() != NO_ERROR ||
          (response.tuples_size() > 0 && response.tuples(0).error() != NO_ERROR))
        throw std::runtime_error("load_anna: prefill PUT failed with error " +
                                 std::to_string(response.tuples_size() ? response.tuples(0).error()
                                                                       : response.error()));
      ++done;
      --in_flight;
    }
  }

  bool is_read() { return std::uniform_real_distribution<double>(0, 1)(zipf_.rng()) < w_.read_ratio; }
  std::size_t pick_key() { return zipf_.next(); }

  void issue(int client, std::size_t key_index, bool write) {
    KeyRequest request;
    request.set_type(write ? PUT : GET);
    request.set_response_address(response_address_);
    request.set_request_id(std::to_string(client) + ":" + std::to_string(++sequence_));
    KeyTuple* tuple = request.add_tuples();
    tuple->set_key(key_name(key_index));
    tuple->set_lattice_type(LWW);
    if (write) {
      LWWValue lww;
      lww.set_timestamp(++sequence_);
      lww.set_value(value_);
      tuple->set_payload(lww.SerializeAsString());
    }
    std::string payload = request.SerializeAsString();
    if (client >= 0 && static_cast<std::size_t>(client) < sent_at_.size())
      sent_at_[client] = Clock::now();
    if (!links_.empty()) {
      auto link = links_.find(key_addresses_[key_index]);
      if (link != links_.end()) {
        // Written when the answers at hand are all taken (receive()): one write per burst,
        // as ZeroMQ's I/O thread batches what the other path queues.
        if (link->second.cipher) link->second.cipher->seal(payload, &link->second.out);
        else append_frame(&link->second.out, payload);
        return;
      }
    }
    void* sock = push_for(key_addresses_[key_index]);
    // One frame, the kind "request" implied (node.hpp): as anna_core.Client sends requests.
    zmq_send(sock, payload.data(), payload.size(), 0);
  }

  // An address's authentication must match ours (see the contract at the top).
  void check_address(const std::string& address) const {
    std::string endpoint, key;
    if (!split_keyed_address(address, &endpoint, &key))
      throw std::invalid_argument("load_anna: malformed server key in " + address);
    if (!key.empty() && !keys_.enabled())
      throw std::invalid_argument("load_anna: " + address + " is a CURVE server; pass auth=" +
                                  "a client's credentials");
    if (key.empty() && keys_.enabled())
      throw std::invalid_argument("load_anna: " + address + " carries no server key but auth " +
                                  "is given");
  }

  void open_response_socket() {
    if (keys_.enabled()) {
      // Started before the socket binds: a CURVE server without a handler refuses everyone.
      zap_ = std::make_unique<ZapHandler>(ctx_, keys_.admitted, "load_anna");
      zap_->start();
    }
    pull_ = zmq_socket(ctx_, ZMQ_PULL);
    int hwm = 0;
    zmq_setsockopt(pull_, ZMQ_RCVHWM, &hwm, sizeof hwm);
    std::string why;
    if (keys_.enabled() && !make_curve_server(pull_, keys_, kClusterDomain, &why))
      throw std::runtime_error("load_anna: " + why);
    if (zmq_bind(pull_, "tcp://127.0.0.1:*") != 0)
      throw std::runtime_error(std::string("load_anna: bind failed: ") + zmq_strerror(errno));
    char endpoint[256];
    size_t len = sizeof endpoint;
    zmq_getsockopt(pull_, ZMQ_LAST_ENDPOINT, endpoint, &len);
    response_address_ = endpoint;
    if (keys_.enabled()) response_address_ = keyed_address(response_address_, keys_.public_key);
  }

  // Connects the links the prefill's answers advertised (see the contract at the top).
  void open_links() {
    if (!use_links_) return;
    for (const auto& [worker, address] : advertised_) {
      std::string why;
      int fd = connect_link(address, 2000, &why);
      if (fd < 0) throw std::runtime_error("load_anna: link to " + worker + ": " + why);
      LinkConn link{fd, std::make_unique<LinkReader>(std::size_t{64} << 20), {}, nullptr};
      if (keys_.enabled()) {
        std::string endpoint, server_key;
        RawKey own_public, own_secret, server;
        link.cipher = std::make_unique<LinkCipher>();
        if (!secure_links_available() || !split_keyed_address(worker, &endpoint, &server_key) ||
            !raw_key(server_key, &server) || !raw_key(keys_.public_key, &own_public) ||
            !raw_key(keys_.secret_key, &own_secret) ||
            !secure_client_link(fd, link.reader.get(), own_public, own_secret, server, 2000,
                                link.cipher.get(), &why)) {
          ::close(fd);
          throw std::runtime_error("load_anna: secured link to " + worker + ": " +
                                   (why.empty() ? std::string("bad keys") : why));
        }
      }
      links_.emplace(worker, std::move(link));
    }
    for (auto& [worker, link] : links_) link_workers_.push_back(&link);
  }

  void close_all() {
    for (auto& [worker, link] : links_) ::close(link.fd);
    links_.clear();
    int linger = 0;
    for (auto& [addr, sock] : pushes_) {
      zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof linger);
      zmq_close(sock);
    }
    pushes_.clear();
    if (pull_ != nullptr) {
      zmq_setsockopt(pull_, ZMQ_LINGER, &linger, sizeof linger);
      zmq_close(pull_);
      pull_ = nullptr;
    }
    if (zap_) zap_->stop();  // before the context ends: its sockets must be closed
    zap_.reset();
    if (ctx_ != nullptr) zmq_ctx_term(ctx_);
    ctx_ = nullptr;
  }

  void* push_for(const std::string& address) {
    auto it = pushes_.find(address);
    if (it != pushes_.end()) return it->second;
    std::string endpoint, key, why;
    split_keyed_address(address, &endpoint, &key);  // checked in the constructor
    void* sock = zmq_socket(ctx_, ZMQ_PUSH);
    int hwm = 0;
    zmq_setsockopt(sock, ZMQ_SNDHWM, &hwm, sizeof hwm);
    if (!key.empty() && !make_curve_client(sock, keys_, key, &why)) {
      zmq_close(sock);
      throw std::runtime_error("load_anna: " + why);
    }
    if (zmq_connect(sock, endpoint.c_str()) != 0) {
      zmq_close(sock);
      throw std::runtime_error("load_anna: cannot connect to " + address);
    }
    pushes_.emplace(address, sock);
    return sock;
  }

  bool receive(KeyResponse* response, int timeout_ms) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      if (frame_at_ < frames_.size()) {
        const std::string& f = frames_[frame_at_++];
        bool ok = response->ParseFromArray(f.data(), static_cast<int>(f.size()));
        if (frame_at_ == frames_.size()) frame_at_ = 0, frames_.clear();
        return ok;
      }
      zmq_msg_t msg;
      zmq_msg_init(&msg);
      if (zmq_msg_recv(&msg, pull_, ZMQ_DONTWAIT) >= 0) {
        bool ok = response->ParseFromArray(zmq_msg_data(&msg), static_cast<int>(zmq_msg_size(&msg)));
        zmq_msg_close(&msg);
        if (ok && use_links_ && !response->link_address().empty() &&
            links_.count(response->responder()) == 0)
          advertised_[response->responder()] = response->link_address();
        return ok;
      }
      zmq_msg_close(&msg);
      if (attempt == 1) return false;
      for (LinkConn* link : link_workers_) {
        if (link->out.empty()) continue;
        if (!write_all(link->fd, link->out, 5000))
          throw std::runtime_error("load_anna: a link to a worker failed on write");
        link->out.clear();
      }
      items_.clear();
      items_.push_back(zmq_pollitem_t{pull_, 0, ZMQ_POLLIN, 0});
      for (LinkConn* link : link_workers_) items_.push_back(zmq_pollitem_t{nullptr, link->fd, ZMQ_POLLIN, 0});
      if (zmq_poll(items_.data(), static_cast<int>(items_.size()), timeout_ms) <= 0) return false;
      for (std::size_t i = 1; i < items_.size(); ++i)
        if (items_[i].revents != 0) read_link(*link_workers_[i - 1]);
    }
    return false;
  }

  void read_link(LinkConn& link) {
    while (true) {
      char* into = link.reader->prepare(64u << 10);
      ssize_t n = ::recv(link.fd, into, 64u << 10, MSG_DONTWAIT);
      if (n > 0) {
        link.reader->commit(static_cast<std::size_t>(n));
        if (static_cast<std::size_t>(n) < (64u << 10)) break;
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      throw std::runtime_error("load_anna: a worker closed its link");
    }
    std::string_view frame;
    while (true) {
      auto next = link.reader->next(&frame);
      if (next == LinkReader::Next::kNeedMore) break;
      if (next == LinkReader::Next::kTooLarge) throw std::runtime_error("load_anna: an oversize answer on a link");
      if (link.cipher) {
        if (link.cipher->open(frame, &opened_) != LinkCipher::Open::kOk)
          throw std::runtime_error("load_anna: an answer on a secured link does not authenticate");
        frames_.emplace_back(opened_);
        continue;
      }
      frames_.emplace_back(frame);
    }
  }

  static bool parse_client(const std::string& request_id, int* client) {
    auto colon = request_id.find(':');
    if (colon == std::string::npos) return false;
    *client = std::atoi(request_id.substr(0, colon).c_str());
    return true;
  }

  const Workload& w_;
  const std::vector<std::string>& key_addresses_;
  ZipfSampler zipf_;
  Recorder recorder_;
  std::string value_;
  CurveKeys keys_;
  void* ctx_ = nullptr;
  std::unique_ptr<ZapHandler> zap_;
  void* pull_ = nullptr;
  std::string response_address_;
  bool use_links_;
  std::string opened_;  // the last opened answer of a secured link
  std::unordered_map<std::string, std::string> advertised_;  // worker -> link address
  std::unordered_map<std::string, LinkConn> links_;          // by worker address
  std::vector<LinkConn*> link_workers_;
  std::vector<zmq_pollitem_t> items_;
  std::vector<std::string> frames_;  // answers read from links, not yet taken
  std::size_t frame_at_ = 0;
  std::unordered_map<std::string, void*> pushes_;
  std::vector<Clock::time_point> sent_at_;
  std::uint64_t sequence_ = 0;
};

// ---------------------------------------------------------------- Redis (RESP)

// Where Redis connections get their TLS settings (none: plaintext).
struct RedisTls {
  std::string ca_file, cert_file, key_file;
  bool enabled() const { return !ca_file.empty(); }
};

std::string openssl_error() {
  unsigned long code = ERR_get_error();
  if (code == 0) return "unknown OpenSSL error";
  char buf[256];
  ERR_error_string_n(code, buf, sizeof buf);
  ERR_clear_error();
  return buf;
}

// One SSL_CTX shared by a generator's connections (owned; freed with it).
class TlsContext {
 public:
  explicit TlsContext(const RedisTls& tls) {
    if (!tls.enabled()) return;
    ctx_ = SSL_CTX_new(TLS_client_method());
    if (ctx_ == nullptr) throw std::runtime_error("load_redis: SSL_CTX_new: " + openssl_error());
    SSL_CTX_set_min_proto_version(ctx_, TLS1_2_VERSION);
    SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER, nullptr);
    if (SSL_CTX_load_verify_locations(ctx_, tls.ca_file.c_str(), nullptr) != 1)
      fail("cannot load CA file " + tls.ca_file);
    if (!tls.cert_file.empty()) {
      if (SSL_CTX_use_certificate_chain_file(ctx_, tls.cert_file.c_str()) != 1)
        fail("cannot load certificate " + tls.cert_file);
      if (SSL_CTX_use_PrivateKey_file(ctx_, tls.key_file.c_str(), SSL_FILETYPE_PEM) != 1)
        fail("cannot load key " + tls.key_file);
    }
  }
  ~TlsContext() {
    if (ctx_ != nullptr) SSL_CTX_free(ctx_);
  }
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;
  SSL_CTX* get() const { return ctx_; }

 private:
  [[noreturn]] void fail(const std::string& what) {
    std::string why = openssl_error();
    SSL_CTX_free(ctx_);
    ctx_ = nullptr;
    throw std::runtime_error("load_redis: " + what + ": " + why);
  }
  SSL_CTX* ctx_ = nullptr;
};

class RedisConnection {
 public:
  RedisConnection(const std::string& host, int port, SSL_CTX* tls) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ < 0) throw std::runtime_error("load_redis: socket() failed");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
      ::close(fd_);
      throw std::runtime_error("load_redis: bad IPv4 address " + host);
    }
    timeval tv{5, 0};
    setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);  // the TLS handshake's deadline
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      ::close(fd_);
      throw std::runtime_error("load_redis: cannot connect to " + host + ":" + std::to_string(port));
    }
    int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (tls != nullptr) {
      ssl_ = SSL_new(tls);
      if (ssl_ == nullptr) close_and_throw("SSL_new: " + openssl_error());
      SSL_set_fd(ssl_, fd_);
      // Verify that the certificate names this IP address.
      X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl_), host.c_str());
      if (SSL_connect(ssl_) != 1)
        close_and_throw("TLS handshake with " + host + ":" + std::to_string(port) + " failed: " +
                        openssl_error());
      // Nonblocking from here: a read after epoll readiness may find only part of a record.
      fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) | O_NONBLOCK);
    }
  }
  ~RedisConnection() {
    if (ssl_ != nullptr) SSL_free(ssl_);
    if (fd_ >= 0) ::close(fd_);
  }
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  int fd() const { return fd_; }

  // Blocking write with SO_SNDTIMEO (TLS: a 5 s poll deadline) as its deadline.
  void send(const std::string& command) {
    if (ssl_ != nullptr) {
      auto deadline = Clock::now() + std::chrono::seconds(5);
      while (true) {
        int n = SSL_write(ssl_, command.data(), static_cast<int>(command.size()));
        if (n > 0) return;  // without partial writes, SSL_write writes all or nothing
        int err = SSL_get_error(ssl_, n);
        if ((err != SSL_ERROR_WANT_WRITE && err != SSL_ERROR_WANT_READ) || Clock::now() > deadline)
          throw std::runtime_error("load_redis: TLS write failed or timed out: " + openssl_error());
        pollfd p{fd_, static_cast<short>(err == SSL_ERROR_WANT_WRITE ? POLLOUT : POLLIN), 0};
        ::poll(&p, 1, 100);
      }
    }
    std::size_t off = 0;
    while (off < command.size()) {
      ssize_t n = ::write(fd_, command.data() + off, command.size() - off);
      if (n <= 0) throw std::runtime_error("load_redis: write failed or timed out");
      off += static_cast<std::size_t>(n);
    }
  }

  // Reads what is available; returns the number of complete replies parsed (0 or 1, since
  // the client is closed-loop) and sets *is_error for a RESP error reply.
  int read_reply(bool* is_error) {
    char chunk[65536];
    if (ssl_ != nullptr) {
      // Everything decrypted so far: OpenSSL may hold more of a record than one call returns.
      do {
        int n = SSL_read(ssl_, chunk, sizeof chunk);
        if (n <= 0) {
          int err = SSL_get_error(ssl_, n);
          if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) break;
          if (err == SSL_ERROR_ZERO_RETURN)
            throw std::runtime_error("load_redis: server closed the TLS connection");
          throw std::runtime_error("load_redis: TLS read failed: " + openssl_error());
        }
        buffer_.append(chunk, static_cast<std::size_t>(n));
      } while (SSL_pending(ssl_) > 0);
      return parse(is_error);
    }
    ssize_t n = ::read(fd_, chunk, sizeof chunk);
    if (n == 0) throw std::runtime_error("load_redis: server closed the connection");
    if (n < 0) return 0;
    buffer_.append(chunk, static_cast<std::size_t>(n));
    return parse(is_error);
  }

 private:
  [[noreturn]] void close_and_throw(const std::string& what) {
    if (ssl_ != nullptr) SSL_free(ssl_);
    ssl_ = nullptr;
    ::close(fd_);
    fd_ = -1;
    throw std::runtime_error("load_redis: " + what);
  }

  int parse(bool* is_error) {
    auto line_end = buffer_.find("\r\n");
    if (line_end == std::string::npos) return 0;
    char kind = buffer_[0];
    std::size_t consumed = 0;
    if (kind == '$') {
      long len = std::atol(buffer_.c_str() + 1);
      if (len < 0) {
        consumed = line_end + 2;
      } else {
        std::size_t need = line_end + 2 + static_cast<std::size_t>(len) + 2;
        if (buffer_.size() < need) return 0;
        consumed = need;
      }
    } else {
      consumed = line_end + 2;  // '+', '-', ':'
    }
    *is_error = kind == '-';
    buffer_.erase(0, consumed);
    return 1;
  }

  int fd_ = -1;
  SSL* ssl_ = nullptr;
  std::string buffer_;
};

class RedisLoad {
 public:
  RedisLoad(const Workload& w, const std::string& host, int port, const RedisTls& tls)
      : w_(w), zipf_(w.keys, w.zipf, w.seed), recorder_(w), value_(w.value_size, 'x'), tls_(tls) {
    for (int c = 0; c < w.clients; ++c)
      connections_.emplace_back(std::make_unique<RedisConnection>(host, port, tls_.get()));
    epoll_ = epoll_create1(0);
    for (int c = 0; c < w.clients; ++c) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u32 = static_cast<uint32_t>(c);
      epoll_ctl(epoll_, EPOLL_CTL_ADD, connections_[c]->fd(), &ev);
    }
  }
  ~RedisLoad() { ::close(epoll_); }

  LoadResult run() {
    prefill();
    recorder_.start(Clock::now());
    sent_at_.assign(w_.clients, Clock::time_point{});
    for (int c = 0; c < w_.clients; ++c) issue(c, zipf_.next(), !is_read());
    int outstanding = w_.clients;
    Clock::time_point drain_deadline = Clock::time_point::max();
    std::vector<epoll_event> events(w_.clients);
    while (outstanding > 0) {
      auto now = Clock::now();
      if (!recorder_.issuing(now) && drain_deadline == Clock::time_point::max())
        drain_deadline = now + Recorder::to_duration(w_.drain_s);
      if (now > drain_deadline) break;
      int n = epoll_wait(epoll_, events.data(), w_.clients, 100);
      for (int i = 0; i < n; ++i) {
        int c = static_cast<int>(events[i].data.u32);
        bool error = false;
        if (connections_[c]->read_reply(&error) == 0) continue;
        auto done = Clock::now();
        recorder_.record(sent_at_[c], done, error);
        if (recorder_.issuing(done)) {
          issue(c, zipf_.next(), !is_read());
        } else {
          --outstanding;
        }
      }
    }
    return recorder_.result("redis");
  }

 private:
  void prefill() {
    auto deadline = Clock::now() + std::chrono::seconds(30) +
                    std::chrono::microseconds(static_cast<long>(w_.keys) * 200);
    std::size_t next = 0, done = 0;
    std::vector<bool> busy(w_.clients, false);
    std::vector<epoll_event> events(w_.clients);
    while (done < w_.keys) {
      for (int c = 0; c < w_.clients && next < w_.keys; ++c) {
        if (busy[c]) continue;
        connections_[c]->send(command(next++, true));
        busy[c] = true;
      }
      if (Clock::now() > deadline) throw std::runtime_error("load_redis: prefill timed out");
      int n = epoll_wait(epoll_, events.data(), w_.clients, 100);
      for (int i = 0; i < n; ++i) {
        int c = static_cast<int>(events[i].data.u32);
        bool error = false;
        if (connections_[c]->read_reply(&error) == 0) continue;
        if (error) throw std::runtime_error("load_redis: prefill SET failed");
        busy[c] = false;
        ++done;
      }
    }
  }

  bool is_read() { return std::uniform_real_distribution<double>(0, 1)(zipf_.rng()) < w_.read_ratio; }

  std::string command(std::size_t key_index, bool write) const {
    std::string key = key_name(key_index);
    std::string out;
    if (write) {
      out = "*3\r\n$3\r\nSET\r\n$" + std::to_string(key.size()) + "\r\n" + key + "\r\n$" +
            std::to_string(value_.size()) + "\r\n" + value_ + "\r\n";
    } else {
      out = "*2\r\n$3\r\nGET\r\n$" + std::to_string(key.size()) + "\r\n" + key + "\r\n";
    }
    return out;
  }

  void issue(int client, std::size_t key_index, bool write) {
    sent_at_[client] = Clock::now();
    connections_[client]->send(command(key_index, write));
  }

  const Workload& w_;
  ZipfSampler zipf_;
  Recorder recorder_;
  std::string value_;
  TlsContext tls_;  // before the connections: they use it and are destroyed first
  std::vector<std::unique_ptr<RedisConnection>> connections_;
  int epoll_ = -1;
  std::vector<Clock::time_point> sent_at_;
};

Workload make_workload(int clients, double duration_s, double warmup_s, std::size_t keys,
                       double zipf, double read_ratio, std::size_t value_size,
                       std::uint64_t seed) {
  if (clients <= 0) throw std::invalid_argument("clients must be positive");
  if (duration_s <= 0) throw std::invalid_argument("duration_s must be positive");
  if (read_ratio < 0 || read_ratio > 1) throw std::invalid_argument("read_ratio must be in [0, 1]");
  Workload w;
  w.clients = clients;
  w.duration_s = duration_s;
  w.warmup_s = warmup_s;
  w.keys = keys;
  w.zipf = zipf;
  w.read_ratio = read_ratio;
  w.value_size = value_size;
  w.seed = seed;
  return w;
}

// The key material of a runtime.auth.Credentials (None: authentication off).
CurveKeys curve_keys_of(const py::object& auth) {
  CurveKeys keys;
  if (auth.is_none()) return keys;
  auto text = [](const py::handle& h) {
    return py::isinstance<py::bytes>(h) ? h.cast<std::string>() : py::str(h).cast<std::string>();
  };
  py::object pair = auth.attr("keypair");
  keys.public_key = text(pair.attr("public"));
  keys.secret_key = text(pair.attr("secret"));
  // The load generator hears only from the KVS: the function role (executor workers, which
  // send a client results) is not admitted here.
  for (const auto& item : auth.attr("allowed").cast<py::dict>()) {
    std::string role = text(item.second);
    if (role != "function") keys.admitted[text(item.first)] = role;
  }
  try {
    check_curve_keys(keys);
  } catch (const std::invalid_argument& e) {
    // The check speaks of node config keys; these came from the credentials.
    throw std::invalid_argument(std::string("load_anna: bad credentials (") + e.what() + ")");
  }
  return keys;
}

}  // namespace

void bind_loadgen(py::module_& m) {
  m.def(
      "load_anna",
      [](const std::vector<std::string>& key_addresses, int clients, double duration_s,
         double warmup_s, std::size_t keys, double zipf, double read_ratio,
         std::size_t value_size, std::uint64_t seed, const py::object& auth, bool links) {
        Workload w = make_workload(clients, duration_s, warmup_s, keys, zipf, read_ratio,
                                   value_size, seed);
        CurveKeys curve = curve_keys_of(auth);
        LoadResult result;
        {
          py::gil_scoped_release release;
          AnnaLoad load(w, key_addresses, std::move(curve), links);
          result = load.run();
        }
        return result.to_dict();
      },
      "Closed-loop native load against Anna workers; key_addresses[i] owns key 'k<i>'. "
      "auth: a client's runtime.auth.Credentials when the cluster authenticates (keyed "
      "addresses), else None. links: use the workers' client links when they advertise them "
      "(secured links with auth).",
      py::arg("key_addresses"), py::arg("clients") = 50, py::arg("duration_s") = 5.0,
      py::arg("warmup_s") = 1.0, py::arg("keys") = 100000, py::arg("zipf") = 1.0,
      py::arg("read_ratio") = 0.5, py::arg("value_size") = 256, py::arg("seed") = 1,
      py::arg("auth") = py::none(), py::arg("links") = true);
  m.def(
      "load_redis",
      [](const std::string& host, int port, int clients, double duration_s, double warmup_s,
         std::size_t keys, double zipf, double read_ratio, std::size_t value_size,
         std::uint64_t seed, const std::string& tls_ca, const std::string& tls_cert,
         const std::string& tls_key) {
        Workload w = make_workload(clients, duration_s, warmup_s, keys, zipf, read_ratio,
                                   value_size, seed);
        if (tls_cert.empty() != tls_key.empty())
          throw std::invalid_argument("load_redis: tls_cert and tls_key go together");
        if (!tls_cert.empty() && tls_ca.empty())
          throw std::invalid_argument("load_redis: a client certificate needs tls_ca");
        RedisTls tls{tls_ca, tls_cert, tls_key};
        LoadResult result;
        {
          py::gil_scoped_release release;
          RedisLoad load(w, host, port, tls);
          result = load.run();
        }
        return result.to_dict();
      },
      "The same closed-loop load against a Redis server over RESP. tls_ca: a CA file to "
      "connect over TLS verifying the server against it (empty: plaintext); tls_cert and "
      "tls_key: the client's certificate and key, for a server that authenticates clients.",
      py::arg("host"), py::arg("port"), py::arg("clients") = 50, py::arg("duration_s") = 5.0,
      py::arg("warmup_s") = 1.0, py::arg("keys") = 100000, py::arg("zipf") = 1.0,
      py::arg("read_ratio") = 0.5, py::arg("value_size") = 256, py::arg("seed") = 1,
      py::arg("tls_ca") = "", py::arg("tls_cert") = "", py::arg("tls_key") = "");
}

}  // namespace anna
