// Client links' framing and sockets (TCP, or Unix-domain on one host: unix_links.hpp).
// See link.hpp for the contract.
#include "link.hpp"

#include "unix_links.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <algorithm>

namespace anna {

char* LinkReader::prepare(std::size_t n) {
  if (start_ > 0 && (start_ == size_ || start_ >= buf_.size() / 2)) {
    // Move the unread tail to the front (cheap: at most one partial frame is left).
    std::memmove(&buf_[0], buf_.data() + start_, size_ - start_);
    size_ -= start_;
    start_ = 0;
  }
  if (buf_.size() < size_ + n) buf_.resize(size_ + n);
  return &buf_[size_];
}

LinkReader::Next LinkReader::next(std::string_view* frame) {
  std::size_t have = size_ - start_;
  if (have < kLinkHeaderBytes) return Next::kNeedMore;
  const auto* p = reinterpret_cast<const unsigned char*>(buf_.data() + start_);
  std::size_t length = static_cast<std::size_t>(p[0]) | (static_cast<std::size_t>(p[1]) << 8) |
                       (static_cast<std::size_t>(p[2]) << 16) |
                       (static_cast<std::size_t>(p[3]) << 24);
  if (length > max_frame_) {
    declared_ = length;
    return Next::kTooLarge;
  }
  if (have - kLinkHeaderBytes < length) {
    // Reserve room for the rest now, so the next read can take the whole frame at once.
    if (buf_.size() < start_ + kLinkHeaderBytes + length) buf_.resize(start_ + kLinkHeaderBytes + length);
    return Next::kNeedMore;
  }
  *frame = std::string_view(buf_.data() + start_ + kLinkHeaderBytes, length);
  start_ += kLinkHeaderBytes + length;
  return Next::kFrame;
}

void append_frame(std::string* out, std::string_view payload) {
  std::uint32_t n = static_cast<std::uint32_t>(payload.size());
  char header[kLinkHeaderBytes] = {static_cast<char>(n & 0xff), static_cast<char>((n >> 8) & 0xff),
                                   static_cast<char>((n >> 16) & 0xff),
                                   static_cast<char>((n >> 24) & 0xff)};
  out->append(header, kLinkHeaderBytes);
  out->append(payload.data(), payload.size());
}

namespace {

void append_varint(std::string* out, std::uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

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

void append_proto_field(std::string* payload, int field, std::string_view value) {
  append_varint(payload, (static_cast<std::uint64_t>(field) << 3) | 2);
  append_varint(payload, value.size());
  payload->append(value.data(), value.size());
}

bool find_proto_field(const char* data, std::size_t size, int field, std::string* value) {
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

bool split_tcp_address(const std::string& address, std::string* host, int* port) {
  const std::string scheme = "tcp://";
  if (address.size() > 300 || address.rfind(scheme, 0) != 0) return false;
  std::size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon < scheme.size()) return false;
  std::string h = address.substr(scheme.size(), colon - scheme.size());
  std::string p = address.substr(colon + 1);
  if (h.empty() || p.empty() || p.size() > 5) return false;
  int n = 0;
  for (char c : p) {
    if (c < '0' || c > '9') return false;
    n = n * 10 + (c - '0');
  }
  if (n < 1 || n > 65535) return false;
  *host = h;
  *port = n;
  return true;
}

namespace {

bool make_nonblocking(int fd) {
  int flags = fcntl(fd, F_GETFL, 0);
  return flags >= 0 && fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

bool ipv4(const std::string& host, int port, sockaddr_in* out) {
  std::memset(out, 0, sizeof *out);
  out->sin_family = AF_INET;
  out->sin_port = htons(static_cast<std::uint16_t>(port));
  return inet_pton(AF_INET, host == "*" ? "0.0.0.0" : host.c_str(), &out->sin_addr) == 1;
}

}  // namespace

bool split_link_address(const std::string& address, std::string* host, int* port,
                        std::string* unix_path) {
  std::size_t mark = address.find(kUnixLinkMark);
  if (address.find('|') != mark) return false;  // a '|' that is not the Unix part's
  if (mark == std::string::npos) {
    unix_path->clear();
    return split_tcp_address(address, host, port);
  }
  std::string path = address.substr(mark + std::strlen(kUnixLinkMark));
  if (!unix_link_path_ok(path) || !split_tcp_address(address.substr(0, mark), host, port))
    return false;
  *unix_path = std::move(path);
  return true;
}

bool LinkListener::open(const std::string& ip, bool unix_links, std::string* why,
                        std::string* unix_why) {
  sockaddr_in sa;
  if (!ipv4(ip, 1, &sa)) {
    *why = "an IPv4 address is needed to bind, not '" + ip.substr(0, 64) + "'";
    return false;
  }
  sa.sin_port = 0;
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *why = std::string("socket: ") + std::strerror(errno);
    return false;
  }
  socklen_t len = sizeof sa;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || ::listen(fd, 128) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0 || !make_nonblocking(fd)) {
    *why = "listen on " + ip + ": " + std::strerror(errno);
    ::close(fd);
    return false;
  }
  tcp_fd_ = fd;
  address_ = "tcp://" + (ip == "0.0.0.0" ? std::string("127.0.0.1") : ip) + ":" +
             std::to_string(ntohs(sa.sin_port));
  if (!unix_links) return true;
  std::string dir = unix_link_dir("/tmp", unix_why);
  if (!dir.empty()) unix_fd_ = listen_unix_link(dir, &unix_path_, unix_why);
  if (unix_fd_ >= 0) {
    owner_pid_ = static_cast<long>(::getpid());
    address_ += kUnixLinkMark + unix_path_;
  }
  return true;
}

LinkListener::~LinkListener() {
  if (tcp_fd_ >= 0) ::close(tcp_fd_);
  if (unix_fd_ >= 0) {
    ::close(unix_fd_);
    if (static_cast<long>(::getpid()) == owner_pid_) ::unlink(unix_path_.c_str());
  }
}

bool link_is_unix(int fd) {
  sockaddr_storage sa;
  socklen_t len = sizeof sa;
  return ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0 &&
         sa.ss_family == AF_UNIX;
}

int open_link(const std::string& address, std::string* why) {
  std::string host, unix_path;
  int port = 0;
  sockaddr_in sa;
  if (!split_link_address(address, &host, &port, &unix_path) || !ipv4(host, port, &sa)) {
    *why = "not a link address: '" + address.substr(0, 64) + "'";
    return -1;
  }
  if (!unix_path.empty()) {
    // The same host: the listener's Unix-domain socket; anything else: TCP, at once.
    int fd = connect_unix_link(unix_path);
    if (fd >= 0) return fd;
  }
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    *why = std::string("socket: ") + std::strerror(errno);
    return -1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 && errno != EINPROGRESS) {
    *why = "connect " + address + ": " + std::strerror(errno);
    ::close(fd);
    return -1;
  }
  return fd;
}

int link_connect_error(int fd) {
  int err = 0;
  socklen_t len = sizeof err;
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno;
  return err;
}

int connect_link(const std::string& address, int timeout_ms, std::string* why) {
  int fd = open_link(address, why);
  if (fd < 0) return -1;
  pollfd p{fd, POLLOUT, 0};
  int n;
  do n = ::poll(&p, 1, timeout_ms); while (n < 0 && errno == EINTR);
  int err = n > 0 ? link_connect_error(fd) : 0;
  if (n <= 0 || err != 0) {
    *why = "connect " + address + ": " +
           (n == 0 ? std::string("timed out") : std::strerror(err != 0 ? err : errno));
    ::close(fd);
    return -1;
  }
  return fd;
}

ReadEnd read_available(int fd, LinkReader* reader, std::size_t budget) {
  constexpr std::size_t kChunk = 64u << 10;
  std::size_t total = 0;
  while (total < budget) {
    char* into = reader->prepare(kChunk);
    ssize_t n = ::recv(fd, into, kChunk, MSG_DONTWAIT);
    if (n > 0) {
      reader->commit(static_cast<std::size_t>(n));
      total += static_cast<std::size_t>(n);
      if (static_cast<std::size_t>(n) < kChunk) return ReadEnd::kOpen;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return ReadEnd::kOpen;
    return n == 0 ? ReadEnd::kClosed : ReadEnd::kFailed;
  }
  return ReadEnd::kOpen;
}

bool read_frame(int fd, LinkReader* reader, int timeout_ms, std::string* frame, std::string* why) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    std::string_view next;
    switch (reader->next(&next)) {
      case LinkReader::Next::kFrame:
        frame->assign(next.data(), next.size());
        return true;
      case LinkReader::Next::kTooLarge:
        *why = "a frame of " + std::to_string(reader->declared()) + " bytes";
        return false;
      case LinkReader::Next::kNeedMore:
        break;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      *why = "no answer within " + std::to_string(timeout_ms) + " ms";
      return false;
    }
    pollfd p{fd, POLLIN, 0};
    int n = ::poll(&p, 1, static_cast<int>(left));
    if (n < 0 && errno != EINTR) {
      *why = std::string("poll: ") + std::strerror(errno);
      return false;
    }
    if (n <= 0) continue;
    ReadEnd end = read_available(fd, reader, 64u << 10);
    if (end != ReadEnd::kOpen && reader->buffered() < kLinkHeaderBytes) {
      *why = end == ReadEnd::kClosed ? "closed by the peer" : std::string("read: ") + std::strerror(errno);
      return false;
    }
    if (end != ReadEnd::kOpen) {
      // What was read may still hold the frame; after it, nothing more will come.
      std::string_view last;
      if (reader->next(&last) == LinkReader::Next::kFrame) {
        frame->assign(last.data(), last.size());
        return true;
      }
      *why = "closed by the peer";
      return false;
    }
  }
}

bool secure_client_link(int fd, LinkReader* reader, const RawKey& client_public,
                        const RawKey& client_secret, const RawKey& server, int timeout_ms,
                        LinkCipher* cipher, std::string* why) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  auto left = [&] {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                  deadline - std::chrono::steady_clock::now()).count();
    return static_cast<int>(std::max<long long>(ms, 1));
  };
  const std::size_t max_frame = reader->max_frame();
  reader->set_max_frame(kHandshakeFrameMax);
  LinkClientHandshake handshake(client_public, client_secret, server);
  std::string out, frame, hello = handshake.hello(), initiate;
  bool ok = false;
  if (hello.empty()) {
    *why = "the worker's server key is degenerate";
  } else if (append_frame(&out, hello), !write_all(fd, out, left())) {
    *why = "handshake: HELLO not written";
  } else if (!read_frame(fd, reader, left(), &frame, why) ||
             !handshake.on_welcome(frame, &initiate, why)) {
    *why = "handshake: " + *why;
  } else if (out.clear(), append_frame(&out, initiate), !write_all(fd, out, left())) {
    *why = "handshake: INITIATE not written";
  } else if (!read_frame(fd, reader, left(), &frame, why) ||
             !handshake.on_ready(frame, cipher, why)) {
    *why = "handshake: " + *why;
  } else {
    ok = true;
  }
  reader->set_max_frame(max_frame + kSealOverhead);
  return ok;
}

bool write_all(int fd, std::string_view data, int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                      deadline - std::chrono::steady_clock::now()).count();
      if (left <= 0) return false;
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, static_cast<int>(left)) < 0 && errno != EINTR) return false;
      continue;
    }
    return false;
  }
  return true;
}

}  // namespace anna
