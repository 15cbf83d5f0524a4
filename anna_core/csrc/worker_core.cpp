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

// A tuple's error; a storage failure also says what failed and where (the client shows it).
void set_tuple_error(const WorkerIdentity& id, const Store& store, AnnaError err, KeyTuple* out) {
  out->set_error(err);
  if (err == STORE_FAILED || err == DISK_FULL)
    out->set_error_detail("node " + id.node_id + " worker " + std::to_string(id.thread_id) +
                          ": " + store.error_detail());
}

}  // namespace

WorkerCore::WorkerCore(WorkerIdentity id, std::unique_ptr<Store> store)
    : id_(std::move(id)), store_(std::move(store)),
      tombstones_(id_.tombstone_ttl_ms * 1000000ull),
      key_stats_(id_.stats_top_k) {}

PeriodReport WorkerCore::take_report() {
  PeriodReport r;
  r.gets = period_gets_;
  r.puts = period_puts_;
  r.deletes = period_deletes_;
  r.requests = r.gets + r.puts + r.deletes;
  r.key_accesses = key_stats_.total();
  r.accessed_keys = key_stats_.distinct();
  r.access_square_sum = key_stats_.square_sum();
  r.access_mean = r.accessed_keys == 0 ? 0.0
                                       : static_cast<double>(r.key_accesses) / r.accessed_keys;
  r.exact = key_stats_.evicted() == 0;
  // Workload bytes only: the bookkeeping under __anna__/ is not what the tiers are sized for.
  const std::uint64_t stored = store_->stored_bytes();
  r.stored_bytes = stored - std::min(stored, store_->metadata_bytes());
  r.stored_keys = store_->size();
  // Sizes: memory lookups are hash lookups; a disk lookup is a RocksDB point read, so at
  // most kMaxDiskSizeLookups of them per report (beyond: size 0, unknown).
  const bool disk = id_.tier == DISK;
  std::size_t lookups = 0;
  auto size_of = [&](const std::string& key) -> std::uint64_t {
    if (disk && lookups >= kMaxDiskSizeLookups) return 0;
    ++lookups;
    return store_->value_size(key);
  };
  for (auto& [k, c] : key_stats_.hottest(kReportKeys)) {
    std::uint64_t size = size_of(k);
    r.hottest.push_back(KeyCount{std::move(k), c, size});
  }
  // Coldest: first stored keys this worker owns with no access this period (not in the
  // top-k), sampled from a rotating scan of the store, then the least counted tracked keys.
  if (has_membership_) {
    store_->scan_keys(kColdScanKeys, [&](const std::string& key, std::uint64_t size) {
      if (r.coldest.size() >= kReportKeys || key_stats_.count(key) != 0 || !owns(key)) return;
      r.coldest.push_back(KeyCount{key, 0, size});
    });
  }
  for (auto& [k, c] : key_stats_.coldest(kReportKeys)) {
    if (r.coldest.size() >= kReportKeys) break;
    std::uint64_t size = size_of(k);
    r.coldest.push_back(KeyCount{std::move(k), c, size});
  }
  const ReplicationVector& def = map_.default_replication();
  for (const auto& [key, rep] : map_.overrides()) {
    if (r.tracked.size() >= key_stats_.capacity()) break;
    if (rep == def || !owns(key)) continue;
    r.tracked.push_back(KeyCount{key, key_stats_.count(key), size_of(key)});
  }
  key_stats_.reset();
  period_gets_ = period_puts_ = period_deletes_ = 0;
  return r;
}

WorkerStats WorkerCore::stats() const {
  WorkerStats s = stats_;
  s.member = has_membership_ && map_.find_node(id_.node_id) != nullptr;
  s.orphaned = orphans_.size();
  // A node out of the map must still place its orphans: a leave waits for them.
  s.handoff_pending = handoff_items_ + (s.member ? 0 : orphans_.size());
  s.membership_version = has_membership_ ? membership_version_ : 0;
  s.deferred = deferred_.size();
  s.tombstones = tombstones_.size();
  return s;
}

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
    if (membership.vnodes() > kMaxVnodes) {  // would build a ring of absurd size
      ++stats_.dropped;
      *why = "Membership.vnodes " + std::to_string(membership.vnodes()) + " above " +
             std::to_string(kMaxVnodes);
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
  } else if (kind == "handoff" || kind == "fetch") {
    KeyRequest request;
    if (!parse_payload(payload, &request)) {
      ++stats_.dropped;
      *why = "unparsable " + std::string(kind) + " payload";
      return false;
    }
    if (request.response_address().empty()) {
      ++stats_.dropped;
      *why = std::string(kind) + " without a response_address";
      return false;
    }
    if (kind == "handoff") handle_handoff(request, out);
    else handle_fetch(request, out);
  } else if (kind == "scan") {
    ScanRequest scan;
    if (!parse_payload(payload, &scan)) {
      ++stats_.dropped;
      *why = "unparsable ScanRequest payload";
      return false;
    }
    if (scan.response_address().empty()) {
      ++stats_.dropped;
      *why = "scan without a response_address";
      return false;
    }
    handle_scan(scan, out);
  } else if (kind == "handoff_ack" || kind == "fetched") {
    KeyResponse response;
    if (!parse_payload(payload, &response)) {
      ++stats_.dropped;
      *why = "unparsable " + std::string(kind) + " payload";
      return false;
    }
    if (kind == "handoff_ack") handle_handoff_ack(response);
    else handle_fetched(response, out);
  } else {
    ++stats_.dropped;
    *why = "unknown message kind";
    return false;
  }
  return true;
}

// ---------------------------------------------------------------- backups

void WorkerCore::handle_scan(const ScanRequest& scan, std::vector<OutMessage>* out) {
  ScanResponse response;
  response.set_request_id(scan.request_id());
  response.set_responder(id_.address);
  response.set_node_id(id_.node_id);
  response.set_thread_id(static_cast<std::uint32_t>(id_.thread_id));
  const std::size_t max_keys = scan.max_keys() == 0 ? kScanPageKeys
                               : std::min<std::size_t>(scan.max_keys(), kMaxScanPageKeys);
  const std::size_t max_bytes = scan.max_bytes() == 0 ? kScanPageBytes
                                : std::min<std::size_t>(scan.max_bytes(), kMaxScanPageBytes);
  ScanPage page = store_->scan_page(
      scan.cursor(), max_keys, max_bytes, [&](const std::string& key, int type, std::string&& payload) {
        KeyTuple* t = response.add_tuples();
        t->set_key(key);
        t->set_lattice_type(static_cast<LatticeType>(type));
        t->set_payload(std::move(payload));
      });
  if (page.error != NO_ERROR) {
    response.clear_tuples();
    response.set_error(page.error);
    response.set_error_detail("node " + id_.node_id + " worker " + std::to_string(id_.thread_id) +
                              ": " + store_->error_detail());
  } else {
    response.set_next_cursor(page.next_cursor);
    response.set_done(page.done);
    response.set_restarted(page.restarted);
  }
  response.set_stored_keys(store_->size());
  ++stats_.scans;
  out->push_back(OutMessage{scan.response_address(), "", serialize_message(response)});
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
    // A GET missing here may be a key whose previous owners have not handed it over yet.
    const bool may_fetch = respond && request.type() == GET && !previous_maps_.empty() &&
                           deferred_.size() < kMaxDeferred;
    std::vector<int> missing;
    for (const KeyTuple& in : request.tuples()) {
      ++stats_.tuples;
      KeyTuple* o = respond ? response.add_tuples() : &discard_;
      handle_tuple(request.type(), in, o);
      if (!respond) discard_.Clear();
      else if (may_fetch && o->error() == KEY_DNE) missing.push_back(response.tuples_size() - 1);
    }
    if (!missing.empty()) {
      defer(request, response, missing, out);
      return;
    }
  }
  if (respond) out->push_back(OutMessage{request.response_address(), "", serialize_message(response)});
}

// Keys under "__anna__/" are the cluster's bookkeeping (persisted replication, statistics,
// the monitor's status): clients may read them, and write only their own latency reports.
// Keys under "__cloudburst/" are the FaaS layer's registry and worker directory: written
// by the schedulers and executor nodes (cluster key) only, read by anyone.
static bool is_metadata(const std::string& key) { return is_metadata_key(key); }

static bool reserved_for_cluster(const std::string& key) {
  static const std::string kClientReports = "__anna__/stats/clients/";
  static const std::string kRegistry = "__cloudburst/";
  if (key.compare(0, kRegistry.size(), kRegistry) == 0) return true;
  return is_metadata(key) && key.compare(0, kClientReports.size(), kClientReports) != 0;
}

void WorkerCore::handle_tuple(RequestType type, const KeyTuple& in, KeyTuple* out) {
  const std::string& key = in.key();
  out->set_key(key);
  if (from_client_ && (type == PUT || type == DELETE) && reserved_for_cluster(key)) {
    ++stats_.dropped;
    out->set_error(NOT_PERMITTED);
    out->set_error_detail("keys under __anna__/ and __cloudburst/ are the cluster's own; a "
                          "client key may only write __anna__/stats/clients/");
    return;
  }
  if (!owns(key)) {
    wrong_owner(key, out);
    return;
  }
  // The cluster's own bookkeeping (__anna__/: statistics, the monitor's status, persisted
  // replication read back by routing) is not workload: it is neither counted in the
  // statistics the autoscaling policy reads nor paced by capacity emulation.
  if ((type == GET || type == PUT || type == DELETE) && !is_metadata(key)) {
    key_stats_.record(key);
    if (type == GET) ++period_gets_;
    else if (type == PUT) ++period_puts_;
    else ++period_deletes_;
  }
  // A key with a replication override tells the client how many workers of this tier hold
  // it: a client that cached fewer addresses (the key was replicated since) asks routing
  // again and spreads its requests over the new replicas.
  if (!map_.overrides().empty()) {
    auto override_it = map_.overrides().find(key);
    if (override_it != map_.overrides().end())
      out->set_replicas(override_it->second.global(id_.tier) * override_it->second.local(id_.tier));
  }
  switch (type) {
    case GET: {
      int lattice_type = 0;
      AnnaError err = store_->get_encoded(key, &lattice_type, out->mutable_payload());
      if (err == NO_ERROR) out->set_lattice_type(static_cast<LatticeType>(lattice_type));
      else set_tuple_error(id_, *store_, err, out);
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
        set_tuple_error(id_, *store_, err, out);
        return;
      }
      const std::uint64_t accepted = accept_put(key);
      auto it = changeset_.find(key);
      if (it == changeset_.end()) {
        changeset_.emplace(key, Delta{std::move(value), accepted});
      } else {
        if (!merge_any(&it->second.value, value)) it->second.value = std::move(value);
        it->second.ts = std::max(it->second.ts, accepted);
      }
      touch(key);
      return;
    }
    case DELETE: {
      const std::uint64_t ts = in.timestamp() != 0 ? in.timestamp() : now_;
      AnnaError err = apply_delete(key, ts);
      auto [d, inserted] = deleted_.try_emplace(key, ts);
      if (!inserted) d->second = std::max(d->second, ts);
      if (err != NO_ERROR) set_tuple_error(id_, *store_, err, out);
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

std::uint64_t WorkerCore::accept_put(const std::string& key) {
  std::uint64_t tomb = 0;
  // A client PUT that reaches a tombstoned key came after the delete here: stamp it after the
  // tombstone so replicas holding the same tombstone accept its gossip.
  if (tombstones_.find(key, &tomb)) return std::max(now_, tomb + 1);
  return now_;
}

bool WorkerCore::stale_write(const std::string& key, std::uint64_t ts) const {
  std::uint64_t tomb = 0;
  return tombstones_.find(key, &tomb) && ts <= tomb;
}

AnnaError WorkerCore::apply_delete(const std::string& key, std::uint64_t ts) {
  if (tombstones_.record(key, ts, now_) > 0)
    log_warning("worker " + id_.address + ": tombstone limit reached; the oldest were collected early");
  AnnaError err = store_->remove(key);
  if (err != NO_ERROR && err != KEY_DNE)
    log_warning("worker " + id_.address + ": delete failed (" + AnnaError_Name(err) + ")");
  // Writes of this epoch accepted after the delete survive it (and their gossip carries a
  // newer stamp than the tombstone, so the other replicas keep them too).
  auto it = changeset_.find(key);
  if (it != changeset_.end()) {
    if (it->second.ts > ts) store_->merge(key, it->second.value);
    else changeset_.erase(it);  // the delete outvotes this epoch's writes accepted before it
  }
  // Nothing left to place (a leaving node must not wait for it).
  AnyLattice left;
  if (orphans_.count(key) > 0 && subscribers_.count(key) == 0 &&
      store_->get(key, &left) != NO_ERROR)
    orphans_.erase(key);
  touch(key);
  return err;
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
      if (stale_write(t.key(), t.timestamp())) continue;  // older than a delete seen here
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
      // Gossip from a peer with another placement: pass the key on to its owners.
      if (has_membership_ && !owns(t.key())) forward_later(t.key(), t.timestamp());
    }
  } else if (gossip.type() == DELETE) {
    for (const KeyTuple& t : gossip.tuples())
      apply_delete(t.key(), t.timestamp() != 0 ? t.timestamp() : now_);
  } else {
    ++stats_.dropped;
    log_warning("worker " + id_.address + ": gossip of request type " +
                std::to_string(gossip.type()) + " dropped");
  }
  (void)out;
}

void WorkerCore::end_epoch(std::vector<OutMessage>* out) {
  if (has_membership_ && (!changeset_.empty() || !deleted_.empty())) {
    std::unordered_map<std::string, Batch> batches;
    std::vector<WorkerRef> replicas;
    for (const auto& [key, ts] : deleted_) {
      replicas_of(key, map_, &replicas);
      for (const auto& r : replicas) {
        if (is_self(r)) continue;
        KeyTuple* t = add_tuple(&batches, *r.address, key.size() + 16);
        t->set_key(key);
        t->set_timestamp(ts);
      }
    }
    emit(DELETE, &batches, out, &stats_.gossip_out);
    // Every replica under the current placement, including when this worker no longer holds
    // the key: a write accepted before a placement change still reaches all of its replicas.
    for (const auto& [key, d] : changeset_) {
      const AnyLattice& delta = d.value;
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
        t->set_timestamp(d.ts);
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

  resend_handoffs(out);
  expire_fetches(out);
  tombstones_.collect(now_);
}

}  // namespace anna
