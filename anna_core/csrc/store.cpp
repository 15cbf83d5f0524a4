// MemoryStore and DiskStore. See store.hpp for the contract.
#include "store.hpp"

#include <fcntl.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/iterator.h>
#include <rocksdb/options.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <type_traits>
#include <variant>

#include "log.hpp"

namespace anna {

// ---------------------------------------------------------------- memory

std::uint64_t value_bytes(const AnyLattice& value) {
  return std::visit(
      [&value](const auto& l) -> std::uint64_t {
        using T = std::decay_t<decltype(l)>;
        if constexpr (std::is_same_v<T, LWWLattice>) return l.value.size() + 8;
        else if constexpr (std::is_same_v<T, PriorityLattice>) return l.value.size() + 8;
        else if constexpr (std::is_same_v<T, MaxLattice>) return 8;
        else return encode_lattice(value).size();
      },
      value);
}

void MemoryStore::account(const std::string& key, std::int64_t delta) {
  bytes_ = static_cast<std::uint64_t>(static_cast<std::int64_t>(bytes_) + delta);
  if (is_metadata_key(key))
    metadata_bytes_ = static_cast<std::uint64_t>(static_cast<std::int64_t>(metadata_bytes_) + delta);
}

AnnaError MemoryStore::merge(const std::string& key, const AnyLattice& value) {
  auto it = map_.find(key);
  if (it == map_.end()) {
    account(key, static_cast<std::int64_t>(key.size() + value_bytes(value)));
    map_.emplace(key, value);
    return NO_ERROR;
  }
  const std::uint64_t before = value_bytes(it->second);
  if (!merge_any(&it->second, value)) return LATTICE_MISMATCH;
  account(key, static_cast<std::int64_t>(value_bytes(it->second)) -
                   static_cast<std::int64_t>(before));
  return NO_ERROR;
}

AnnaError MemoryStore::get_encoded(const std::string& key, int* type, std::string* payload) {
  auto it = map_.find(key);
  if (it == map_.end()) return KEY_DNE;
  *type = lattice_type_of(it->second);
  encode_lattice(it->second, payload);
  return NO_ERROR;
}

AnnaError MemoryStore::get(const std::string& key, AnyLattice* out) {
  auto it = map_.find(key);
  if (it == map_.end()) return KEY_DNE;
  *out = it->second;
  return NO_ERROR;
}

AnnaError MemoryStore::remove(const std::string& key) {
  auto it = map_.find(key);
  if (it == map_.end()) return KEY_DNE;
  account(key, -static_cast<std::int64_t>(key.size() + value_bytes(it->second)));
  map_.erase(it);
  return NO_ERROR;
}

void MemoryStore::for_each(
    const std::function<void(const std::string&, const AnyLattice&)>& fn) {
  for (const auto& [k, v] : map_) fn(k, v);
}

std::uint64_t MemoryStore::value_size(const std::string& key) {
  auto it = map_.find(key);
  return it == map_.end() ? 0 : value_bytes(it->second);
}

std::size_t MemoryStore::scan_keys(
    std::size_t max_keys, const std::function<void(const std::string&, std::uint64_t)>& fn) {
  const std::size_t buckets = map_.bucket_count();
  if (map_.empty() || buckets == 0 || max_keys == 0) return 0;
  // Bounded work even when a shrunken map keeps many empty buckets.
  const std::size_t max_buckets = std::min(buckets, 16 * max_keys + 64);
  std::size_t visited = 0;
  std::size_t b = scan_bucket_ % buckets;
  for (std::size_t n = 0; n < max_buckets && visited < max_keys; ++n) {
    for (auto it = map_.cbegin(b); it != map_.cend(b); ++it) {
      fn(it->first, value_bytes(it->second));
      ++visited;
    }
    b = (b + 1) % buckets;
  }
  scan_bucket_ = b;
  return visited;
}


// Memory cursor: "m<bucket count>:<next bucket>" (the bucket count detects a rehash).
ScanPage MemoryStore::scan_page(const std::string& cursor, std::size_t max_keys,
                                std::size_t max_bytes, const ScanVisitor& fn) {
  ScanPage page;
  const std::size_t buckets = map_.bucket_count();
  std::size_t b = 0;
  if (!cursor.empty()) {
    unsigned long long count = 0, next = 0;
    char tail = 0;
    if (cursor[0] == 'm' &&
        std::sscanf(cursor.c_str() + 1, "%llu:%llu%c", &count, &next, &tail) == 2 &&
        count == buckets && next <= buckets) {
      b = static_cast<std::size_t>(next);
    } else {
      page.restarted = true;  // a rehash (or a foreign cursor): start over
    }
  }
  std::size_t keys = 0, bytes = 0;
  std::string payload;
  while (b < buckets && keys < max_keys && bytes < max_bytes) {
    for (auto it = map_.cbegin(b); it != map_.cend(b); ++it) {
      payload.clear();
      encode_lattice(it->second, &payload);
      ++keys;
      bytes += it->first.size() + payload.size();
      fn(it->first, lattice_type_of(it->second), std::move(payload));
    }
    ++b;
  }
  page.done = b >= buckets;
  if (!page.done) page.next_cursor = "m" + std::to_string(buckets) + ":" + std::to_string(b);
  return page;
}


// ---------------------------------------------------------------- disk

namespace {

constexpr std::uint64_t kKiB = 1024, kMiB = 1024 * kKiB, kGiB = 1024 * kMiB;
constexpr auto kMeasureEvery = std::chrono::milliseconds(50);
constexpr auto kReopenEvery = std::chrono::seconds(1);
constexpr auto kReserveEvery = std::chrono::seconds(5);
constexpr auto kRefusalLogEvery = std::chrono::seconds(10);
constexpr auto kReclaimBatch = std::chrono::milliseconds(200);

std::uint64_t clamp_bytes(std::uint64_t v, std::uint64_t lo, std::uint64_t hi) {
  return std::min(std::max(v, lo), hi);
}

std::string human(std::uint64_t bytes) {
  char buf[48];
  if (bytes >= kGiB) std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / double(kGiB));
  else if (bytes >= kMiB) std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / double(kMiB));
  else std::snprintf(buf, sizeof buf, "%.0f KiB", bytes / double(kKiB));
  return buf;
}

bool no_space(const rocksdb::Status& s) {
  return s.IsNoSpace() || s.ToString().find("No space left") != std::string::npos;
}

// Free bytes for unprivileged writers, or false when statvfs fails.
bool statvfs_free(const std::string& path, std::uint64_t* free_bytes, std::uint64_t* total) {
  struct statvfs st;
  if (::statvfs(path.c_str(), &st) != 0) return false;
  *free_bytes = static_cast<std::uint64_t>(st.f_bavail) * st.f_frsize;
  if (total != nullptr) *total = static_cast<std::uint64_t>(st.f_blocks) * st.f_frsize;
  return true;
}

// RocksDB's info log, sent to the process's stderr (the node's log) at WARN and above
// instead of a LOG file on the data disk (see store.hpp).
class StderrLogger final : public rocksdb::Logger {
 public:
  explicit StderrLogger(std::string prefix)
      : rocksdb::Logger(rocksdb::InfoLogLevel::WARN_LEVEL), prefix_(std::move(prefix)) {}
  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override {
    emit(rocksdb::InfoLogLevel::INFO_LEVEL, format, ap);
  }
  void Logv(const rocksdb::InfoLogLevel level, const char* format, va_list ap) override {
    // HEADER_LEVEL is the options dump at open: not for the node's log.
    if (level < GetInfoLogLevel() || level == rocksdb::InfoLogLevel::HEADER_LEVEL) return;
    emit(level, format, ap);
  }

 private:
  void emit(rocksdb::InfoLogLevel level, const char* format, va_list ap) {
    LogLevel ours = level >= rocksdb::InfoLogLevel::ERROR_LEVEL  ? LogLevel::kError
                    : level >= rocksdb::InfoLogLevel::WARN_LEVEL ? LogLevel::kWarning
                    : level >= rocksdb::InfoLogLevel::INFO_LEVEL ? LogLevel::kInfo
                                                                 : LogLevel::kDebug;
    if (!log_enabled(ours)) return;
    char buf[1024];
    va_list copy;
    va_copy(copy, ap);
    int n = std::vsnprintf(buf, sizeof buf, format, copy);
    va_end(copy);
    if (n < 0) return;
    std::string line = prefix_ + buf;
    while (!line.empty() && line.back() == '\n') line.pop_back();
    log_at(ours, line);
  }
  std::string prefix_;
};

}  // namespace

DiskLimits DiskLimits::for_filesystem(std::uint64_t fs_bytes) {
  DiskLimits l;
  l.fs_bytes = fs_bytes;
  l.write_floor = clamp_bytes(fs_bytes / 16, 4 * kMiB, 2 * kGiB);
  l.write_buffer = clamp_bytes(l.write_floor / 16, 256 * kKiB, 16 * kMiB);
  l.target_file = clamp_bytes(l.write_floor / 16, 256 * kKiB, 64 * kMiB);
  l.level1 = clamp_bytes(l.write_floor / 4, 1 * kMiB, 256 * kMiB);
  l.max_compaction = clamp_bytes(l.write_floor / 4, 1 * kMiB, 1 * kGiB);
  l.manifest = clamp_bytes(l.write_floor / 16, 256 * kKiB, 64 * kMiB);
  l.manifest_prealloc = clamp_bytes(l.write_floor / 64, 64 * kKiB, 4 * kMiB);
  // Opening may flush the recovered WAL (the memtable and up to two immutable ones, each
  // somewhat over write_buffer), and writes a new WAL (preallocated to 1.1 memtables), a new
  // MANIFEST (preallocated), an OPTIONS file and CURRENT; the killed process's leftovers
  // are deleted only at the end of the open. Twice that, to be safe.
  l.emergency = 6 * l.write_buffer + l.manifest_prealloc + 1 * kMiB;
  l.reserve = std::max(l.emergency, std::min(l.write_floor / 4, 256 * kMiB));
  return l;
}

bool parse_disk_sync(const std::string& text, DiskSync* out) {
  if (text == "none") *out = DiskSync::kNone;
  else if (text == "interval") *out = DiskSync::kInterval;
  else if (text == "always") *out = DiskSync::kAlways;
  else return false;
  return true;
}

const char* disk_sync_name(DiskSync mode) {
  switch (mode) {
    case DiskSync::kNone: return "none";
    case DiskSync::kInterval: return "interval";
    case DiskSync::kAlways: return "always";
  }
  return "?";
}

std::string DiskStore::path_for(const std::string& data_dir, const std::string& node_id,
                                int thread_id) {
  return (std::filesystem::path(data_dir) / node_id / std::to_string(thread_id)).string();
}

DiskStore::DiskStore(const std::string& path, DiskSyncPolicy sync)
    : path_(path), reserve_path_(path + ".reserve"), sync_(sync) {
  synced_at_ = Clock::now();
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) throw std::runtime_error("DiskStore: cannot create " + path + ": " + ec.message());
  std::uint64_t free_bytes = 0, total = 0;
  statvfs_free(path_, &free_bytes, &total);
  limits_ = DiskLimits::for_filesystem(total);
  logger_ = std::make_shared<StderrLogger>("rocksdb " + path_ + ": ");
  measure();  // releases the reserve when space is short, so the open below has room
  open_db();
  if (!read_only_) {
    maybe_restore_reserve();
    measure();
    full_ = free_ < limits_.write_floor;
  }
}

DiskStore::~DiskStore() { close_db(); }

void DiskStore::open_db() {
  rocksdb::Options options;
  options.create_if_missing = true;
  options.write_buffer_size = limits_.write_buffer;
  options.target_file_size_base = limits_.target_file;
  options.max_bytes_for_level_base = limits_.level1;
  options.max_compaction_bytes = limits_.max_compaction;
  options.max_manifest_file_size = limits_.manifest;
  options.manifest_preallocation_size = limits_.manifest_prealloc;
  options.max_open_files = 256;
  options.info_log = logger_;
  options.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  options.avoid_flush_during_recovery = true;  // opening needs no room for the WAL's data
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, path_, &db);
  if (s.ok()) {
    db_.reset(db);
    read_only_ = false;
    read_only_why_.clear();
  } else if (no_space(s)) {
    // No room to open for writing: serve reads from a read-only open (it writes nothing).
    rocksdb::Status ro = rocksdb::DB::OpenForReadOnly(options, path_, &db);
    if (!ro.ok())
      throw std::runtime_error("DiskStore: cannot open " + path_ + ": " + s.ToString() +
                               "; nor read-only: " + ro.ToString());
    db_.reset(db);
    read_only_ = true;
    read_only_why_ = s.ToString();
    measure();
    log_warning("DiskStore " + path_ + ": disk full: opened READ-ONLY (" + read_only_why_ +
                "); " + space_summary() + ". Reads work; writes and deletes answer DISK_FULL "
                "until " + human(limits_.emergency) + " is free.");
  } else {
    throw std::runtime_error("DiskStore: cannot open " + path_ + ": " + s.ToString());
  }
  uint64_t keys = 0;
  approximate_size_ = db_->GetIntProperty("rocksdb.estimate-num-keys", &keys) ? keys : 0;
}

std::uint64_t DiskStore::stored_bytes() const {
  if (!db_) return 0;
  // Live data in SST files plus what is still in the memtables (not yet flushed).
  std::uint64_t live = 0, mem = 0;
  if (!db_->GetIntProperty("rocksdb.estimate-live-data-size", &live)) live = 0;
  if (!db_->GetIntProperty("rocksdb.cur-size-all-mem-tables", &mem)) mem = 0;
  return live + mem;
}

void DiskStore::sync_wal() {
  unsynced_ = false;
  synced_at_ = Clock::now();
  // Not after RocksDB reported no space: it is reopened first (syncing a WAL in that error
  // state trips an assertion in Debian's librocksdb); the reopen replays the WAL.
  if (!db_ || read_only_ || needs_reopen_) return;
  rocksdb::Status s = db_->SyncWAL();
  ++syncs_;
  if (!s.ok()) {
    ++sync_failures_;
    log_warning("DiskStore " + path_ + ": syncing the write-ahead log failed: " + s.ToString());
  }
}

void DiskStore::sync_due() {
  if (sync_.mode != DiskSync::kInterval || !unsynced_) return;
  if (Clock::now() - synced_at_ >= sync_.interval) sync_wal();
}

void DiskStore::close_db() {
  stop_reclaim();
  if (!db_) return;
  if (unsynced_ && sync_.mode == DiskSync::kInterval) sync_wal();
  rocksdb::Status s = db_->Close();
  if (!s.ok()) log_warning("DiskStore close " + path_ + ": " + s.ToString());
  db_.reset();
}

std::string DiskStore::space_summary() const {
  if (!statvfs_ok_) return path_ + ": free space unknown (statvfs failed)";
  return path_ + " has " + human(free_) + " free of " + human(limits_.fs_bytes);
}

bool DiskStore::measure() {
  measured_at_ = Clock::now();
  written_since_ = 0;
  std::uint64_t free_bytes = 0;
  if (!statvfs_free(path_, &free_bytes, nullptr)) {
    if (statvfs_ok_)
      log_warning("DiskStore " + path_ + ": statvfs: " + std::strerror(errno) +
                  "; free space is not checked");
    statvfs_ok_ = false;
    free_ = UINT64_MAX / 4;
    return false;
  }
  statvfs_ok_ = true;
  free_ = free_bytes;
  if (free_ < limits_.emergency && ::access(reserve_path_.c_str(), F_OK) == 0) {
    release_reserve("free space is below " + human(limits_.emergency));
    if (statvfs_free(path_, &free_bytes, nullptr)) free_ = free_bytes;
  }
  return true;
}

void DiskStore::release_reserve(const std::string& why) {
  if (::unlink(reserve_path_.c_str()) == 0) {
    log_warning("DiskStore " + path_ + ": released the " + human(limits_.reserve) +
                " reserve file " + reserve_path_ + " (" + why + ")");
  } else if (errno != ENOENT) {
    log_warning("DiskStore " + path_ + ": cannot remove the reserve file " + reserve_path_ +
                ": " + std::strerror(errno));
  }
}

void DiskStore::maybe_restore_reserve() {
  const auto now = Clock::now();
  if (read_only_ || reserve_unsupported_ || now - last_reserve_try_ < kReserveEvery) return;
  last_reserve_try_ = now;
  if (::access(reserve_path_.c_str(), F_OK) == 0) return;
  if (free_ < written_since_ + limits_.write_floor + limits_.reserve) return;
  const std::string tmp = reserve_path_ + ".tmp";
  int fd = ::open(tmp.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  // fallocate(2) really allocates the blocks; where it is unsupported there is no reserve
  // (writing zeros instead would be slow, and free on compressing filesystems).
  int rc = ::fallocate(fd, 0, 0, static_cast<off_t>(limits_.reserve));
  int why = rc == 0 ? 0 : errno;
  ::close(fd);
  if (rc != 0 || ::rename(tmp.c_str(), reserve_path_.c_str()) != 0) {
    ::unlink(tmp.c_str());
    if (!reserve_unsupported_ && (why == EOPNOTSUPP || why == ENOSYS)) {
      reserve_unsupported_ = true;
      log_warning("DiskStore " + path_ + ": the filesystem cannot preallocate a reserve file (" +
                  std::strerror(why) + "); running without one");
    }
    return;
  }
  measure();
}

void DiskStore::maybe_reopen() {
  if (!needs_reopen_ && !read_only_) return;
  const auto now = Clock::now();
  if (now - last_open_try_ < kReopenEvery) return;
  last_open_try_ = now;
  measure();
  if (read_only_ && free_ < limits_.emergency) return;  // still no room to open for writing
  log_warning("DiskStore " + path_ + ": reopening " +
              (read_only_ ? std::string("for writing") : "after RocksDB ran out of space") +
              " (" + space_summary() + ")");
  try {
    close_db();
    open_db();
    needs_reopen_ = false;
  } catch (const std::exception& e) {
    log_error(std::string("DiskStore: ") + e.what());
  }
  if (db_ && !read_only_) {
    measure();
    maybe_restore_reserve();
    full_ = free_ < limits_.write_floor;
  }
}

AnnaError DiskStore::admit_write(std::size_t bytes) {
  maybe_reopen();
  if (!db_) {
    detail_ = "store " + path_ + " is not open (see the node's log)";
    return STORE_FAILED;
  }
  const std::uint64_t need = bytes + limits_.write_floor;
  if (read_only_) {
    full_ = true;
    detail_ = "disk full: " + path_ + " is open read-only (opening it for writing failed: " +
              read_only_why_ + "); " + space_summary();
    return DISK_FULL;
  }
  if (Clock::now() - measured_at_ >= kMeasureEvery ||
      free_ < written_since_ + need + limits_.write_floor / 4) {
    measure();
    maybe_restore_reserve();
  }
  if (free_ >= written_since_ + need) {
    written_since_ += bytes;
    full_ = false;
    return NO_ERROR;
  }
  const auto now = Clock::now();
  if (!full_ || now - last_refusal_log_ >= kRefusalLogEvery) {
    last_refusal_log_ = now;
    log_warning("DiskStore " + path_ + ": disk full, refusing writes: " + space_summary() +
                "; writes need " + human(limits_.write_floor) + " free");
  }
  full_ = true;
  detail_ = "disk full: " + space_summary() + "; a write needs " + human(need) +
            " free (the store keeps " + human(limits_.write_floor) +
            " for deletes, flushes and compactions)";
  if (deletes_since_reclaim_ > 0) schedule_reclaim();
  return DISK_FULL;
}

AnnaError DiskStore::rocksdb_failed(const char* op, const std::string& status, bool space) {
  if (space) {
    needs_reopen_ = true;
    full_ = true;
    release_reserve("RocksDB ran out of space");
    measure();
    detail_ = std::string("disk full: RocksDB ") + op + " failed: " + status + "; " +
              space_summary();
    log_warning("DiskStore " + path_ + ": " + detail_ + "; reopening before the next write");
    return DISK_FULL;
  }
  detail_ = std::string("RocksDB ") + op + " in " + path_ + " failed: " + status;
  log_warning("DiskStore: " + detail_);
  return STORE_FAILED;
}

AnnaError DiskStore::read(const std::string& key, std::string* record) {
  if (!db_) {
    detail_ = "store " + path_ + " is not open (see the node's log)";
    return STORE_FAILED;
  }
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), key, record);
  if (s.IsNotFound()) return KEY_DNE;
  if (!s.ok()) return rocksdb_failed("get", s.ToString(), false);
  if (record->empty()) {
    detail_ = "store " + path_ + ": empty record";
    log_warning("DiskStore " + detail_);
    return STORE_FAILED;
  }
  return NO_ERROR;
}

AnnaError DiskStore::write(const std::string& key, const AnyLattice& value) {
  scratch_.assign(1, static_cast<char>(lattice_type_of(value)));
  std::visit([this](const auto& l) {
    std::string payload;
    encode_to(l, &payload);
    scratch_ += payload;
  }, value);
  // WAL record overhead included; the memtable flush and compactions are within the floor.
  AnnaError err = admit_write(key.size() + scratch_.size() + 64);
  if (err != NO_ERROR) return err;
  rocksdb::WriteOptions wo;  // WAL on (the default); fsync'ed per write only if kAlways
  wo.sync = sync_.mode == DiskSync::kAlways;
  rocksdb::Status s = db_->Put(wo, key, scratch_);
  if (!s.ok()) return rocksdb_failed("put", s.ToString(), no_space(s));
  if (wo.sync) ++syncs_;
  else unsynced_ = true;
  return NO_ERROR;
}

static bool decode_record(const std::string& record, AnyLattice* out) {
  if (record.empty()) return false;
  int type = static_cast<unsigned char>(record[0]);
  return decode_lattice(type, std::string_view(record).substr(1), out) == NO_ERROR;
}

AnnaError DiskStore::merge(const std::string& key, const AnyLattice& value) {
  std::string record;
  AnnaError err = read(key, &record);
  if (err == KEY_DNE) {
    err = write(key, value);
    if (err == NO_ERROR) ++approximate_size_;
    return err;
  }
  if (err != NO_ERROR) return err;
  if (static_cast<unsigned char>(record[0]) != lattice_type_of(value)) return LATTICE_MISMATCH;
  AnyLattice stored;
  if (!decode_record(record, &stored)) {
    detail_ = "store " + path_ + ": undecodable record; left as is";
    log_warning("DiskStore " + detail_);
    return STORE_FAILED;
  }
  merge_any(&stored, value);
  return write(key, stored);
}

AnnaError DiskStore::get_encoded(const std::string& key, int* type, std::string* payload) {
  std::string record;
  AnnaError err = read(key, &record);
  if (err != NO_ERROR) return err;
  *type = static_cast<unsigned char>(record[0]);
  payload->assign(record, 1, std::string::npos);
  return NO_ERROR;
}

AnnaError DiskStore::get(const std::string& key, AnyLattice* out) {
  std::string record;
  AnnaError err = read(key, &record);
  if (err != NO_ERROR) return err;
  if (decode_record(record, out)) return NO_ERROR;
  detail_ = "store " + path_ + ": undecodable record";
  return STORE_FAILED;
}

AnnaError DiskStore::remove(const std::string& key) {
  std::string record;
  AnnaError err = read(key, &record);
  if (err != NO_ERROR) return err;
  maybe_reopen();
  if (!db_) return read(key, &record);  // reopening failed: not open
  if (read_only_) {
    detail_ = "disk full: " + path_ + " is open read-only (opening it for writing failed: " +
              read_only_why_ + "); " + space_summary();
    return DISK_FULL;
  }
  // Deletes are not refused for space; measuring releases the reserve if space is short.
  if (Clock::now() - measured_at_ >= kMeasureEvery) measure();
  rocksdb::WriteOptions wo;
  wo.sync = sync_.mode == DiskSync::kAlways;
  rocksdb::Status s = db_->Delete(wo, key);
  if (!s.ok()) return rocksdb_failed("delete", s.ToString(), no_space(s));
  if (wo.sync) ++syncs_;
  else unsynced_ = true;
  written_since_ += key.size() + 64;
  if (approximate_size_ > 0) --approximate_size_;
  ++deletes_since_reclaim_;
  if (full_) schedule_reclaim();
  return NO_ERROR;
}

void DiskStore::for_each(const std::function<void(const std::string&, const AnyLattice&)>& fn) {
  if (!db_) return;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  AnyLattice value;
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    std::string record = it->value().ToString();
    if (!decode_record(record, &value)) continue;
    fn(it->key().ToString(), value);
  }
  if (!it->status().ok())
    log_warning("DiskStore scan in " + path_ + ": " + it->status().ToString());
}

std::uint64_t DiskStore::value_size(const std::string& key) {
  if (!db_) return 0;
  rocksdb::ReadOptions options;
  options.fill_cache = false;  // statistics must not evict the serving path's blocks
  rocksdb::PinnableSlice record;
  rocksdb::Status s = db_->Get(options, db_->DefaultColumnFamily(), key, &record);
  if (!s.ok() || record.size() == 0) return 0;
  return record.size() - 1;  // less the lattice-type byte
}

std::size_t DiskStore::scan_keys(
    std::size_t max_keys, const std::function<void(const std::string&, std::uint64_t)>& fn) {
  if (!db_ || max_keys == 0) return 0;
  rocksdb::ReadOptions options;
  options.fill_cache = false;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(options));
  const std::string start = scan_after_;
  std::size_t visited = 0;
  bool wrapped = start.empty();
  if (start.empty()) it->SeekToFirst();
  else {
    it->Seek(start);
    if (it->Valid() && it->key() == rocksdb::Slice(start)) it->Next();
  }
  while (visited < max_keys) {
    if (!it->Valid()) {
      if (wrapped || !it->status().ok()) break;
      wrapped = true;  // once around: from the first key up to where this call began
      it->SeekToFirst();
      continue;
    }
    if (wrapped && !start.empty() && it->key().compare(rocksdb::Slice(start)) > 0) break;
    std::string key = it->key().ToString();
    const std::size_t size = it->value().size();
    fn(key, size == 0 ? 0 : size - 1);
    scan_after_ = std::move(key);
    ++visited;
    if (wrapped && !start.empty() && scan_after_ == start) break;
    it->Next();
  }
  if (!it->status().ok())
    log_warning("DiskStore key scan in " + path_ + ": " + it->status().ToString());
  if (visited == 0) scan_after_.clear();
  return visited;
}

// Disk cursor: "d" + the last key visited.
ScanPage DiskStore::scan_page(const std::string& cursor, std::size_t max_keys,
                              std::size_t max_bytes, const ScanVisitor& fn) {
  ScanPage page;
  if (!db_) {
    page.error = STORE_FAILED;
    detail_ = "store " + path_ + ": not open";
    return page;
  }
  std::string after;
  if (!cursor.empty()) {
    if (cursor[0] == 'd') after = cursor.substr(1);
    else page.restarted = true;
  }
  rocksdb::ReadOptions options;
  options.fill_cache = false;  // a backup must not evict the serving path's blocks
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(options));
  if (after.empty()) it->SeekToFirst();
  else {
    it->Seek(after);
    if (it->Valid() && it->key() == rocksdb::Slice(after)) it->Next();
  }
  std::size_t keys = 0, bytes = 0;
  std::string last;
  for (; it->Valid() && keys < max_keys && bytes < max_bytes; it->Next()) {
    rocksdb::Slice record = it->value();
    if (record.size() == 0) continue;
    last = it->key().ToString();
    ++keys;
    bytes += last.size() + record.size() - 1;
    fn(last, static_cast<unsigned char>(record[0]), std::string(record.data() + 1, record.size() - 1));
  }
  if (!it->status().ok()) {
    page.error = STORE_FAILED;
    detail_ = "store " + path_ + ": scan: " + it->status().ToString();
    return page;
  }
  page.done = !it->Valid();
  if (!page.done) page.next_cursor = "d" + last;
  return page;
}

// ---- reclaiming space after deletes on a full disk (the helper thread)

void DiskStore::schedule_reclaim() {
  if (!db_ || read_only_) return;
  deletes_since_reclaim_ = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    reclaim_pending_ = true;
  }
  if (!reclaim_thread_.joinable()) reclaim_thread_ = std::thread([this] { reclaim_loop(); });
  cv_.notify_all();
}

void DiskStore::stop_reclaim() {
  if (!reclaim_thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    reclaim_stop_ = true;
  }
  cv_.notify_all();
  if (db_) db_->DisableManualCompaction();  // a running CompactRange returns early
  reclaim_thread_.join();
  if (db_) db_->EnableManualCompaction();
  reclaim_stop_ = false;
  reclaim_pending_ = false;
}

void DiskStore::reclaim_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return reclaim_stop_ || reclaim_pending_; });
    if (reclaim_stop_) return;
    // Let the deletes of the next moments join this round.
    if (cv_.wait_for(lock, kReclaimBatch, [this] { return reclaim_stop_; })) return;
    reclaim_pending_ = false;
    lock.unlock();
    // db_, path_ and limits_ do not change while this thread runs (close_db joins it first).
    std::uint64_t free_bytes = 0;
    bool known = statvfs_free(path_, &free_bytes, nullptr);
    if (known && free_bytes < limits_.write_floor / 2) {
      log_warning("DiskStore " + path_ + ": only " + human(free_bytes) +
                  " free: not compacting away deleted data (a compaction may need " +
                  human(limits_.write_floor / 2) + "); free space on the filesystem");
    } else {
      rocksdb::FlushOptions fo;
      fo.wait = true;
      rocksdb::Status s = db_->Flush(fo);
      rocksdb::CompactRangeOptions co;
      co.exclusive_manual_compaction = false;
      if (s.ok()) s = db_->CompactRange(co, nullptr, nullptr);
      std::uint64_t after = 0;
      statvfs_free(path_, &after, nullptr);
      if (s.ok())
        log_info("DiskStore " + path_ + ": compacted after deletes on a full disk; " +
                 human(after) + " free (was " + human(free_bytes) + ")");
      else if (!s.IsIncomplete())
        log_warning("DiskStore " + path_ + ": compaction after deletes failed: " + s.ToString());
    }
    lock.lock();
  }
}

}  // namespace anna
