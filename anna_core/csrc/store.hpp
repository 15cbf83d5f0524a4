// A worker's private key -> lattice storage: MemoryStore (a hash map) and DiskStore (one
// RocksDB instance per disk worker thread, at data_dir/<node_id>/<thread_id>).
//
// Contract:
//   * Every operation returns a typed anna::AnnaError and never throws after construction.
//   * merge(key, value) merges value into the stored lattice (or stores it when absent) and
//     returns NO_ERROR, or LATTICE_MISMATCH (store untouched) when the key holds another
//     lattice type. DiskStore may also return STORE_FAILED (RocksDB error, or a stored record
//     that does not decode; the record is then left untouched).
//   * get_encoded(key, &type, &payload) returns NO_ERROR with the lattice type and its wire
//     payload (DiskStore returns the stored bytes without decoding), KEY_DNE, or STORE_FAILED.
//   * remove(key) returns NO_ERROR, KEY_DNE or STORE_FAILED. for_each visits every
//     decodable (key, lattice).
//   * DiskStore record = one lattice-type byte + payload. Writes go through RocksDB's WAL
//     (not fsync'ed per write): an acknowledged write survives a clean restart and a kill -9
//     of the process (not a machine crash). Opening fails (std::runtime_error) if the
//     directory cannot be created or is locked by another process.
//   * A store belongs to one worker thread: no locks.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include "lattice_codec.hpp"

namespace rocksdb {
class DB;
}

namespace anna {

class Store {
 public:
  virtual ~Store() = default;
  virtual AnnaError merge(const std::string& key, const AnyLattice& value) = 0;
  virtual AnnaError get_encoded(const std::string& key, int* type, std::string* payload) = 0;
  virtual AnnaError get(const std::string& key, AnyLattice* out) = 0;
  virtual AnnaError remove(const std::string& key) = 0;
  virtual void for_each(const std::function<void(const std::string&, const AnyLattice&)>& fn) = 0;
  virtual std::size_t size() const = 0;
};

class MemoryStore final : public Store {
 public:
  AnnaError merge(const std::string& key, const AnyLattice& value) override;
  AnnaError get_encoded(const std::string& key, int* type, std::string* payload) override;
  AnnaError get(const std::string& key, AnyLattice* out) override;
  AnnaError remove(const std::string& key) override;
  void for_each(const std::function<void(const std::string&, const AnyLattice&)>& fn) override;
  std::size_t size() const override { return map_.size(); }

 private:
  std::unordered_map<std::string, AnyLattice> map_;
};

class DiskStore final : public Store {
 public:
  // Opens (creating if needed) the RocksDB instance at `path`.
  explicit DiskStore(const std::string& path);
  ~DiskStore() override;
  DiskStore(const DiskStore&) = delete;
  DiskStore& operator=(const DiskStore&) = delete;

  AnnaError merge(const std::string& key, const AnyLattice& value) override;
  AnnaError get_encoded(const std::string& key, int* type, std::string* payload) override;
  AnnaError get(const std::string& key, AnyLattice* out) override;
  AnnaError remove(const std::string& key) override;
  void for_each(const std::function<void(const std::string&, const AnyLattice&)>& fn) override;
  std::size_t size() const override { return approximate_size_; }

  static std::string path_for(const std::string& data_dir, const std::string& node_id,
                              int thread_id);

 private:
  AnnaError read(const std::string& key, std::string* record);
  AnnaError write(const std::string& key, const AnyLattice& value);

  std::string path_;
  std::unique_ptr<rocksdb::DB> db_;
  std::size_t approximate_size_ = 0;
  std::string scratch_;
};

}  // namespace anna
