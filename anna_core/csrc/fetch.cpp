// The fetch window: after a placement change a new owner reads through to the previous owners
// while they hand keys over, so a GET during a hand-off does not answer a spurious KEY_DNE.
// Part of WorkerCore: worker_core.hpp has the rest of the contract, handoff.cpp the hand-off.
//
// Contract:
//   * Each placement change keeps the previous map (at most kMaxPreviousMaps, oldest dropped
//     first, so a chain of changes still finds every recent owner) and opens, or restarts, the
//     window for handoff_window_ms. A worker's first Membership that names its own node counts
//     as a change from the same map without that node (it has just joined or restarted). When
//     the window has closed (checked in end_epoch) the previous maps are forgotten.
//   * A client GET (with a response_address) whose tuple misses in the store, for a key this
//     worker owns (a miss implies it), while the window is open, with no tombstone for the key
//     here, and whose replicas under the kept previous maps include other workers, is deferred:
//     the worker sends each of those workers one "fetch" KeyRequest (GET, request_id "f<n>",
//     response_address = own address) naming the request's missing keys it held. At most
//     kMaxDeferred requests wait at once; past that a miss is answered KEY_DNE at once.
//   * "fetch" is answered as "fetched" (KeyResponse GET, same request_id, responder = own
//     address) from the store whether or not the answering worker owns the key: the value, or
//     KEY_DNE (with `timestamp` = its tombstone when the key was deleted there).
//   * A fetched value is merged into the store unless the key has a tombstone here (fetched
//     values carry no acceptance time, so any delete seen here wins); a fetched tombstone is
//     recorded. Answers to unknown request ids (late, after a timeout) are ignored.
//   * The deferred request is answered, every missing tuple read again from the store, when
//     all its fetches have answered, or when fetch_timeout_ms has passed (end_epoch): previous
//     owners that are dead never answer.
#include <algorithm>

#include "log.hpp"
#include "worker_core.hpp"

namespace anna {

void WorkerCore::open_fetch_window(ClusterMap old) {
  previous_maps_.push_back(std::move(old));
  while (previous_maps_.size() > kMaxPreviousMaps) previous_maps_.pop_front();
  window_until_ = now_ + id_.handoff_window_ms * 1000000ull;
}

bool WorkerCore::fetch_candidates(const std::string& key, std::vector<std::string>* from) {
  from->clear();
  std::uint64_t tomb = 0;
  if (now_ >= window_until_ || tombstones_.find(key, &tomb)) return false;
  std::vector<WorkerRef> refs;
  for (const auto& map : previous_maps_) {
    replicas_of(key, map, &refs);
    for (const auto& r : refs)
      if (!is_self(r) && std::find(from->begin(), from->end(), *r.address) == from->end())
        from->push_back(*r.address);
  }
  return !from->empty();
}

void WorkerCore::defer(const KeyRequest& request, const KeyResponse& response,
                       const std::vector<int>& missing, std::vector<OutMessage>* out) {
  std::vector<std::pair<std::string, std::vector<int>>> by_source;  // few sources: a vector
  std::vector<int> waiting;
  std::vector<std::string> from;
  for (int idx : missing) {
    if (!fetch_candidates(response.tuples(idx).key(), &from)) continue;
    waiting.push_back(idx);
    for (const auto& source : from) {
      auto it = std::find_if(by_source.begin(), by_source.end(),
                             [&](const auto& s) { return s.first == source; });
      if (it == by_source.end()) by_source.push_back({source, {idx}});
      else it->second.push_back(idx);
    }
  }
  if (by_source.empty()) {
    out->push_back(OutMessage{request.response_address(), "", serialize_message(response)});
    return;
  }
  const std::uint64_t id = ++next_id_;
  Deferred d;
  d.response_address = request.response_address();
  d.response = response;
  d.missing = std::move(waiting);
  d.deadline = now_ + id_.fetch_timeout_ms * 1000000ull;
  for (const auto& [source, indices] : by_source) {
    KeyRequest fetch;
    fetch.set_type(GET);
    fetch.set_request_id("f" + std::to_string(++next_id_));
    fetch.set_response_address(id_.address);
    for (int idx : indices) fetch.add_tuples()->set_key(response.tuples(idx).key());
    fetches_[fetch.request_id()] = id;
    d.fetch_ids.push_back(fetch.request_id());
    out->push_back(OutMessage{source, "fetch", serialize_message(fetch)});
    ++stats_.fetches_out;
  }
  deferred_.emplace(id, std::move(d));
}

void WorkerCore::handle_fetch(const KeyRequest& fetch, std::vector<OutMessage>* out) {
  KeyResponse answer;
  answer.set_type(GET);
  answer.set_request_id(fetch.request_id());
  answer.set_responder(id_.address);
  for (const KeyTuple& in : fetch.tuples()) {
    KeyTuple* t = answer.add_tuples();
    t->set_key(in.key());
    int lattice_type = 0;
    AnnaError err = store_->get_encoded(in.key(), &lattice_type, t->mutable_payload());
    if (err == NO_ERROR) {
      t->set_lattice_type(static_cast<LatticeType>(lattice_type));
      continue;
    }
    t->set_error(err);
    std::uint64_t tomb = 0;
    if (err == KEY_DNE && tombstones_.find(in.key(), &tomb)) t->set_timestamp(tomb);
  }
  out->push_back(OutMessage{fetch.response_address(), "fetched", serialize_message(answer)});
}

void WorkerCore::handle_fetched(const KeyResponse& fetched, std::vector<OutMessage>* out) {
  auto f = fetches_.find(fetched.request_id());
  if (f == fetches_.end()) return;  // late (the request was answered at its timeout)
  const std::uint64_t id = f->second;
  fetches_.erase(f);
  for (const KeyTuple& t : fetched.tuples()) {
    if (t.error() == KEY_DNE && t.timestamp() != 0) {
      tombstones_.record(t.key(), t.timestamp(), now_);
      continue;
    }
    if (t.error() != NO_ERROR || stale_write(t.key(), 0)) continue;
    AnyLattice value;
    AnnaError err = decode_lattice(t.lattice_type(), t.payload(), &value);
    if (err == NO_ERROR) err = store_->merge(t.key(), value);
    if (err != NO_ERROR) {
      log_warning("worker " + id_.address + ": fetched value refused (" + AnnaError_Name(err) + ")");
      continue;
    }
    touch(t.key());
  }
  auto d = deferred_.find(id);
  if (d == deferred_.end()) return;
  auto& ids = d->second.fetch_ids;
  ids.erase(std::remove(ids.begin(), ids.end(), fetched.request_id()), ids.end());
  if (ids.empty()) answer_deferred(id, out);
}

void WorkerCore::answer_deferred(std::uint64_t id, std::vector<OutMessage>* out) {
  auto it = deferred_.find(id);
  if (it == deferred_.end()) return;
  Deferred& d = it->second;
  for (int idx : d.missing) {
    KeyTuple* t = d.response.mutable_tuples(idx);
    std::string key = t->key();
    t->Clear();
    t->set_key(key);
    int lattice_type = 0;
    AnnaError err = store_->get_encoded(key, &lattice_type, t->mutable_payload());
    if (err == NO_ERROR) t->set_lattice_type(static_cast<LatticeType>(lattice_type));
    else t->set_error(err);
  }
  for (const auto& rid : d.fetch_ids) fetches_.erase(rid);
  out->push_back(OutMessage{d.response_address, "", serialize_message(d.response)});
  deferred_.erase(it);
}

void WorkerCore::expire_fetches(std::vector<OutMessage>* out) {
  if (!previous_maps_.empty() && now_ >= window_until_) previous_maps_.clear();
  if (deferred_.empty()) return;
  std::vector<std::uint64_t> due;
  for (const auto& [id, d] : deferred_)
    if (d.deadline <= now_) due.push_back(id);
  std::sort(due.begin(), due.end());  // oldest first, for a deterministic order
  for (auto id : due) answer_deferred(id, out);
}

}  // namespace anna
