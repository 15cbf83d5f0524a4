// Python bindings of the vector-clock order and merge on Python dicts (anna_core._core.
// compare_clocks, clock_supersedes, merge_clocks), and of a versionset's wire encoding
// (encode_versionset).
//
// Contract: a clock is a mapping str -> non-negative int; a zero entry means nothing and a
// missing entry counts as 0. compare_clocks(a, b) -> 0 EQUAL, 1 BEFORE (a strictly dominated
// by b), 2 AFTER, 3 CONCURRENT; clock_supersedes(new, old) -> old <= new entry-wise (Definition
// 4: equal or old -> new); merge_clocks(a, b) -> a new dict, the entry-wise max, without zero
// entries. A non-str node id is a TypeError, a count that is not an int a TypeError, a
// negative one (or one past uint64) a ValueError. A mapping that is not a dict is copied into
// one first.
//
// encode_versionset(vs, field) -> bytes: the versionset `vs` (a dict key -> an object with `vc`,
// a clock, and `holders`, an iterable of str: hydrocache.versionset.Entry) as the protobuf
// encoding of repeated `cloudburst.KeyVersion` field number `field` of some message, one
// KeyVersion per entry in key order: `key`, the clock's non-zero entries (in the clock's order),
// the holders sorted. Merged into a message (MergeFromString), it appends those KeyVersions to
// that field. Checks the clocks as the functions above do; a non-str key or holder is a
// TypeError. Why: a node cache answers every bind with S and R as KeyVersion lists, and
// building them field by field through the protobuf runtime cost ~2 us an entry.
//
// Why not through VClock (lattices.hpp): HydroCache compares and merges clocks tens of times
// per bind, and copying both dicts into std::maps (a std::string per node id) cost ~6 us a
// call, more than the comparison. These walk the dicts in place, look entries up by the
// interned str keys and reuse the int objects. They are the same order and merge as the
// kernel's `strictly_dominated` / `merge_clock` on normalised clocks: tests/
// test_hydrocache_vclock.py checks them against the causal lattice's merge by property.
#include <Python.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace anna {
namespace {

// `h` as a dict: the object itself when it is one, else a copy (a Mapping, a proto map).
// The copy iterates the mapping and looks each key up: a node cache compares every session
// floor it receives (a protobuf map) this way, and `PyDict_Merge` on a non-dict (through
// `keys()`) cost ~2 us a 3-entry map, five times the comparison.
py::dict as_dict(const py::handle& h) {
  if (PyDict_Check(h.ptr())) return py::reinterpret_borrow<py::dict>(h);
  py::dict out;
  py::object it = py::reinterpret_steal<py::object>(PyObject_GetIter(h.ptr()));
  if (!it) throw py::error_already_set();
  while (PyObject* key = PyIter_Next(it.ptr())) {
    py::object k = py::reinterpret_steal<py::object>(key);
    py::object v = py::reinterpret_steal<py::object>(PyObject_GetItem(h.ptr(), key));
    if (!v || PyDict_SetItem(out.ptr(), key, v.ptr()) != 0) throw py::error_already_set();
  }
  if (PyErr_Occurred()) throw py::error_already_set();
  return out;
}

std::string type_of(PyObject* o) { return Py_TYPE(o)->tp_name; }

// A node id's count, checked as the lattices' constructors check it.
std::uint64_t count_of(PyObject* key, PyObject* value) {
  if (!PyUnicode_Check(key))
    throw py::type_error("vector clock node ids must be str, not " + type_of(key));
  if (!PyLong_Check(value))
    throw py::type_error("vector clock counts must be int, not " + type_of(value));
  unsigned long long v = PyLong_AsUnsignedLongLong(value);
  if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
    PyErr_Clear();
    throw py::value_error("vector clock counts must be non-negative and fit in uint64");
  }
  return static_cast<std::uint64_t>(v);
}

// `d[key]`'s count, 0 when absent (its id is already known to be a str).
std::uint64_t count_at(PyObject* d, PyObject* key) {
  PyObject* v = PyDict_GetItemWithError(d, key);
  if (v == nullptr) {
    if (PyErr_Occurred()) throw py::error_already_set();
    return 0;
  }
  return count_of(key, v);
}

// Every entry of `b` checked (a bad entry is an error whichever side it is on).
void check_all(PyObject* d) {
  Py_ssize_t pos = 0;
  PyObject *k, *v;
  while (PyDict_Next(d, &pos, &k, &v)) count_of(k, v);
}

// a <= b entry-wise.
bool leq(PyObject* a, PyObject* b) {
  Py_ssize_t pos = 0;
  PyObject *k, *v;
  while (PyDict_Next(a, &pos, &k, &v)) {
    std::uint64_t c = count_of(k, v);
    if (c != 0 && count_at(b, k) < c) return false;
  }
  return true;
}

int compare(const py::dict& a, const py::dict& b) {
  check_all(a.ptr());
  check_all(b.ptr());
  bool le = leq(a.ptr(), b.ptr()), ge = leq(b.ptr(), a.ptr());
  return le && ge ? 0 : le ? 1 : ge ? 2 : 3;
}

py::dict merge(const py::dict& a, const py::dict& b) {
  PyObject* out = PyDict_New();
  if (out == nullptr) throw py::error_already_set();
  py::dict result = py::reinterpret_steal<py::dict>(out);
  Py_ssize_t pos = 0;
  PyObject *k, *v;
  while (PyDict_Next(a.ptr(), &pos, &k, &v)) {
    if (count_of(k, v) != 0 && PyDict_SetItem(out, k, v) != 0) throw py::error_already_set();
  }
  pos = 0;
  while (PyDict_Next(b.ptr(), &pos, &k, &v)) {
    std::uint64_t c = count_of(k, v);
    if (c != 0 && count_at(out, k) < c && PyDict_SetItem(out, k, v) != 0)
      throw py::error_already_set();
  }
  return result;
}

// ---- a versionset's wire encoding ----
void put_varint(std::string* out, std::uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

// A length-delimited field: its tag, the length of `body` and `body`.
void put_bytes(std::string* out, std::uint32_t field, const char* data, std::size_t size) {
  put_varint(out, (static_cast<std::uint64_t>(field) << 3) | 2);
  put_varint(out, size);
  out->append(data, size);
}

std::string utf8_of(PyObject* s, const char* what) {
  if (!PyUnicode_Check(s)) throw py::type_error(std::string(what) + " must be str, not " + type_of(s));
  Py_ssize_t n = 0;
  const char* p = PyUnicode_AsUTF8AndSize(s, &n);
  if (p == nullptr) throw py::error_already_set();
  return std::string(p, static_cast<std::size_t>(n));
}

// One KeyVersion's fields (key 1, vc 2, holders 3).
std::string key_version(const std::string& key, const py::handle& entry) {
  std::string out;
  if (!key.empty()) put_bytes(&out, 1, key.data(), key.size());
  py::dict vc = as_dict(entry.attr("vc"));
  Py_ssize_t pos = 0;
  PyObject *k, *v;
  std::string item;
  while (PyDict_Next(vc.ptr(), &pos, &k, &v)) {
    std::uint64_t c = count_of(k, v);
    if (c == 0) continue;
    std::string node = utf8_of(k, "vector clock node ids");
    item.clear();
    put_bytes(&item, 1, node.data(), node.size());
    put_varint(&item, (2u << 3) | 0);
    put_varint(&item, c);
    put_bytes(&out, 2, item.data(), item.size());
  }
  std::vector<std::string> holders;
  for (const py::handle& h : py::iter(entry.attr("holders"))) holders.push_back(utf8_of(h.ptr(), "holders"));
  std::sort(holders.begin(), holders.end());
  for (const auto& h : holders) put_bytes(&out, 3, h.data(), h.size());
  return out;
}

py::bytes encode_versionset(const py::dict& vs, std::uint32_t field) {
  if (field == 0 || field > 536870911u) throw py::value_error("field must be a protobuf field number");
  std::vector<std::pair<std::string, PyObject*>> entries;
  entries.reserve(static_cast<std::size_t>(PyDict_Size(vs.ptr())));
  Py_ssize_t pos = 0;
  PyObject *k, *v;
  while (PyDict_Next(vs.ptr(), &pos, &k, &v)) entries.emplace_back(utf8_of(k, "versionset keys"), v);
  // UTF-8 byte order is code point order: the order of `sorted()` on the str keys
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::string out;
  for (const auto& [key, entry] : entries) {
    std::string body = key_version(key, py::handle(entry));
    put_bytes(&out, field, body.data(), body.size());
  }
  return py::bytes(out.data(), out.size());
}

}  // namespace

void bind_clocks(py::module_& m) {
  m.def("encode_versionset", &encode_versionset, py::arg("vs"), py::arg("field"),
        "A versionset (dict key -> Entry) as repeated cloudburst.KeyVersion field `field` of "
        "a message, in key order (bytes to MergeFromString into that message).");

  m.def(
      "compare_clocks",
      [](const py::handle& a, const py::handle& b) { return compare(as_dict(a), as_dict(b)); },
      py::arg("a"), py::arg("b"),
      "Order of two vector clocks (zero entries ignored, a missing entry is 0): 0 EQUAL, "
      "1 BEFORE (a strictly dominated by b), 2 AFTER (b strictly dominated by a), 3 CONCURRENT.");

  m.def(
      "clock_supersedes",
      [](const py::handle& newer, const py::handle& older) {
        py::dict n = as_dict(newer), o = as_dict(older);
        check_all(n.ptr());
        return leq(o.ptr(), n.ptr());
      },
      py::arg("new"), py::arg("old"),
      "Definition 4 on clocks: `new` equals `old` or `old` happens before it (old <= new "
      "entry-wise).");

  m.def(
      "merge_clocks",
      [](const py::handle& a, const py::handle& b) { return merge(as_dict(a), as_dict(b)); },
      py::arg("a"), py::arg("b"),
      "Entry-wise max of two vector clocks (a new dict without zero entries).");
}

}  // namespace anna
