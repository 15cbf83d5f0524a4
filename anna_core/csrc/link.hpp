// Client links: a plain TCP connection (a Unix-domain one between processes of one host, below)
// from a client straight to one KVS worker thread, which
// reads it in its own poll loop and answers on the same connection, so that a request passes
// no ZeroMQ I/O thread on either side (two wake-ups per round trip instead of six).
//
// Contract:
//   * A worker opens a link listener when `client_links` is on (node_config.hpp). With CURVE
//     every link is secured (secure_link.hpp: a key handshake, then sealed frames); without,
//     links are plain.
//   * Discovery: a worker with a listener appends kLinkAddressField (KeyResponse.link_address,
//     proto/anna.proto) to its answers to client requests that reached it over ZeroMQ; with
//     KeyResponse.responder it tells the client which worker address the link serves.
//   * Framing, both directions: a 4-byte little-endian length, then that many bytes of
//     payload. Client to worker: a KeyRequest (the kind "request" implied). Worker to client:
//     the KeyResponse answering a request of that link. Answers the worker sends later
//     (a deferred GET, subscription updates) go to the request's response_address over
//     ZeroMQ as before.
//   * LinkReader buffers what was read and hands out whole frames; a frame whose declared
//     length is above its limit is kTooLarge (the caller closes the connection: the stream
//     cannot be resynchronised cheaply, and the peer is either broken or hostile).
//   * A link address is "tcp://host:port", or that followed by "|unix:" and the absolute
//     path of the same listener's Unix-domain socket (unix_links.hpp) when it has one.
//     LinkListener listens on a free TCP port of ip and, with unix_links, on a Unix-domain
//     socket too (when it cannot: TCP alone, and unix_why says why); both serve the same
//     links. Its destructor closes both and removes the socket file (in the process that
//     made it only, so a forked child's exit leaves its parent's file).
//   * connect_link / open_link return non-blocking descriptors (TCP_NODELAY on TCP ones) or
//     -1 with *why set; connect_link waits at most timeout_ms, open_link not at all (the
//     connect goes on; link_connect_error says how it ended). Given an address with a Unix
//     path, both first try that path (connect_unix_link: it completes or fails at once, and
//     fails where the path does not exist, i.e. on another host or in another pod) and use
//     TCP on any failure, with no wait in between. link_is_unix(fd) says which one a
//     descriptor is.
//   * Secured links (secure_link.hpp) keep this framing: their handshake frames and sealed
//     MESSAGE frames are payloads like any other.
//   * find_proto_field reads a top-level length-delimited field of a protobuf payload without
//     parsing the rest (the last occurrence, as protobuf does); false when the payload is not
//     protobuf or lacks it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "secure_link.hpp"

namespace anna {

// KeyResponse.link_address (proto/anna.proto), KeyResponse.responder, KeyRequest.response_address.
constexpr int kLinkAddressField = 530;
constexpr int kResponderField = 5;
constexpr int kResponseAddressField = 3;
constexpr std::size_t kLinkHeaderBytes = 4;

class LinkReader {
 public:
  enum class Next { kFrame, kNeedMore, kTooLarge };
  explicit LinkReader(std::size_t max_frame) : max_frame_(max_frame) {}
  void set_max_frame(std::size_t max_frame) { max_frame_ = max_frame; }
  std::size_t max_frame() const { return max_frame_; }
  // Room for `n` more bytes at the end of the buffer; commit(k) after writing k of them.
  char* prepare(std::size_t n);
  void commit(std::size_t n) { size_ += n; }
  // The next whole frame in *frame (valid until the next prepare/next call).
  Next next(std::string_view* frame);
  std::size_t declared() const { return declared_; }  // the size of a kTooLarge frame
  std::size_t buffered() const { return size_ - start_; }

 private:
  std::size_t max_frame_;
  std::string buf_;
  std::size_t start_ = 0, size_ = 0, declared_ = 0;
};

void append_frame(std::string* out, std::string_view payload);

// A serialized protobuf with one more length-delimited field `field` = value (protobuf lets
// fields be concatenated; a parser sees the message with that field set).
void append_proto_field(std::string* payload, int field, std::string_view value);
bool find_proto_field(const char* data, std::size_t size, int field, std::string* value);

// "tcp://host:port" with a numeric port 1..65535; false otherwise.
bool split_tcp_address(const std::string& address, std::string* host, int* port);
// A link address (above): its TCP host and port, and its Unix path ("" when it has none);
// false when the TCP part is not one or the Unix part is not an absolute path that fits.
bool split_link_address(const std::string& address, std::string* host, int* port,
                        std::string* unix_path);
constexpr const char* kUnixLinkMark = "|unix:";

class LinkListener {
 public:
  LinkListener() = default;
  ~LinkListener();
  LinkListener(const LinkListener&) = delete;
  LinkListener& operator=(const LinkListener&) = delete;
  // false with *why set when the TCP port cannot be listened on (*unix_why: why there is
  // no Unix-domain socket, when unix_links asked for one and it could not be made)
  bool open(const std::string& ip, bool unix_links, std::string* why, std::string* unix_why);
  int tcp_fd() const { return tcp_fd_; }
  int unix_fd() const { return unix_fd_; }  // -1: none
  const std::string& address() const { return address_; }

 private:
  int tcp_fd_ = -1, unix_fd_ = -1;
  std::string unix_path_, address_;
  long owner_pid_ = 0;
};
bool link_is_unix(int fd);
int connect_link(const std::string& address, int timeout_ms, std::string* why);
// Starts a non-blocking connect (TCP_NODELAY set): the descriptor, connected or connecting
// (writable once done; then link_connect_error() is 0 or the errno), or -1 with *why set.
int open_link(const std::string& address, std::string* why);
int link_connect_error(int fd);

// Reads what a non-blocking descriptor has, into `reader`, up to about `budget` bytes (the
// next poll sees the rest). kOpen: nothing more to read now; kClosed: the peer closed it;
// kFailed: a read error, left in errno.
enum class ReadEnd { kOpen, kClosed, kFailed };
ReadEnd read_available(int fd, LinkReader* reader, std::size_t budget);

// Waits at most timeout_ms for one whole frame on a non-blocking descriptor and copies it to
// *frame; false with *why set on the timeout, a closed peer, an error or a frame above the
// reader's limit.
bool read_frame(int fd, LinkReader* reader, int timeout_ms, std::string* frame, std::string* why);

// The client's side of a secured link's handshake (secure_link.hpp) on a connected descriptor,
// within timeout_ms in all: true with *cipher ready, or false with *why set (a refusal's
// reason, a server that cannot prove `server`'s key, the deadline, a closed connection).
bool secure_client_link(int fd, LinkReader* reader, const RawKey& client_public,
                        const RawKey& client_secret, const RawKey& server, int timeout_ms,
                        LinkCipher* cipher, std::string* why);

// Writes all of data to a non-blocking descriptor, waiting for room at most timeout_ms in all;
// false on an error, a closed peer or the timeout (some bytes may have been written).
bool write_all(int fd, std::string_view data, int timeout_ms);

}  // namespace anna
