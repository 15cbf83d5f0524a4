// Lattice <-> wire payload (the anna.*Value protobuf messages of proto/anna.proto), and
// AnyLattice, the tagged union the stores and the worker hold.
//
// Contract:
//   * encode(l) produces the payload for l's lattice type; maps are serialised
//     deterministically, so equal lattices encode to equal bytes.
//   * decode_lattice(type, payload, &out) returns NO_ERROR and fills `out`, UNKNOWN_LATTICE
//     for a type outside 1..8, or MALFORMED for a payload that does not parse as that type
//     (or holds a NaN priority). decode(encode(l)) == l for every lattice l.
//   * merge_any(&a, b) merges b into a and returns true, or returns false (a untouched) when
//     the two hold different lattice types.
//   * AnyLattice's variant index + 1 is the anna.LatticeType number.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "anna.pb.h"
#include "lattices.hpp"

namespace anna {

using AnyLattice = std::variant<LWWLattice, SetLattice, OrderedSetLattice, MaxLattice, MapLattice,
                                PriorityLattice, SingleKeyCausalLattice, MultiKeyCausalLattice>;

inline int lattice_type_of(const AnyLattice& l) { return static_cast<int>(l.index()) + 1; }
inline bool known_lattice_type(int type) { return type >= 1 && type <= 8; }

// Per-type codecs. decode_* return false on a malformed payload.
void encode_to(const LWWLattice& l, std::string* out);
void encode_to(const SetLattice& l, std::string* out);
void encode_to(const OrderedSetLattice& l, std::string* out);
void encode_to(const MaxLattice& l, std::string* out);
void encode_to(const MapLattice& l, std::string* out);
void encode_to(const PriorityLattice& l, std::string* out);
void encode_to(const SingleKeyCausalLattice& l, std::string* out);
void encode_to(const MultiKeyCausalLattice& l, std::string* out);

bool decode_from(std::string_view payload, LWWLattice* out);
bool decode_from(std::string_view payload, SetLattice* out);
bool decode_from(std::string_view payload, OrderedSetLattice* out);
bool decode_from(std::string_view payload, MaxLattice* out);
bool decode_from(std::string_view payload, MapLattice* out);
bool decode_from(std::string_view payload, PriorityLattice* out);
bool decode_from(std::string_view payload, SingleKeyCausalLattice* out);
bool decode_from(std::string_view payload, MultiKeyCausalLattice* out);

template <class L>
std::string encode(const L& l) {
  std::string out;
  encode_to(l, &out);
  return out;
}

void encode_lattice(const AnyLattice& l, std::string* out);
std::string encode_lattice(const AnyLattice& l);
AnnaError decode_lattice(int type, std::string_view payload, AnyLattice* out);
bool merge_any(AnyLattice* into, const AnyLattice& from);

}  // namespace anna
