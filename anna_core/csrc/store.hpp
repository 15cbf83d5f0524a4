// A worker's private key -> lattice storage: MemoryStore (a hash map) and DiskStore (one
// RocksDB instance per disk worker thread, at data_dir/<node_id>/<thread_id>).
//
// Contract:
//   * Every operation returns a typed anna::AnnaError and never throws after construction.
//     After STORE_FAILED or DISK_FULL, error_detail() says what failed and where (for people;
//     the worker sends it to the client). MemoryStore never fails.
//   * merge(key, value) merges value into the stored lattice (or stores it when absent) and
//     returns NO_ERROR, or LATTICE_MISMATCH (store untouched) when the key holds another
//     lattice type. DiskStore may also return STORE_FAILED (RocksDB error, or a stored record
//     that does not decode; the record is then left untouched) or DISK_FULL (below; nothing
//     was written).
//   * get_encoded(key, &type, &payload) returns NO_ERROR with the lattice type and its wire
//     payload (DiskStore returns the stored bytes without decoding), KEY_DNE, or STORE_FAILED.
//   * remove(key) returns NO_ERROR, KEY_DNE, STORE_FAILED or (DiskStore) DISK_FULL.
//     for_each visits every decodable (key, lattice).
//   * For the statistics (DESIGN.md "Statistics"), off the request path: value_size(key) is
//     the stored value's size in bytes, 0 when the key is not stored (or cannot be read):
//     MemoryStore value_bytes() of the value (a hash lookup); DiskStore the stored record's
//     size less its type byte (one RocksDB point read, not decoded, not cached).
//     scan_keys(max_keys, fn) visits about max_keys stored keys (MemoryStore: whole hash
//     buckets, at most 16 * max_keys + 64 buckets per call; DiskStore: at most max_keys keys),
//     continuing after where the previous call stopped and wrapping around at the end, so
//     repeated calls rotate over every key of an unchanging store; fn(key, value_size). It
//     returns how many keys it visited.
//   * scan_page(cursor, max_keys, max_bytes, fn) is the backup's enumeration (kind "scan"):
//     fn(key, lattice type, payload) for the stored keys of one page, resuming after `cursor`
//     ("" = from the start; else a previous page's next_cursor). A page ends after the key
//     that reaches max_keys or max_bytes of payload. MemoryStore pages are whole hash buckets
//     and its cursor names the bucket count: if the table grew (rehashed) since, the scan
//     starts over (restarted = true), so a key stored throughout is visited at least once.
//     DiskStore pages follow RocksDB's key order after the last key visited (a key stored
//     throughout is visited exactly once). STORE_FAILED when RocksDB's iterator fails.
//   * DiskStore record = one lattice-type byte + payload. Writes and deletes go through
//     RocksDB's WAL, which is written before merge/remove return, so an acknowledged write
//     always survives a clean restart and a kill -9 of the process. Durability against an
//     OS crash or power loss is the DiskSync policy's ("Durability" below). Opening fails (std::runtime_error) if the
//     directory cannot be created, is locked by another process, or cannot be opened even
//     read-only.
//   * A store belongs to one worker thread (no locks on its operations). DiskStore runs one
//     helper thread of its own, only to compact after deletes on a full disk (below).
//
// DiskStore and disk space (DESIGN.md "When the disk fills" says it for users). A RocksDB
// that meets ENOSPC stops every write, deletes included, until it is reopened, and cannot
// reopen on a full disk if it must flush its WAL first; Debian's librocksdb is built with
// assertions, and its info LOG file on a full disk aborts the process. So this store never
// lets RocksDB run out of space through its own writes:
//   * Limits (DiskLimits::for_filesystem) come from the size of the filesystem at open:
//     write_floor = fs/16 in [4 MiB, 2 GiB]. RocksDB's memtable, SST file, level-1 and
//     per-compaction sizes are scaled to it, so a flush plus one compaction need at most
//     about write_floor/2 of scratch space.
//   * merge is refused with DISK_FULL (nothing stored) when the filesystem's free space
//     (statvfs f_bavail; re-read at least every 50 ms and on every write near the floor)
//     minus the record would fall below write_floor. That space stays for deletes, flushes
//     and compactions. Deletes are never refused for space.
//   * The reserve: a preallocated file `<path>.reserve` of `reserve` bytes (write_floor/4,
//     at least `emergency`), created at open and re-created once free space is at least
//     write_floor + reserve. It is deleted ("released", with a WARNING) whenever free space
//     is found below `emergency` (about twice what an open may write: 6 memtables, the
//     MANIFEST's preallocation, 1 MiB) - before opening, or at any write -
//     so a disk filled by something else still lets this store open, delete and flush.
//   * Reclaiming: once a write was refused, deletes make the helper thread flush the
//     memtable and compact the whole store (after 200 ms, to batch them; one at a time),
//     when at least write_floor/2 is free; so deleted data turns into free space and writes
//     are admitted again as soon as free space is back above write_floor.
//   * Opening never flushes the recovered WAL (avoid_flush_during_recovery) and RocksDB's
//     info log goes to the process's stderr at WARN (no LOG file on the data disk). A
//     read-write open is tried first; if it fails (no space even after releasing the
//     reserve) the store opens read-only: reads work, merge and remove answer DISK_FULL,
//     and a write retries the read-write open (at most once a second) once `emergency`
//     bytes are free.
//   * If RocksDB still reports "no space" (another process filled the disk), the write
//     answers DISK_FULL, the reserve is released, and the DB is reopened before a later
//     write (at most once a second): the WAL is replayed, nothing acknowledged is lost.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "lattice_codec.hpp"

namespace rocksdb {
class DB;
class Logger;
}

namespace anna {

// Durability: when a DiskStore fsyncs RocksDB's write-ahead log.
//   * kAlways: every write and delete is synced before merge/remove return
//     (rocksdb::WriteOptions::sync), so an acknowledged write survives an OS crash or power
//     loss. Costs one fsync per write.
//   * kInterval (the default): a group commit. sync_due(now), which the node's worker loop
//     calls after each batch of messages and at least every 50 ms, syncs the WAL
//     (DB::SyncWAL) once `interval` has passed since the last sync and something was written
//     since. An OS crash loses at most the writes acknowledged in the last interval (plus one
//     loop turn), as Redis's appendfsync everysec. Closing the store syncs too.
//   * kNone: never synced by this store; the OS writes the WAL back when it likes.
// syncs() counts the WAL syncs this store made or asked RocksDB for (per-write syncs
// included); a failed sync is logged and counted in sync_failures().
enum class DiskSync { kNone = 0, kInterval = 1, kAlways = 2 };
bool parse_disk_sync(const std::string& text, DiskSync* out);  // "none"|"interval"|"always"
const char* disk_sync_name(DiskSync mode);

struct DiskSyncPolicy {
  DiskSync mode = DiskSync::kNone;
  std::chrono::milliseconds interval{1000};
};

// One page of Store::scan_page (see the contract).
struct ScanPage {
  std::string next_cursor;
  bool done = false;
  bool restarted = false;
  AnnaError error = NO_ERROR;
};
using ScanVisitor = std::function<void(const std::string& key, int type, std::string&& payload)>;

class Store {
 public:
  virtual ~Store() = default;
  virtual AnnaError merge(const std::string& key, const AnyLattice& value) = 0;
  virtual AnnaError get_encoded(const std::string& key, int* type, std::string* payload) = 0;
  virtual AnnaError get(const std::string& key, AnyLattice* out) = 0;
  virtual AnnaError remove(const std::string& key) = 0;
  virtual void for_each(const std::function<void(const std::string&, const AnyLattice&)>& fn) = 0;
  virtual std::size_t size() const = 0;
  virtual std::uint64_t value_size(const std::string& key) = 0;
  virtual std::size_t scan_keys(std::size_t max_keys,
                                const std::function<void(const std::string&, std::uint64_t)>& fn) = 0;
  virtual ScanPage scan_page(const std::string& cursor, std::size_t max_keys,
                             std::size_t max_bytes, const ScanVisitor& fn) = 0;
  // Payload bytes held (keys + values), an estimate: MemoryStore tracks it on every write
  // (value_bytes() below); DiskStore reads RocksDB's rocksdb.estimate-live-data-size.
  virtual std::uint64_t stored_bytes() const = 0;
  // The part of stored_bytes() that is the cluster's bookkeeping (keys under "__anna__/":
  // statistics, persisted replication, the monitor's status). Reports leave it out, so that
  // the autoscaling policy sizes tiers for the workload alone. MemoryStore tracks it exactly;
  // DiskStore answers 0 (its stored_bytes() is a RocksDB estimate that cannot be split).
  virtual std::uint64_t metadata_bytes() const { return 0; }
  // What the last STORE_FAILED or DISK_FULL was about ("" if none).
  virtual const std::string& error_detail() const = 0;
  // Group commit ("Durability"): sync what was written if the policy says it is due.
  virtual void sync_due() {}
  virtual std::uint64_t syncs() const { return 0; }
  virtual std::uint64_t sync_failures() const { return 0; }
};

// Whether `key` is the cluster's own bookkeeping ("__anna__/..."), not workload.
inline bool is_metadata_key(const std::string& key) {
  static const std::string kMetadata = "__anna__/";
  return key.compare(0, kMetadata.size(), kMetadata) == 0;
}

// An estimate of a value's size in bytes: exact payload sizes for LWW, priority and max
// values (O(1)); the encoded size for the collection lattices.
std::uint64_t value_bytes(const AnyLattice& value);

class MemoryStore final : public Store {
 public:
  AnnaError merge(const std::string& key, const AnyLattice& value) override;
  AnnaError get_encoded(const std::string& key, int* type, std::string* payload) override;
  AnnaError get(const std::string& key, AnyLattice* out) override;
  AnnaError remove(const std::string& key) override;
  void for_each(const std::function<void(const std::string&, const AnyLattice&)>& fn) override;
  std::size_t size() const override { return map_.size(); }
  std::uint64_t value_size(const std::string& key) override;
  std::size_t scan_keys(std::size_t max_keys,
                        const std::function<void(const std::string&, std::uint64_t)>& fn) override;
  ScanPage scan_page(const std::string& cursor, std::size_t max_keys, std::size_t max_bytes,
                     const ScanVisitor& fn) override;
  std::uint64_t stored_bytes() const override { return bytes_; }
  std::uint64_t metadata_bytes() const override { return metadata_bytes_; }
  const std::string& error_detail() const override { return detail_; }

 private:
  void account(const std::string& key, std::int64_t delta);

  std::unordered_map<std::string, AnyLattice> map_;
  std::uint64_t bytes_ = 0;
  std::uint64_t metadata_bytes_ = 0;   // the part of bytes_ under "__anna__/"

  std::size_t scan_bucket_ = 0;  // scan_keys' cursor: the next bucket to visit
  std::string detail_;
};

// Space limits of one DiskStore, in bytes (see the contract above).
struct DiskLimits {
  std::uint64_t fs_bytes = 0;        // size of the filesystem
  std::uint64_t write_floor = 0;     // writes keep at least this much free
  std::uint64_t emergency = 0;       // below this much free, the reserve is released
  std::uint64_t reserve = 0;         // size of the reserve file
  std::uint64_t write_buffer = 0;    // RocksDB write_buffer_size (memtable, WAL per memtable)
  std::uint64_t target_file = 0;     // target_file_size_base
  std::uint64_t level1 = 0;          // max_bytes_for_level_base
  std::uint64_t max_compaction = 0;  // max_compaction_bytes
  std::uint64_t manifest = 0;        // max_manifest_file_size
  std::uint64_t manifest_prealloc = 0;  // manifest_preallocation_size (RocksDB: 4 MiB)
  static DiskLimits for_filesystem(std::uint64_t fs_bytes);
};

class DiskStore final : public Store {
 public:
  // Opens (creating if needed) the RocksDB instance at `path` (read-only when it cannot be
  // opened for writing for lack of space).
  explicit DiskStore(const std::string& path, DiskSyncPolicy sync = {});
  ~DiskStore() override;
  DiskStore(const DiskStore&) = delete;
  DiskStore& operator=(const DiskStore&) = delete;

  AnnaError merge(const std::string& key, const AnyLattice& value) override;
  AnnaError get_encoded(const std::string& key, int* type, std::string* payload) override;
  AnnaError get(const std::string& key, AnyLattice* out) override;
  AnnaError remove(const std::string& key) override;
  void for_each(const std::function<void(const std::string&, const AnyLattice&)>& fn) override;
  std::size_t size() const override { return approximate_size_; }
  std::uint64_t value_size(const std::string& key) override;
  std::size_t scan_keys(std::size_t max_keys,
                        const std::function<void(const std::string&, std::uint64_t)>& fn) override;
  ScanPage scan_page(const std::string& cursor, std::size_t max_keys, std::size_t max_bytes,
                     const ScanVisitor& fn) override;
  std::uint64_t stored_bytes() const override;
  const std::string& error_detail() const override { return detail_; }
  void sync_due() override;
  std::uint64_t syncs() const override { return syncs_; }
  std::uint64_t sync_failures() const override { return sync_failures_; }
  const DiskSyncPolicy& sync_policy() const { return sync_; }

  const DiskLimits& limits() const { return limits_; }
  bool read_only() const { return read_only_; }

  static std::string path_for(const std::string& data_dir, const std::string& node_id,
                              int thread_id);

 private:
  using Clock = std::chrono::steady_clock;

  AnnaError read(const std::string& key, std::string* record);
  AnnaError write(const std::string& key, const AnyLattice& value);
  void open_db();                       // read-write, else read-only; throws if neither
  void close_db();
  bool measure();                       // refreshes free_; false if statvfs failed
  AnnaError admit_write(std::size_t bytes);
  void before_delete();
  AnnaError rocksdb_failed(const char* op, const std::string& status, bool no_space);
  void maybe_reopen();
  void release_reserve(const std::string& why);
  void maybe_restore_reserve();
  void schedule_reclaim();
  void stop_reclaim();
  void reclaim_loop();
  std::string space_summary() const;

  void sync_wal();

  std::string path_;
  std::string reserve_path_;
  DiskSyncPolicy sync_;
  bool unsynced_ = false;             // written since the last WAL sync (kInterval)
  Clock::time_point synced_at_{};
  std::uint64_t syncs_ = 0;
  std::uint64_t sync_failures_ = 0;
  DiskLimits limits_;
  std::shared_ptr<rocksdb::Logger> logger_;
  std::unique_ptr<rocksdb::DB> db_;
  bool read_only_ = false;
  std::string read_only_why_;
  std::size_t approximate_size_ = 0;
  std::string scan_after_;  // scan_keys' cursor: the last key visited ("" = from the start)
  std::string scratch_;
  std::string detail_;

  // Free space: the last statvfs reading, and what this store wrote since.
  std::uint64_t free_ = 0;
  std::uint64_t written_since_ = 0;
  Clock::time_point measured_at_{};
  bool statvfs_ok_ = true;
  bool reserve_unsupported_ = false;  // fallocate(2) is not supported here
  bool full_ = false;              // a write was refused and none admitted since
  std::uint64_t deletes_since_reclaim_ = 0;
  bool needs_reopen_ = false;      // RocksDB reported no space: reopen before writing
  Clock::time_point last_open_try_{};  // of maybe_reopen (the first one runs at once)
  Clock::time_point last_reserve_try_{};
  Clock::time_point last_refusal_log_{};

  // The reclaim helper thread (started on first use).
  std::mutex mu_;
  std::condition_variable cv_;
  bool reclaim_pending_ = false;
  bool reclaim_stop_ = false;
  std::thread reclaim_thread_;
};

}  // namespace anna
