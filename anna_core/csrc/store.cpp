// MemoryStore and DiskStore. See store.hpp for the contract.
#include "store.hpp"

#include <rocksdb/db.h>
#include <rocksdb/iterator.h>
#include <rocksdb/options.h>

#include <filesystem>
#include <iostream>
#include <stdexcept>

namespace anna {

// ---------------------------------------------------------------- memory

AnnaError MemoryStore::merge(const std::string& key, const AnyLattice& value) {
  auto it = map_.find(key);
  if (it == map_.end()) {
    map_.emplace(key, value);
    return NO_ERROR;
  }
  return merge_any(&it->second, value) ? NO_ERROR : LATTICE_MISMATCH;
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
  return map_.erase(key) > 0 ? NO_ERROR : KEY_DNE;
}

void MemoryStore::for_each(
    const std::function<void(const std::string&, const AnyLattice&)>& fn) {
  for (const auto& [k, v] : map_) fn(k, v);
}

// ---------------------------------------------------------------- disk

std::string DiskStore::path_for(const std::string& data_dir, const std::string& node_id,
                                int thread_id) {
  return (std::filesystem::path(data_dir) / node_id / std::to_string(thread_id)).string();
}

DiskStore::DiskStore(const std::string& path) : path_(path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) throw std::runtime_error("DiskStore: cannot create " + path + ": " + ec.message());
  rocksdb::Options options;
  options.create_if_missing = true;
  options.write_buffer_size = 16 << 20;
  options.max_open_files = 256;
  options.keep_log_file_num = 2;
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, path, &db);
  if (!s.ok()) throw std::runtime_error("DiskStore: cannot open " + path + ": " + s.ToString());
  db_.reset(db);
  uint64_t keys = 0;
  if (db_->GetIntProperty("rocksdb.estimate-num-keys", &keys)) approximate_size_ = keys;
}

DiskStore::~DiskStore() {
  if (db_) {
    rocksdb::Status s = db_->Close();
    if (!s.ok()) std::cerr << "anna: DiskStore close " << path_ << ": " << s.ToString() << "\n";
  }
}

AnnaError DiskStore::read(const std::string& key, std::string* record) {
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), key, record);
  if (s.IsNotFound()) return KEY_DNE;
  if (!s.ok()) {
    std::cerr << "anna: DiskStore get in " << path_ << ": " << s.ToString() << "\n";
    return STORE_FAILED;
  }
  if (record->empty()) {
    std::cerr << "anna: DiskStore " << path_ << ": empty record\n";
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
  rocksdb::WriteOptions wo;  // WAL on (the default), no fsync per write
  rocksdb::Status s = db_->Put(wo, key, scratch_);
  if (!s.ok()) {
    std::cerr << "anna: DiskStore put in " << path_ << ": " << s.ToString() << "\n";
    return STORE_FAILED;
  }
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
    std::cerr << "anna: DiskStore " << path_ << ": undecodable record; left as is\n";
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
  return decode_record(record, out) ? NO_ERROR : STORE_FAILED;
}

AnnaError DiskStore::remove(const std::string& key) {
  std::string record;
  AnnaError err = read(key, &record);
  if (err != NO_ERROR) return err;
  rocksdb::Status s = db_->Delete(rocksdb::WriteOptions(), key);
  if (!s.ok()) {
    std::cerr << "anna: DiskStore delete in " << path_ << ": " << s.ToString() << "\n";
    return STORE_FAILED;
  }
  if (approximate_size_ > 0) --approximate_size_;
  return NO_ERROR;
}

void DiskStore::for_each(const std::function<void(const std::string&, const AnyLattice&)>& fn) {
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  AnyLattice value;
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    std::string record = it->value().ToString();
    if (!decode_record(record, &value)) continue;
    fn(it->key().ToString(), value);
  }
  if (!it->status().ok())
    std::cerr << "anna: DiskStore scan in " << path_ << ": " << it->status().ToString() << "\n";
}

}  // namespace anna
