// The client's single-key requests as bytes: what `anna_core.Client.get/put/delete` send
// and what they read back, built and decoded in C++ so that a request costs the Python
// caller one native call (bind_client_transport.cpp's `key_request`). No sockets here.
//
// Contract:
//   * encode_key_request(spec) serialises a KeyRequest of spec.type with exactly one
//     KeyTuple {key, lattice_type, payload, timestamp}, the response address and request id
//     (the bytes Python's anna_pb2 built before). With spec.lww_at > 0 the payload is a
//     plain value, wrapped here as the LWWValue {lww_at, payload} of lattice type LWW.
//   * lww_payload_bound(n): an upper bound of the LWW payload's size for a value of n bytes
//     (what the caller compares with max_value_bytes before wrapping).
//   * decode_key_answer(raw, key, reveal_lww, &answer) parses a KeyResponse and fills
//     `answer` from its first tuple for `key` (as the Python client's `_tuple_of`): when it
//     holds none, the answer is the response's own error, or MALFORMED when it has none. With
//     reveal_lww, an LWW payload that parses is replaced by its value (answer.revealed); one
//     that does not is left as it is, for the caller's codec to reject. Returns false, and
//     leaves `answer` unspecified, when `raw` is not a KeyResponse.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace anna {

struct KeyRequestSpec {
  int type = 0;                // anna.RequestType
  std::string key;
  int lattice_type = 0;        // anna.LatticeType (0: none, as a GET)
  std::string payload;         // the lattice payload, or with lww_at > 0 the plain value
  std::uint64_t timestamp = 0; // KeyTuple.timestamp (a DELETE's tombstone)
  std::uint64_t lww_at = 0;    // > 0: wrap `payload` as LWWValue{lww_at, payload}
  std::string response_address;
  std::string request_id;
};

struct KeyAnswer {
  int error = 0;
  int lattice_type = 0;
  std::string payload;         // the tuple's payload, or its LWW value when revealed
  bool revealed = false;
  std::uint32_t replicas = 0;
  std::vector<std::string> addresses;  // with WRONG_OWNER: the owners
  std::string error_detail;
  std::string responder;
};

std::string encode_key_request(const KeyRequestSpec& spec);
std::size_t lww_payload_bound(std::size_t value_bytes);
bool decode_key_answer(const std::string& raw, const std::string& key, bool reveal_lww,
                       KeyAnswer* answer);

}  // namespace anna
