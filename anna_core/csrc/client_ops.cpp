// The client's single-key requests as bytes. See client_ops.hpp for the contract.
#include "client_ops.hpp"

#include "anna.pb.h"
#include "lattice_codec.hpp"

namespace anna {

std::string encode_key_request(const KeyRequestSpec& spec) {
  KeyRequest request;
  request.set_type(static_cast<RequestType>(spec.type));
  request.set_response_address(spec.response_address);
  request.set_request_id(spec.request_id);
  KeyTuple* t = request.add_tuples();
  t->set_key(spec.key);
  if (spec.lww_at > 0) {
    // the kernel's codec: the one encoding of an LWW value
    LWWLattice value;
    value.timestamp = spec.lww_at;
    value.value = spec.payload;
    t->set_lattice_type(LWW);
    encode_to(value, t->mutable_payload());
  } else {
    if (spec.lattice_type != 0) t->set_lattice_type(static_cast<LatticeType>(spec.lattice_type));
    if (!spec.payload.empty()) t->set_payload(spec.payload);
  }
  if (spec.timestamp != 0) t->set_timestamp(spec.timestamp);
  std::string out;
  request.SerializeToString(&out);
  return out;
}

std::size_t lww_payload_bound(std::size_t value_bytes) {
  // field 1: tag + a 64-bit varint (<= 10 bytes); field 2: tag + a length varint (<= 10) + value
  return value_bytes + 1 + 10 + 1 + 10;
}

bool decode_key_answer(const std::string& raw, const std::string& key, bool reveal_lww,
                       KeyAnswer* answer) {
  KeyResponse response;
  if (!response.ParseFromString(raw)) return false;
  answer->responder = response.responder();
  for (const KeyTuple& t : response.tuples()) {
    if (t.key() != key) continue;
    answer->error = t.error();
    answer->lattice_type = t.lattice_type();
    answer->replicas = t.replicas();
    answer->addresses.assign(t.addresses().begin(), t.addresses().end());
    answer->error_detail = t.error_detail();
    answer->revealed = false;
    if (reveal_lww && t.error() == NO_ERROR && t.lattice_type() == LWW) {
      LWWLattice value;
      if (decode_from(t.payload(), &value)) {
        answer->payload = std::move(value.value);
        answer->revealed = true;
        return true;
      }
    }
    answer->payload = t.payload();
    return true;
  }
  // No tuple for the key: the whole request was rejected.
  answer->error = response.error() != NO_ERROR ? response.error() : MALFORMED;
  answer->lattice_type = 0;
  answer->payload.clear();
  answer->revealed = false;
  answer->replicas = 0;
  answer->addresses.clear();
  answer->error_detail.clear();
  return true;
}

}  // namespace anna
