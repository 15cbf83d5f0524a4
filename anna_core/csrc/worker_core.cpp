// The sans-I/O worker. See worker_core.hpp for the contract.
#include "worker_core.hpp"

#include <algorithm>

#include "log.hpp"

namespace anna {

std::string serialize_message(const google::protobuf::MessageLite& msg) {
  std::string out;
  msg.SerializeToString(&out);
  return out;
}

namespace {

template <class Msg>
bool parse_payload(std::string_view payload, Msg* msg) {
  if (payload.size() > static_cast<std::size_t>(std::numeric_limits<int>::max())) return false;
  return msg->ParseFromArray(payload.data(), static_cast<int>(payload.size()));
}

ReplicationVector from_proto(const Replication& r) {
  return ReplicationVector{r.memory_global(), r.memory_local(), r.disk_global(), r.disk_local()};
}

bool valid_request_type(int t) { return t >= GET && t <= UNSUBSCRIBE; }

// Per-destination gossip batches, split so no message exceeds kMaxGossipBytes.
struct Batch {
  std::vector<KeyRequest> requests;
  std::size_t bytes = 0;
};

KeyTuple* add_tuple(std::unordered_map<std::string, Batch>* batches, const std::string& address,
                    std::size_t tuple_bytes) {
  Batch& b = (*batches)[address];
  if (b.requests.empty() || b.bytes + tuple_bytes > WorkerCore::kMaxGossipBytes) {
    b.requests.emplace_back();
    b.bytes = 0;
  }
  b.bytes += tuple_bytes;
  return b.requests.back().add_tuples();
}

void emit(RequestType type, std::unordered_map<std::string, Batch>* batches,
          std::vector<OutMessage>* out, std::uint64_t* count) {
  for (auto& [address, batch] : *batches) {
    for (auto& request : batch.requests) {
      request.set_type(type);
      out->push_back(OutMessage{address, "gossip", serialize_message(request)});
      ++*count;
    }
  }
  batches->clear();
}

}  // namespace

WorkerCore::WorkerCore(WorkerIdentity id, std::unique_ptr<Store> store)
    : id_(std::move(id)), store_(std::move(store)) {}

bool WorkerCore::handle(std::string_view kind, std::string_view payload,
                        std::vector<OutMessage>* out, std::string* why) {
  if (kind == "request") {
    if (!parse_payload(payload, &request_)) {  // reused: parsing keeps its allocations
      ++stats_.dropped;
      *why = "unparsable KeyRequest payload";
      return false;
    }
    handle_request(request_, out);
  } else if (kind == "gossip") {
    KeyRequest gossip;
    if (!parse_payload(payload, &gossip)) {
      ++stats_.dropped;
      *why = "unparsable gossip payload";
      return false;
    }
    handle_gossip(gossip, out);
  } else if (kind == "membership") {
    Membership membership;
    if (!parse_payload(payload, &membership)) {
      ++stats_.dropped;
      *why = "unparsable Membership payload";
      return false;
    }
    handle_membership(membership, out);
  } else if (kind == "replication") {
    ReplicationUpdate update;
    if (!parse_payload(payload, &update)) {
      ++stats_.dropped;
      *why = "unparsable ReplicationUpdate payload";
      return false;
    }
    handle_replication(update, out);
  } else {
    ++stats_.dropped;
    *why = "unknown message kind";
    return false;
  }
  return true;
}

// ---------------------------------------------------------------- requests

void WorkerCore::handle_request(const KeyRequest& request, std::vector<OutMessage>* out) {
  ++stats_.requests;
  const bool respond = !request.response_address().empty();
  KeyResponse& response = response_;  // reused across requests
  response.Clear();
  response.set_type(request.type());
  response.set_request_id(request.request_id());
  response.set_responder(id_.address);
  if (!valid_request_type(request.type())) {
    response.set_error(MALFORMED);
  } else {
    for (const KeyTuple& in : request.tuples()) {
      ++stats_.tuples;
      KeyTuple* o = respond ? response.add_tuples() : &discard_;
      handle_tuple(request.type(), in, o);
      if (!respond) discard_.Clear();
    }
  }
  if (respond) out->push_back(OutMessage{request.response_address(), "", serialize_message(response)});
}

void WorkerCore::handle_tuple(RequestType type, const KeyTuple& in, KeyTuple* out) {
  const std::string& key = in.key();
  out->set_key(key);
  if (!owns(key)) {
    wrong_owner(key, out);
    return;
  }
  switch (type) {
    case GET: {
      int lattice_type = 0;
      AnnaError err = store_->get_encoded(key, &lattice_type, out->mutable_payload());
      if (err == NO_ERROR) out->set_lattice_type(static_cast<LatticeType>(lattice_type));
      else out->set_error(err);
      return;
    }
    case PUT: {
      if (in.payload().size() > id_.max_value_bytes) {
        out->set_error(VALUE_TOO_LARGE);
        return;
      }
      AnyLattice value;
      AnnaError err = decode_lattice(in.lattice_type(), in.payload(), &value);
      if (err != NO_ERROR) {
        out->set_error(err);
        return;
      }
      out->set_lattice_type(in.lattice_type());
      err = store_->merge(key, value);
      if (err != NO_ERROR) {
        out->set_error(err);
        return;
      }
      auto it = changeset_.find(key);
      if (it == changeset_.end()) {
        changeset_.emplace(key, std::move(value));
      } else if (!merge_any(&it->second, value)) {
        it->second = std::move(value);
      }
      touch(key);
      return;
    }
    case DELETE: {
      AnnaError err = store_->remove(key);
      changeset_.erase(key);
      deleted_.insert(key);
      touch(key);
      if (err != NO_ERROR) out->set_error(err);
      return;
    }
    case SUBSCRIBE: {
      if (in.subscriber_address().empty()) {
        out->set_error(MALFORMED);
        return;
      }
      subscribers_[key].insert(in.subscriber_address());
      return;
    }
    case UNSUBSCRIBE: {
      auto it = subscribers_.find(key);
      if (it == subscribers_.end() || it->second.erase(in.subscriber_address()) == 0) {
        out->set_error(KEY_DNE);
        return;
      }
      if (it->second.empty()) subscribers_.erase(it);
      return;
    }
    default:
      out->set_error(MALFORMED);
  }
}

bool WorkerCore::is_self(const WorkerRef& ref) const {
  return ref.thread_id == id_.thread_id && *ref.node_id == id_.node_id;
}

bool WorkerCore::owns(const std::string& key) {
  if (!has_membership_) return false;
  return map_.is_responsible(key, id_.tier, my_member_, id_.thread_id);
}

void WorkerCore::wrong_owner(const std::string& key, KeyTuple* out) const {
  out->set_error(WRONG_OWNER);
  if (!has_membership_) return;
  for (auto& address : map_.addresses(key, false)) out->add_addresses(std::move(address));
}

void WorkerCore::touch(const std::string& key) {
  if (!subscribers_.empty() && subscribers_.count(key) > 0) touched_.insert(key);
}

void WorkerCore::replicas_of(const std::string& key, const ClusterMap& map,
                             std::vector<WorkerRef>* out) const {
  map.responsible(key, 0, out);
  std::vector<WorkerRef> disk;
  map.responsible(key, 1, &disk);
  out->insert(out->end(), disk.begin(), disk.end());
}

// ---------------------------------------------------------------- gossip

void WorkerCore::handle_gossip(const KeyRequest& gossip, std::vector<OutMessage>* out) {
  ++stats_.gossip_in;
  if (gossip.type() == PUT) {
    for (const KeyTuple& t : gossip.tuples()) {
      AnyLattice value;
      AnnaError err = decode_lattice(t.lattice_type(), t.payload(), &value);
      if (err != NO_ERROR) {
        log_warning("worker " + id_.address + ": gossip tuple for a key dropped (" +
                    AnnaError_Name(err) + ")");
        continue;
      }
      err = store_->merge(t.key(), value);
      if (err != NO_ERROR) {
        log_warning("worker " + id_.address + ": gossip merge failed (" + AnnaError_Name(err) +
                    ")");
        continue;
      }
      touch(t.key());
    }
  } else if (gossip.type() == DELETE) {
    for (const KeyTuple& t : gossip.tuples()) {
      store_->remove(t.key());
      changeset_.erase(t.key());
      touch(t.key());
    }
  } else {
    ++stats_.dropped;
    log_warning("worker " + id_.address + ": gossip of request type " +
                std::to_string(gossip.type()) + " dropped");
  }
}

void WorkerCore::end_epoch(std::vector<OutMessage>* out) {
  if (has_membership_ && (!changeset_.empty() || !deleted_.empty())) {
    std::unordered_map<std::string, Batch> batches;
    std::vector<WorkerRef> replicas;
    for (const auto& key : deleted_) {
      replicas_of(key, map_, &replicas);
      for (const auto& r : replicas) {
        if (is_self(r)) continue;
        add_tuple(&batches, *r.address, key.size() + 8)->set_key(key);
      }
    }
    emit(DELETE, &batches, out, &stats_.gossip_out);
    for (const auto& [key, delta] : changeset_) {
      replicas_of(key, map_, &replicas);
      bool encoded = false;
      for (const auto& r : replicas) {
        if (is_self(r)) continue;
        if (!encoded) {
          encode_lattice(delta, &scratch_payload_);
          encoded = true;
        }
        KeyTuple* t = add_tuple(&batches, *r.address, key.size() + scratch_payload_.size() + 16);
        t->set_key(key);
        t->set_lattice_type(static_cast<LatticeType>(lattice_type_of(delta)));
        t->set_payload(scratch_payload_);
      }
    }
    emit(PUT, &batches, out, &stats_.gossip_out);
  }
  changeset_.clear();
  deleted_.clear();

  for (const auto& key : touched_) {
    auto subs = subscribers_.find(key);
    if (subs == subscribers_.end()) continue;
    KeyResponse update;
    update.set_type(UPDATE);
    update.set_responder(id_.address);
    KeyTuple* t = update.add_tuples();
    t->set_key(key);
    int lattice_type = 0;
    AnnaError err = store_->get_encoded(key, &lattice_type, t->mutable_payload());
    if (err == NO_ERROR) t->set_lattice_type(static_cast<LatticeType>(lattice_type));
    else t->set_error(err);
    std::string payload = serialize_message(update);
    for (const auto& address : subs->second) {
      out->push_back(OutMessage{address, "", payload});
      ++stats_.updates_out;
    }
  }
  touched_.clear();
}

// ---------------------------------------------------------------- placement

void WorkerCore::handle_membership(const Membership& m, std::vector<OutMessage>* out) {
  if (has_membership_ && m.version() < membership_version_) {
    log_info("worker " + id_.address + ": stale membership version " +
             std::to_string(m.version()) + " < " + std::to_string(membership_version_) +
             " ignored");
    return;
  }
  ReplicationVector def =
      m.has_default_replication() ? from_proto(m.default_replication()) : map_.default_replication();
  int vnodes = m.vnodes() > 0 ? static_cast<int>(m.vnodes()) : 64;
  ClusterMap next(def, vnodes);
  for (const NodeInfo& n : m.nodes()) {
    if (n.tier() != MEMORY && n.tier() != DISK) {
      log_warning("worker " + id_.address + ": membership node with unknown tier skipped");
      continue;
    }
    next.add_node(n.node_id(), n.tier(),
                  std::vector<std::string>(n.worker_addresses().begin(), n.worker_addresses().end()));
  }
  for (const KeyReplication& kr : m.overrides()) next.set_replication(kr.key(), from_proto(kr.replication()));
  ClusterMap old = std::move(map_);
  const bool had = has_membership_;
  map_ = std::move(next);
  my_member_ = map_.member_index(id_.node_id, id_.tier);
  has_membership_ = true;
  membership_version_ = m.version();
  log_info("worker " + id_.address + ": membership version " + std::to_string(m.version()) +
           " with " + std::to_string(map_.nodes().size()) + " nodes");
  redistribute(had ? &old : nullptr, nullptr, out);
}

void WorkerCore::handle_replication(const ReplicationUpdate& update, std::vector<OutMessage>* out) {
  ClusterMap old = map_;
  std::vector<std::string> keys;
  for (const KeyReplication& kr : update.overrides()) {
    map_.set_replication(kr.key(), from_proto(kr.replication()));
    keys.push_back(kr.key());
  }
  if (has_membership_) redistribute(&old, &keys, out);
}

void WorkerCore::redistribute(const ClusterMap* old, const std::vector<std::string>* only_keys,
                              std::vector<OutMessage>* out) {
  const bool me_present = map_.find_node(id_.node_id) != nullptr;
  std::unordered_map<std::string, Batch> batches;
  std::vector<std::string> to_drop;
  std::vector<WorkerRef> now, before;
  std::string payload;
  auto visit = [&](const std::string& key, const AnyLattice& value) {
    replicas_of(key, map_, &now);
    bool keep = false;
    for (const auto& r : now) keep = keep || is_self(r);
    before.clear();
    if (old != nullptr) replicas_of(key, *old, &before);
    bool encoded = false;
    for (const auto& r : now) {
      if (is_self(r)) continue;
      bool had = std::any_of(before.begin(), before.end(),
                             [&](const WorkerRef& b) { return *b.address == *r.address; });
      if (had) continue;
      if (!encoded) {
        encode_lattice(value, &payload);
        encoded = true;
        ++stats_.handed_off;
      }
      KeyTuple* t = add_tuple(&batches, *r.address, key.size() + payload.size() + 16);
      t->set_key(key);
      t->set_lattice_type(static_cast<LatticeType>(lattice_type_of(value)));
      t->set_payload(payload);
    }
    if (!keep && me_present) to_drop.push_back(key);
  };
  if (only_keys != nullptr) {
    AnyLattice value;
    for (const auto& key : *only_keys)
      if (store_->get(key, &value) == NO_ERROR) visit(key, value);
  } else {
    store_->for_each(visit);
  }
  emit(PUT, &batches, out, &stats_.gossip_out);
  for (const auto& key : to_drop) {
    store_->remove(key);
    changeset_.erase(key);
  }
  if (!to_drop.empty())
    log_info("worker " + id_.address + ": dropped " + std::to_string(to_drop.size()) +
             " keys it no longer holds");
}

}  // namespace anna
