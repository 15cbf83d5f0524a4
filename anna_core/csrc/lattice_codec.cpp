// Lattice <-> protobuf payload codecs. See lattice_codec.hpp for the contract.
#include "lattice_codec.hpp"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <cmath>
#include <limits>
#include <type_traits>

namespace anna {
namespace {

namespace gpb = google::protobuf;

template <class Msg>
bool parse(std::string_view payload, Msg* msg) {
  if (payload.size() > static_cast<std::size_t>(std::numeric_limits<int>::max())) return false;
  return msg->ParseFromArray(payload.data(), static_cast<int>(payload.size()));
}

// Deterministic serialisation (sorted map keys), so equal lattices give equal bytes.
template <class Msg>
void serialize_deterministic(const Msg& msg, std::string* out) {
  out->clear();
  gpb::io::StringOutputStream sos(out);
  gpb::io::CodedOutputStream cos(&sos);
  cos.SetSerializationDeterministic(true);
  msg.SerializeToCodedStream(&cos);
}

void clock_to_proto(const VClock& vc, anna::VectorClock* out) {
  auto* m = out->mutable_clock();
  for (const auto& [node, count] : vc) (*m)[node] = count;
}

VClock clock_from_proto(const anna::VectorClock& in) {
  VClock vc;
  for (const auto& [node, count] : in.clock())
    if (count != 0) vc.emplace(node, count);
  return vc;
}

void deps_to_proto(const std::map<std::string, VClock>& deps,
                   gpb::Map<std::string, anna::VectorClock>* out) {
  for (const auto& [key, vc] : deps) clock_to_proto(vc, &(*out)[key]);
}

std::map<std::string, VClock> deps_from_proto(
    const gpb::Map<std::string, anna::VectorClock>& in) {
  std::map<std::string, VClock> out;
  for (const auto& [key, vc] : in) out.emplace(key, clock_from_proto(vc));
  return out;
}

template <class Lattice, class Msg>
void causal_to_proto(const Lattice& l, Msg* msg, bool with_deps) {
  clock_to_proto(l.clock(), msg->mutable_vector_clock());
  for (const auto& value : l.values()) msg->add_values(value);
  if constexpr (std::is_same_v<Msg, MultiKeyCausalValue>) {
    deps_to_proto(l.dependencies(), msg->mutable_dependencies());
  }
  if (l.versions.size() > 1) {
    for (const auto& v : l.versions) {
      auto* pv = msg->add_versions();
      clock_to_proto(v.clock, pv->mutable_vector_clock());
      if (with_deps) deps_to_proto(v.dependencies, pv->mutable_dependencies());
      for (const auto& value : v.values) pv->add_values(value);
    }
  }
}

template <class Lattice, class Msg>
void causal_from_proto(const Msg& msg, Lattice* out, bool with_deps) {
  out->versions.clear();
  if (msg.versions_size() > 0) {
    for (const auto& pv : msg.versions()) {
      CausalEntry v;
      v.clock = clock_from_proto(pv.vector_clock());
      if (with_deps) v.dependencies = deps_from_proto(pv.dependencies());
      v.values.insert(pv.values().begin(), pv.values().end());
      out->versions.insert(std::move(v));
    }
    out->prune();
    return;
  }
  CausalEntry v;
  v.clock = clock_from_proto(msg.vector_clock());
  if constexpr (std::is_same_v<Msg, MultiKeyCausalValue>) {
    v.dependencies = deps_from_proto(msg.dependencies());
  }
  v.values.insert(msg.values().begin(), msg.values().end());
  out->versions.insert(std::move(v));
}

}  // namespace

void encode_to(const LWWLattice& l, std::string* out) {
  LWWValue msg;
  msg.set_timestamp(l.timestamp);
  msg.set_value(l.value);
  msg.SerializeToString(out);
}

bool decode_from(std::string_view payload, LWWLattice* out) {
  LWWValue msg;
  if (!parse(payload, &msg)) return false;
  out->timestamp = msg.timestamp();
  out->value = std::move(*msg.mutable_value());
  return true;
}

template <LatticeKind K>
static void encode_set(const BasicSetLattice<K>& l, std::string* out) {
  SetValue msg;
  msg.mutable_values()->Reserve(static_cast<int>(l.values.size()));
  for (const auto& v : l.values) msg.add_values(v);
  msg.SerializeToString(out);
}

template <LatticeKind K>
static bool decode_set(std::string_view payload, BasicSetLattice<K>* out) {
  SetValue msg;
  if (!parse(payload, &msg)) return false;
  out->values.clear();
  for (auto& v : *msg.mutable_values()) out->values.insert(std::move(v));
  return true;
}

void encode_to(const SetLattice& l, std::string* out) { encode_set(l, out); }
void encode_to(const OrderedSetLattice& l, std::string* out) { encode_set(l, out); }
bool decode_from(std::string_view payload, SetLattice* out) { return decode_set(payload, out); }
bool decode_from(std::string_view payload, OrderedSetLattice* out) {
  return decode_set(payload, out);
}

void encode_to(const MaxLattice& l, std::string* out) {
  MaxValue msg;
  msg.set_value(l.value);
  msg.SerializeToString(out);
}

bool decode_from(std::string_view payload, MaxLattice* out) {
  MaxValue msg;
  if (!parse(payload, &msg)) return false;
  out->value = msg.value();
  return true;
}

void encode_to(const MapLattice& l, std::string* out) {
  MapValue msg;
  for (const auto& [k, v] : l.entries) {
    auto* e = msg.add_entries();
    e->set_key(k);
    e->set_value(v);
  }
  msg.SerializeToString(out);
}

bool decode_from(std::string_view payload, MapLattice* out) {
  MapValue msg;
  if (!parse(payload, &msg)) return false;
  out->entries.clear();
  for (const auto& e : msg.entries()) {
    auto [it, inserted] = out->entries.emplace(e.key(), e.value());
    if (!inserted && e.value() > it->second) it->second = e.value();  // duplicates merge by max
  }
  return true;
}

void encode_to(const PriorityLattice& l, std::string* out) {
  PriorityValue msg;
  msg.set_priority(l.priority);
  msg.set_value(l.value);
  msg.SerializeToString(out);
}

bool decode_from(std::string_view payload, PriorityLattice* out) {
  PriorityValue msg;
  if (!parse(payload, &msg)) return false;
  if (std::isnan(msg.priority())) return false;
  out->priority = msg.priority();
  out->value = std::move(*msg.mutable_value());
  return true;
}

void encode_to(const SingleKeyCausalLattice& l, std::string* out) {
  SingleKeyCausalValue msg;
  causal_to_proto(l, &msg, false);
  serialize_deterministic(msg, out);
}

bool decode_from(std::string_view payload, SingleKeyCausalLattice* out) {
  SingleKeyCausalValue msg;
  if (!parse(payload, &msg)) return false;
  causal_from_proto(msg, out, false);
  return true;
}

void encode_to(const MultiKeyCausalLattice& l, std::string* out) {
  MultiKeyCausalValue msg;
  causal_to_proto(l, &msg, true);
  serialize_deterministic(msg, out);
}

bool decode_from(std::string_view payload, MultiKeyCausalLattice* out) {
  MultiKeyCausalValue msg;
  if (!parse(payload, &msg)) return false;
  causal_from_proto(msg, out, true);
  return true;
}

void encode_lattice(const AnyLattice& l, std::string* out) {
  std::visit([out](const auto& x) { encode_to(x, out); }, l);
}

std::string encode_lattice(const AnyLattice& l) {
  std::string out;
  encode_lattice(l, &out);
  return out;
}

namespace {
template <std::size_t I>
AnnaError decode_as(std::string_view payload, AnyLattice* out) {
  std::variant_alternative_t<I, AnyLattice> l;
  if (!decode_from(payload, &l)) return MALFORMED;
  *out = std::move(l);
  return NO_ERROR;
}
}  // namespace

AnnaError decode_lattice(int type, std::string_view payload, AnyLattice* out) {
  switch (type) {
    case 1: return decode_as<0>(payload, out);
    case 2: return decode_as<1>(payload, out);
    case 3: return decode_as<2>(payload, out);
    case 4: return decode_as<3>(payload, out);
    case 5: return decode_as<4>(payload, out);
    case 6: return decode_as<5>(payload, out);
    case 7: return decode_as<6>(payload, out);
    case 8: return decode_as<7>(payload, out);
    default: return UNKNOWN_LATTICE;
  }
}

bool merge_any(AnyLattice* into, const AnyLattice& from) {
  if (into->index() != from.index()) return false;
  std::visit(
      [&from](auto& a) {
        using L = std::decay_t<decltype(a)>;
        a.merge(std::get<L>(from));
      },
      *into);
  return true;
}

}  // namespace anna
