// Placement changes and the acknowledged hand-off (dissertation 3.2.5-3.2.7: nodes join, leave
// and fail; here without losing an acknowledged write). Part of WorkerCore: worker_core.hpp
// has the rest of the contract, fetch.cpp the fetch window opened by the same changes.
//
// Contract:
//   * A placement change is a Membership (ignored when older than the one in force) or a
//     ReplicationUpdate (for the keys it names). For every stored key and every key with
//     subscriptions (values or not), the key's *targets* are its replicas under the new map
//     that were not replicas under the previous one; all of its replicas when this worker's
//     node is not in the new map (it is leaving or was declared failed) or the worker had no
//     map before (first Membership, e.g. a restarted disk worker). A hand-off already in
//     flight is re-planned: its unacked targets that are still replicas stay, new ones join.
//   * Each target gets "handoff" KeyRequests batched per destination (<= kMaxGossipBytes; a
//     key's tuples are never split across messages), request_id "h<n>" unique per worker,
//     response_address = own address: a PUT tuple with the stored value and `timestamp`, and
//     one SUBSCRIBE tuple (subscriber_address) per subscriber. The timestamp is the latest
//     acceptance time of this epoch's writes to the key if any, else the time of the change
//     (no write accepted here is later than that).
//   * The receiver merges each value (unless not newer than its tombstone for the key) and
//     adds each subscription whether or not it holds the key under its own, possibly older,
//     map, then answers "handoff_ack": a KeyResponse with the same request_id and type,
//     responder = own address, one tuple (key only) per key it took. A key whose store write
//     failed is left out of the ack so that the sender tries again. A key the receiver does not
//     hold is forwarded to its replicas under the receiver's map after handoff_retry_ms (by
//     then its placement has usually caught up and it holds the key after all).
//   * The sender strikes the acking worker (KeyResponse.responder) off the key's targets. With
//     none left the hand-off is complete and a key the worker does not hold under the current
//     map is dropped (value and subscriptions). Until then the worker keeps it, answering
//     WRONG_OWNER to clients but "fetch" from new owners. A key with no target that the worker
//     no longer holds is dropped at once (its other replicas already hold it).
//   * A key with no replica at all under the new map (its tier has no node in that map) is
//     never dropped: it is an *orphan*, kept with its subscriptions (WRONG_OWNER to clients,
//     "fetch" served) and planned again at the next change. Orphans are counted in
//     `orphaned`, and in `handoff_pending` while this worker's node is not in the map, so a
//     leaving node waits for a map that gives them an owner instead of leaving without them.
//   * Targets that have not acked get the key again every handoff_retry_ms (end_epoch), with
//     no limit: a hand-off ends only by its acks or by a re-plan (the key is held again, or
//     the target is no longer a replica).
//   * Bounds: at most one PendingHandoff per stored or subscribed key, so pending state is
//     bounded by what the worker stores. Acks name their keys, so no per-message state is
//     kept and a late ack for an earlier send still counts.
#include <algorithm>

#include "log.hpp"
#include "worker_core.hpp"

namespace anna {
namespace {

ReplicationVector from_proto(const Replication& r) {
  return ReplicationVector{r.memory_global(), r.memory_local(), r.disk_global(), r.disk_local()};
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

struct HandoffBatch {
  std::vector<KeyRequest> requests;
  std::size_t bytes = 0;
};

// The request a key's tuples (about `bytes` in all) go into for `address`.
KeyRequest* batch_for(std::unordered_map<std::string, HandoffBatch>* batches,
                      const std::string& address, std::size_t bytes) {
  HandoffBatch& b = (*batches)[address];
  if (b.requests.empty() || (b.bytes > 0 && b.bytes + bytes > WorkerCore::kMaxGossipBytes)) {
    b.requests.emplace_back();
    b.bytes = 0;
  }
  b.bytes += bytes;
  return &b.requests.back();
}

}  // namespace

void WorkerCore::handle_membership(const Membership& m, std::vector<OutMessage>* out) {
  if (has_membership_ && m.version() < membership_version_) {
    log_info("worker " + id_.address + ": stale membership version " +
             std::to_string(m.version()) + " < " + std::to_string(membership_version_) +
             " ignored");
    return;
  }
  ReplicationVector def =
      m.has_default_replication() ? from_proto(m.default_replication()) : map_.default_replication();
  int vnodes = m.vnodes() > 0 ? static_cast<int>(m.vnodes()) : 64;  // handle() bounds it
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
  placement_changed(had ? &old : nullptr, nullptr, out);
  if (had) {
    open_fetch_window(std::move(old));
  } else if (map_.find_node(id_.node_id) != nullptr) {
    // A worker's first map usually is the one that admits its node (a join, or a restart):
    // the keys it now owns were held, just before, by the placement without it.
    ClusterMap before = map_;
    before.remove_node(id_.node_id);
    if (!before.nodes().empty()) open_fetch_window(std::move(before));
  }
}

void WorkerCore::handle_replication(const ReplicationUpdate& update, std::vector<OutMessage>* out) {
  ClusterMap old = map_;
  std::vector<std::string> keys;
  for (const KeyReplication& kr : update.overrides()) {
    map_.set_replication(kr.key(), from_proto(kr.replication()));
    keys.push_back(kr.key());
  }
  if (!has_membership_) return;  // the first Membership replaces the overrides anyway
  placement_changed(&old, &keys, out);
  open_fetch_window(std::move(old));
}

void WorkerCore::placement_changed(const ClusterMap* old, const std::vector<std::string>* only_keys,
                                   std::vector<OutMessage>* out) {
  const bool me_present = map_.find_node(id_.node_id) != nullptr;
  std::vector<std::string> keys;
  if (only_keys != nullptr) {
    keys = *only_keys;
  } else {
    store_->for_each([&](const std::string& key, const AnyLattice&) { keys.push_back(key); });
    for (const auto& [key, subs] : subscribers_) keys.push_back(key);
    for (const auto& [key, pending] : handoff_) keys.push_back(key);
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  if (only_keys == nullptr) orphans_.clear();  // every held key is planned again below
  std::vector<std::string> to_send, to_drop;
  for (const auto& key : keys) plan_handoff(key, old, me_present, &to_send, &to_drop);
  send_handoffs(to_send, false, out);
  for (const auto& key : to_drop) drop_if_not_held(key);
  if (!to_drop.empty())
    log_info("worker " + id_.address + ": dropped " + std::to_string(to_drop.size()) +
             " keys it no longer holds");
  if (!orphans_.empty())
    log_warning("worker " + id_.address + ": " + std::to_string(orphans_.size()) +
                " keys have no replica under membership version " +
                std::to_string(membership_version_) + "; kept until a map names one");
}

void WorkerCore::plan_handoff(const std::string& key, const ClusterMap* old, bool me_present,
                              std::vector<std::string>* to_send, std::vector<std::string>* to_drop) {
  std::vector<WorkerRef> now, before;
  replicas_of(key, map_, &now);
  auto it = handoff_.find(key);
  if (now.empty()) {
    // No replica anywhere under this map: its tier has no node in it (the tier's last node
    // left or was declared failed, or the map comes from a routing that does not know the
    // tier's other nodes). Nobody else holds the key, so dropping it would lose it: keep it
    // (and its subscriptions) and hand it off once a map names a replica.
    if (it != handoff_.end()) {
      handoff_items_ -= it->second.items;
      handoff_.erase(it);
    }
    orphans_.insert(key);
    return;
  }
  orphans_.erase(key);
  const bool held = std::any_of(now.begin(), now.end(), [&](const WorkerRef& r) { return is_self(r); });
  const bool compare = old != nullptr && me_present;  // else every replica is a target
  if (compare) replicas_of(key, *old, &before);
  std::vector<std::string> targets;
  for (const auto& r : now) {
    if (is_self(r)) continue;
    const bool was = compare && std::any_of(before.begin(), before.end(), [&](const WorkerRef& b) {
      return *b.address == *r.address;
    });
    const bool unacked = it != handoff_.end() && contains(it->second.targets, *r.address);
    if ((!was || unacked) && !contains(targets, *r.address)) targets.push_back(*r.address);
  }
  if (targets.empty()) {
    if (it != handoff_.end()) {
      handoff_items_ -= it->second.items;
      handoff_.erase(it);
    }
    if (!held) to_drop->push_back(key);
    return;
  }
  PendingHandoff& p = handoff_[key];
  p.targets = std::move(targets);
  auto c = changeset_.find(key);
  p.ts = std::max(p.ts, c != changeset_.end() ? c->second.ts : now_);
  to_send->push_back(key);
}

std::uint32_t WorkerCore::handoff_items(const std::string& key) {
  AnyLattice value;
  auto subs = subscribers_.find(key);
  return (store_->get(key, &value) == NO_ERROR ? 1u : 0u) +
         static_cast<std::uint32_t>(subs == subscribers_.end() ? 0 : subs->second.size());
}

void WorkerCore::send_handoffs(const std::vector<std::string>& keys, bool resend,
                               std::vector<OutMessage>* out) {
  std::unordered_map<std::string, HandoffBatch> batches;
  std::vector<std::string> empty;
  AnyLattice value;
  std::string payload;
  for (const auto& key : keys) {
    auto it = handoff_.find(key);
    if (it == handoff_.end()) continue;
    PendingHandoff& p = it->second;
    const bool has_value = store_->get(key, &value) == NO_ERROR;
    if (has_value) encode_lattice(value, &payload);
    auto subs = subscribers_.find(key);
    const std::size_t n_subs = subs == subscribers_.end() ? 0 : subs->second.size();
    const std::uint32_t items = (has_value ? 1u : 0u) + static_cast<std::uint32_t>(n_subs);
    handoff_items_ = handoff_items_ - p.items + items;
    p.items = items;
    if (items == 0) {  // deleted and unsubscribed meanwhile: nothing left to hand over
      empty.push_back(key);
      continue;
    }
    std::size_t bytes = (has_value ? key.size() + payload.size() + 24 : 0);
    if (n_subs > 0)
      for (const auto& s : subs->second) bytes += key.size() + s.size() + 8;
    for (const auto& target : p.targets) {
      KeyRequest* r = batch_for(&batches, target, bytes);
      if (has_value) {
        KeyTuple* t = r->add_tuples();
        t->set_key(key);
        t->set_lattice_type(static_cast<LatticeType>(lattice_type_of(value)));
        t->set_payload(payload);
        t->set_timestamp(p.ts);
      }
      if (n_subs > 0)
        for (const auto& s : subs->second) {
          KeyTuple* t = r->add_tuples();
          t->set_key(key);
          t->set_subscriber_address(s);
        }
    }
    p.sent_at = now_;
    if (!resend) ++stats_.handed_off;
  }
  for (auto& [address, batch] : batches) {
    for (auto& request : batch.requests) {
      request.set_type(PUT);
      request.set_request_id("h" + std::to_string(++next_id_));
      request.set_response_address(id_.address);
      out->push_back(OutMessage{address, "handoff", serialize_message(request)});
      if (resend) ++stats_.handoff_resent;
    }
  }
  for (const auto& key : empty) finish_handoff(key);
}

void WorkerCore::resend_handoffs(std::vector<OutMessage>* out) {
  if (handoff_.empty()) return;
  const std::uint64_t retry_ns = id_.handoff_retry_ms * 1000000ull;
  std::vector<std::string> due;
  for (const auto& [key, p] : handoff_)
    if (p.sent_at + retry_ns <= now_) due.push_back(key);
  send_handoffs(due, true, out);
}

void WorkerCore::forward_later(const std::string& key, std::uint64_t ts) {
  if (handoff_.count(key) > 0) return;  // already on its way to this map's replicas
  std::vector<WorkerRef> now;
  replicas_of(key, map_, &now);
  PendingHandoff p;
  for (const auto& r : now)
    if (!is_self(r) && !contains(p.targets, *r.address)) p.targets.push_back(*r.address);
  if (p.targets.empty()) return;
  p.ts = ts != 0 ? ts : now_;
  p.sent_at = now_;  // first send after handoff_retry_ms: placement may catch up meanwhile
  p.items = handoff_items(key);
  handoff_items_ += p.items;
  handoff_.emplace(key, std::move(p));
}

void WorkerCore::finish_handoff(const std::string& key) {
  auto it = handoff_.find(key);
  if (it != handoff_.end()) {
    handoff_items_ -= it->second.items;
    handoff_.erase(it);
  }
  drop_if_not_held(key);
}

void WorkerCore::drop_if_not_held(const std::string& key) {
  if (has_membership_ && owns(key)) return;
  AnnaError err = store_->remove(key);
  if (err != NO_ERROR && err != KEY_DNE)
    log_warning("worker " + id_.address + ": dropping a handed-off key failed (" +
                AnnaError_Name(err) + ")");
  subscribers_.erase(key);
  touched_.erase(key);
  orphans_.erase(key);
}

void WorkerCore::handle_handoff(const KeyRequest& handoff, std::vector<OutMessage>* out) {
  ++stats_.handoff_in;
  std::vector<std::string> taken;
  std::unordered_set<std::string> failed;
  for (const KeyTuple& t : handoff.tuples()) {
    const std::string& key = t.key();
    if (!t.subscriber_address().empty()) {
      subscribers_[key].insert(t.subscriber_address());
    } else if (!stale_write(key, t.timestamp())) {
      AnyLattice value;
      AnnaError err = decode_lattice(t.lattice_type(), t.payload(), &value);
      if (err == NO_ERROR) err = store_->merge(key, value);
      if (err == STORE_FAILED || err == DISK_FULL) {
        failed.insert(key);  // transient: no ack, the sender sends it again
      } else if (err != NO_ERROR) {
        // Permanent (undecodable, another lattice type here): acked so the sender stops.
        log_warning("worker " + id_.address + ": handed-off value refused (" +
                    AnnaError_Name(err) + ")");
      } else {
        touch(key);
      }
    }
    if (has_membership_ && !owns(key)) forward_later(key, t.timestamp());
    if (taken.empty() || taken.back() != key) taken.push_back(key);
  }
  KeyResponse ack;
  ack.set_type(handoff.type());
  ack.set_request_id(handoff.request_id());
  ack.set_responder(id_.address);
  for (const auto& key : taken)
    if (failed.count(key) == 0) ack.add_tuples()->set_key(key);
  out->push_back(OutMessage{handoff.response_address(), "handoff_ack", serialize_message(ack)});
}

void WorkerCore::handle_handoff_ack(const KeyResponse& ack) {
  for (const KeyTuple& t : ack.tuples()) {
    auto it = handoff_.find(t.key());
    if (it == handoff_.end()) continue;  // a late or duplicate ack
    auto& targets = it->second.targets;
    targets.erase(std::remove(targets.begin(), targets.end(), ack.responder()), targets.end());
    if (targets.empty()) finish_handoff(t.key());
  }
}

}  // namespace anna
