// Python bindings of the lattices (anna_core._core.*Lattice and deserialize).
//
// Contract (anna_core/DESIGN.md, "Python binding contract"): every lattice class has
// merge(other) -> new lattice of the same class (TypeError for another class), reveal(),
// serialize() -> bytes, the read-only int `lattice_type`, __eq__, __repr__ and pickling.
// Values cross the boundary as `bytes` only: a str (or anything else) where bytes are expected
// raises TypeError; vector-clock node ids are str, counts non-negative ints. deserialize(type,
// payload) returns the lattice or raises ValueError (unknown type or malformed payload).
//
// Pickling goes through the codec: __reduce__ is (anna_core.wire.lattice_from_payload,
// (lattice_type, payload)), a Python function (pickled by name, where pybind11's functions
// pickle through builtins.eval) calling deserialize; so a pickle never rebuilds a lattice
// through its class (NEWOBJ/REDUCE of the class). An instance
// can never be observed without a C++ value: __new__ (which pickle's NEWOBJ and
// copyreg.__newobj__ call, with no __init__ or __setstate__ after it) makes the default
// (bottom) lattice, where pybind11 alone would leave raw, unconstructed memory behind the
// object and the first method call would read it (segfault, std::bad_alloc).
#include <Python.h>
#include <pybind11/operators.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <memory>
#include <new>
#include <optional>
#include <string>

#include "lattice_codec.hpp"

namespace py = pybind11;

namespace anna {
namespace {

std::string type_name(const py::handle& h) { return py::str(py::type::handle_of(h).attr("__name__")); }

std::string as_bytes(const py::handle& h, const char* what) {
  if (!PyBytes_Check(h.ptr()))
    throw py::type_error(std::string(what) + " must be bytes, not " + type_name(h));
  char* data = nullptr;
  Py_ssize_t size = 0;
  PyBytes_AsStringAndSize(h.ptr(), &data, &size);
  return std::string(data, static_cast<std::size_t>(size));
}

std::string as_str(const py::handle& h, const char* what) {
  if (!PyUnicode_Check(h.ptr()))
    throw py::type_error(std::string(what) + " must be str, not " + type_name(h));
  return h.cast<std::string>();
}

std::int64_t as_int64(const py::handle& h, const char* what) {
  if (!PyLong_Check(h.ptr()))
    throw py::type_error(std::string(what) + " must be int, not " + type_name(h));
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(h.ptr(), &overflow);
  if (overflow != 0) throw py::value_error(std::string(what) + " does not fit in int64");
  return static_cast<std::int64_t>(v);
}

std::uint64_t as_uint64(const py::handle& h, const char* what) {
  if (!PyLong_Check(h.ptr()))
    throw py::type_error(std::string(what) + " must be int, not " + type_name(h));
  if (PyObject_RichCompareBool(h.ptr(), py::int_(0).ptr(), Py_LT) == 1)
    throw py::value_error(std::string(what) + " must be non-negative");
  unsigned long long v = PyLong_AsUnsignedLongLong(h.ptr());
  if (PyErr_Occurred()) {
    PyErr_Clear();
    throw py::value_error(std::string(what) + " does not fit in uint64");
  }
  return static_cast<std::uint64_t>(v);
}

std::set<std::string> bytes_set(const py::iterable& values) {
  std::set<std::string> out;
  for (const auto& v : values) out.insert(as_bytes(v, "lattice values"));
  return out;
}

VClock clock_from(const py::dict& d) {
  VClock vc;
  for (const auto& [k, v] : d) {
    std::uint64_t count = as_uint64(v, "vector clock counts");
    if (count != 0) vc[as_str(k, "vector clock node ids")] = count;
    else as_str(k, "vector clock node ids");
  }
  return vc;
}

py::dict clock_to(const VClock& vc) {
  py::dict d;
  for (const auto& [node, count] : vc) d[py::str(node)] = py::int_(count);
  return d;
}

py::bytes pybytes(const std::string& s) { return py::bytes(s.data(), s.size()); }

py::list sorted_bytes(const std::set<std::string>& values) {
  py::list out;
  for (const auto& v : values) out.append(pybytes(v));
  return out;
}

std::string brepr(const std::string& s) { return py::repr(pybytes(s)); }

std::string list_repr(const std::set<std::string>& values) {
  std::string out = "[";
  bool first = true;
  for (const auto& v : values) {
    if (!first) out += ", ";
    first = false;
    out += brepr(v);
  }
  return out + "]";
}

// tp_new of every lattice class: pybind11's allocation, then a default-constructed value owned
// by a constructed holder (not registered: pybind11 ignores __init__/__setstate__ on a
// registered instance). A constructor (__init__, or __setstate__ of an old pickle) then finds
// a value with its holder, destroys it through the holder and constructs its own, as it does
// after an earlier overload candidate; an instance nothing constructed keeps the bottom
// lattice and is destroyed through its holder like any other.
// The bottom lattice an instance gets before (or instead of) a constructor: what the codec
// decodes from the bottom's encoding, so a bottom equals its own round trip (a causal
// lattice's bottom is one empty version, never an empty version set).
template <class T>
struct IsCausal : std::false_type {};
template <LatticeKind K>
struct IsCausal<BasicCausalLattice<K>> : std::true_type {};

template <class L>
L* new_bottom() {
  if constexpr (IsCausal<L>::value) {
    return new L(L::single(CausalEntry{}));
  } else {
    return new L();
  }
}

template <class L>
PyObject* lattice_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  using Holder = typename py::class_<L>::holder_type;
  PyObject* self = py::detail::pybind11_object_new(type, args, kwargs);
  if (self == nullptr) return nullptr;
  auto* inst = reinterpret_cast<py::detail::instance*>(self);
  auto v_h = inst->get_value_and_holder(py::detail::get_type_info(typeid(L)));
  try {
    v_h.value_ptr() = new_bottom<L>();
  } catch (const std::bad_alloc&) {
    Py_DECREF(self);
    return PyErr_NoMemory();
  }
  new (std::addressof(v_h.holder<Holder>())) Holder(v_h.value_ptr<L>());
  v_h.set_holder_constructed();
  return self;
}

// After a constructor that failed (pybind11 destroys the value before it tries a new-style
// constructor), give the instance its bottom lattice back, as lattice_new does.
template <class L>
void restore_value(const py::handle& self, PyTypeObject* type) {
  using Holder = typename py::class_<L>::holder_type;
  if (!PyObject_TypeCheck(self.ptr(), type)) return;
  auto* inst = reinterpret_cast<py::detail::instance*>(self.ptr());
  auto v_h = inst->get_value_and_holder(py::detail::get_type_info(typeid(L)));
  if (v_h.value_ptr() != nullptr) return;
  v_h.value_ptr() = new_bottom<L>();
  new (std::addressof(v_h.holder<Holder>())) Holder(v_h.value_ptr<L>());
  v_h.set_holder_constructed();
}

// __init__ and __setstate__ (of old pickles), called on an instance __new__ made, leave it
// with a value whether they succeed or raise. The wrappers are plain methods (a function
// named __init__ or __setstate__ is a constructor to pybind11); the errors are the
// constructors' own.
template <class L>
void guard_constructors(py::module_& m, const char* name) {
  py::object cls = m.attr(name);
  auto* type = reinterpret_cast<PyTypeObject*>(cls.ptr());
  for (const char* method : {"__init__", "__setstate__"}) {
    py::object original = cls.attr(method);
    cls.attr(method) = py::cpp_function(
        [original, type](const py::handle& self, const py::args& args,
                         const py::kwargs& kwargs) -> py::object {
          try {
            return original(self, *args, **kwargs);
          } catch (...) {
            restore_value<L>(self, type);
            throw;
          }
        },
        py::is_method(cls), py::name(std::string(method) == "__init__" ? "init" : "setstate"),
        py::doc(py::str(original.attr("__doc__")).cast<std::string>().c_str()));
  }
}

// Everything every lattice class has: merge, ==, serialize, lattice_type, pickling.
template <class L>
py::class_<L> lattice_class(py::module_& m, const char* name, const char* doc) {
  py::class_<L> cls(m, name, doc);
  auto* type = reinterpret_cast<PyTypeObject*>(cls.ptr());
  // __new__ in the class's dict (what copyreg.__newobj__ and user code call) and the tp_new
  // slot (what type calls and pickle's NEWOBJ use) both make a constructed instance.
  cls.attr("__new__") = py::staticmethod(py::cpp_function(
      [type](const py::handle& subtype, const py::args& args,
             const py::kwargs& kwargs) -> py::object {
        if (!PyType_Check(subtype.ptr()) ||
            !PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(subtype.ptr()), type))
          throw py::type_error(std::string(type->tp_name) + ".__new__(X): X must be a subtype of " +
                               type->tp_name);
        PyObject* out = lattice_new<L>(reinterpret_cast<PyTypeObject*>(subtype.ptr()),
                                       args.ptr(), kwargs.ptr());
        if (out == nullptr) throw py::error_already_set();
        return py::reinterpret_steal<py::object>(out);
      },
      py::name("__new__")));
  type->tp_new = &lattice_new<L>;
  PyType_Modified(type);
  cls.def(
         "merge",
         [](const L& self, const L& other) {
           L out = self;
           out.merge(other);
           return out;
         },
         py::arg("other"), "The least upper bound of self and other (a new lattice).")
      .def(py::self == py::self)
      .def("serialize", [](const L& self) { return pybytes(encode(self)); },
           "The anna.*Value protobuf payload of this lattice.")
      .def_property_readonly("lattice_type", [](const L&) { return static_cast<int>(L::kKind); })
      .def("__reduce__",
           [](const L& self) {
             return py::make_tuple(py::module_::import("anna_core.wire").attr("lattice_from_payload"),
                                   py::make_tuple(static_cast<int>(L::kKind),
                                                  pybytes(encode(self))));
           },
           "Pickles as anna_core.wire.lattice_from_payload(lattice_type, payload): "
           "unpickling runs the codec only.")
      // __getstate__/__setstate__ read pickles written before __reduce__ (class + state)
      .def(py::pickle([](const L& self) { return py::make_tuple(pybytes(encode(self))); },
                      [](const py::tuple& t) {
                        if (t.size() != 1) throw py::value_error("bad lattice pickle state");
                        L out;
                        if (!decode_from(as_bytes(t[0], "pickle state"), &out))
                          throw py::value_error("malformed lattice pickle state");
                        return out;
                      }));
  cls.attr("__hash__") = py::none();
  return cls;
}

template <class L>
py::object causal_values(const L& l) {
  return sorted_bytes(l.values());
}

}  // namespace

void bind_lattices(py::module_& m) {
  lattice_class<LWWLattice>(m, "LWWLattice", "Last-writer-wins register; ties keep the larger value.")
      .def(py::init([](const py::handle& timestamp, const py::handle& value) {
             LWWLattice l;
             l.timestamp = as_uint64(timestamp, "timestamp");
             l.value = as_bytes(value, "value");
             return l;
           }),
           py::arg("timestamp"), py::arg("value"))
      .def("reveal", [](const LWWLattice& l) { return pybytes(l.value); })
      .def_property_readonly("timestamp", [](const LWWLattice& l) { return l.timestamp; })
      .def_property_readonly("value", [](const LWWLattice& l) { return pybytes(l.value); })
      .def("__repr__", [](const LWWLattice& l) {
        return "LWWLattice(" + std::to_string(l.timestamp) + ", " + brepr(l.value) + ")";
      });

  lattice_class<SetLattice>(m, "SetLattice", "Grow-only set of bytes; merge is union.")
      .def(py::init([](const py::iterable& values) {
             SetLattice l;
             l.values = bytes_set(values);
             return l;
           }),
           py::arg("values") = py::tuple())
      .def("reveal",
           [](const SetLattice& l) {
             py::set out;
             for (const auto& v : l.values) out.add(pybytes(v));
             return out;
           })
      .def("__len__", [](const SetLattice& l) { return l.values.size(); })
      .def("__repr__",
           [](const SetLattice& l) { return "SetLattice(" + list_repr(l.values) + ")"; });

  lattice_class<OrderedSetLattice>(m, "OrderedSetLattice",
                                   "Grow-only set of bytes revealed in sorted order.")
      .def(py::init([](const py::iterable& values) {
             OrderedSetLattice l;
             l.values = bytes_set(values);
             return l;
           }),
           py::arg("values") = py::tuple())
      .def("reveal", [](const OrderedSetLattice& l) { return sorted_bytes(l.values); })
      .def("__len__", [](const OrderedSetLattice& l) { return l.values.size(); })
      .def("__repr__", [](const OrderedSetLattice& l) {
        return "OrderedSetLattice(" + list_repr(l.values) + ")";
      });

  lattice_class<MaxLattice>(m, "MaxLattice", "int64 register; merge is max.")
      .def(py::init([](const py::handle& value) {
             MaxLattice l;
             l.value = as_int64(value, "value");
             return l;
           }),
           py::arg("value") = py::int_(std::numeric_limits<std::int64_t>::min()))
      .def("reveal", [](const MaxLattice& l) { return l.value; })
      .def("__repr__",
           [](const MaxLattice& l) { return "MaxLattice(" + std::to_string(l.value) + ")"; });

  lattice_class<MapLattice>(m, "MapLattice", "bytes -> int64 map; values merge by max.")
      .def(py::init([](const py::dict& entries) {
             MapLattice l;
             for (const auto& [k, v] : entries) {
               std::string key = as_bytes(k, "map keys");
               l.entries[key] = as_int64(v, "map values");
             }
             return l;
           }),
           py::arg("entries") = py::dict())
      .def("reveal",
           [](const MapLattice& l) {
             py::dict out;
             for (const auto& [k, v] : l.entries) out[pybytes(k)] = py::int_(v);
             return out;
           })
      .def("__len__", [](const MapLattice& l) { return l.entries.size(); })
      .def("__repr__", [](const MapLattice& l) {
        std::string out = "MapLattice({";
        bool first = true;
        for (const auto& [k, v] : l.entries) {
          if (!first) out += ", ";
          first = false;
          out += brepr(k) + ": " + std::to_string(v);
        }
        return out + "})";
      });

  lattice_class<PriorityLattice>(m, "PriorityLattice",
                                 "Keeps the lowest-priority value; ties keep the smaller value.")
      .def(py::init([](double priority, const py::handle& value) {
             if (std::isnan(priority)) throw py::value_error("priority must not be NaN");
             PriorityLattice l;
             l.priority = priority;
             l.value = as_bytes(value, "value");
             return l;
           }),
           py::arg("priority"), py::arg("value"))
      .def("reveal",
           [](const PriorityLattice& l) { return py::make_tuple(l.priority, pybytes(l.value)); })
      .def_property_readonly("priority", [](const PriorityLattice& l) { return l.priority; })
      .def_property_readonly("value", [](const PriorityLattice& l) { return pybytes(l.value); })
      .def("__repr__", [](const PriorityLattice& l) {
        return "PriorityLattice(" + std::string(py::repr(py::float_(l.priority))) + ", " +
               brepr(l.value) + ")";
      });

  lattice_class<SingleKeyCausalLattice>(
      m, "SingleKeyCausalLattice",
      "Vector clock + value set: the dominating clock wins, concurrent versions are kept.")
      .def(py::init([](const py::dict& vector_clock, const py::iterable& values) {
             CausalEntry v;
             v.clock = clock_from(vector_clock);
             v.values = bytes_set(values);
             return SingleKeyCausalLattice::single(std::move(v));
           }),
           py::arg("vector_clock") = py::dict(), py::arg("values") = py::tuple())
      .def("reveal", &causal_values<SingleKeyCausalLattice>)
      .def_property_readonly("vector_clock",
                             [](const SingleKeyCausalLattice& l) { return clock_to(l.clock()); })
      .def_property_readonly("versions", [](const SingleKeyCausalLattice& l) {
        return l.versions.size();
      })
      .def("__repr__", [](const SingleKeyCausalLattice& l) {
        return "SingleKeyCausalLattice(" + std::string(py::repr(clock_to(l.clock()))) + ", " +
               list_repr(l.values()) + ")";
      });

  lattice_class<MultiKeyCausalLattice>(
      m, "MultiKeyCausalLattice",
      "Single-key causal value plus per-key dependency clocks (merged with the versions).")
      .def(py::init([](const py::dict& vector_clock, const py::dict& dependencies,
                       const py::iterable& values) {
             CausalEntry v;
             v.clock = clock_from(vector_clock);
             for (const auto& [k, dep] : dependencies) {
               if (!PyDict_Check(dep.ptr()))
                 throw py::type_error("dependencies must map str -> dict[str, int]");
               v.dependencies[as_str(k, "dependency keys")] =
                   clock_from(py::reinterpret_borrow<py::dict>(dep));
             }
             v.values = bytes_set(values);
             return MultiKeyCausalLattice::single(std::move(v));
           }),
           py::arg("vector_clock") = py::dict(), py::arg("dependencies") = py::dict(),
           py::arg("values") = py::tuple())
      .def("reveal", &causal_values<MultiKeyCausalLattice>)
      .def_property_readonly("vector_clock",
                             [](const MultiKeyCausalLattice& l) { return clock_to(l.clock()); })
      .def_property_readonly("dependencies",
                             [](const MultiKeyCausalLattice& l) {
                               py::dict out;
                               for (const auto& [k, vc] : l.dependencies())
                                 out[py::str(k)] = clock_to(vc);
                               return out;
                             })
      .def_property_readonly("versions", [](const MultiKeyCausalLattice& l) {
        return l.versions.size();
      })
      .def_property_readonly(
          "entries",
          [](const MultiKeyCausalLattice& l) {
            py::list out;
            for (const auto& v : l.versions) {
              py::dict deps;
              for (const auto& [k, vc] : v.dependencies) deps[py::str(k)] = clock_to(vc);
              out.append(py::make_tuple(clock_to(v.clock), deps, sorted_bytes(v.values)));
            }
            return out;
          },
          "The concurrent versions kept (the antichain), each (vector_clock, dependencies, "
          "sorted values); merging single-version lattices of them rebuilds this lattice.")
      .def(
          "collected",
          [](const MultiKeyCausalLattice& l, const py::dict& frontier) -> py::object {
            // each frontier clock converted once per call, on first use
            std::map<std::string, std::optional<VClock>> floors;
            auto stable = [&](const std::string& key, const VClock& dep) {
              auto [it, fresh] = floors.try_emplace(key);
              if (fresh) {
                PyObject* f = PyDict_GetItemWithError(frontier.ptr(), py::str(key).ptr());
                if (f == nullptr && PyErr_Occurred()) throw py::error_already_set();
                if (f != nullptr) {
                  if (!PyDict_Check(f))
                    throw py::type_error("the frontier must map str -> dict[str, int]");
                  it->second = clock_from(py::reinterpret_borrow<py::dict>(f));
                }
              }
              return it->second && (dep == *it->second || strictly_dominated(dep, *it->second));
            };
            bool any = false;
            for (const auto& v : l.versions) {
              for (const auto& [key, dep] : v.dependencies) any = any || stable(key, dep);
            }
            if (!any) return py::none();
            MultiKeyCausalLattice out;
            for (const auto& v : l.versions) {
              CausalEntry e = v;
              for (auto it = e.dependencies.begin(); it != e.dependencies.end();)
                it = stable(it->first, it->second) ? e.dependencies.erase(it) : std::next(it);
              out.versions.insert(std::move(e));
            }
            out.prune();
            return py::cast(std::move(out));
          },
          py::arg("frontier"),
          "Dependency GC (dissertation 4.2.3): this lattice without the dependencies (d, vc) "
          "whose frontier clock `frontier[d]` supersedes vc, each version's clock and values "
          "kept; None when nothing would be dropped.")
      .def("__repr__", [](const MultiKeyCausalLattice& l) {
        py::dict deps;
        for (const auto& [k, vc] : l.dependencies()) deps[py::str(k)] = clock_to(vc);
        return "MultiKeyCausalLattice(" + std::string(py::repr(clock_to(l.clock()))) + ", " +
               std::string(py::repr(deps)) + ", " + list_repr(l.values()) + ")";
      });

  guard_constructors<LWWLattice>(m, "LWWLattice");
  guard_constructors<SetLattice>(m, "SetLattice");
  guard_constructors<OrderedSetLattice>(m, "OrderedSetLattice");
  guard_constructors<MaxLattice>(m, "MaxLattice");
  guard_constructors<MapLattice>(m, "MapLattice");
  guard_constructors<PriorityLattice>(m, "PriorityLattice");
  guard_constructors<SingleKeyCausalLattice>(m, "SingleKeyCausalLattice");
  guard_constructors<MultiKeyCausalLattice>(m, "MultiKeyCausalLattice");

  m.def(
      "deserialize",
      [](const py::handle& lattice_type, const py::handle& payload) -> py::object {
        std::int64_t type = as_int64(lattice_type, "lattice_type");
        std::string bytes = as_bytes(payload, "payload");
        if (type < 1 || type > 8) throw py::value_error("unknown lattice type " + std::to_string(type));
        AnyLattice l;
        AnnaError err = decode_lattice(static_cast<int>(type), bytes, &l);
        if (!known_lattice_type(static_cast<int>(type)) || err == UNKNOWN_LATTICE)
          throw py::value_error("unknown lattice type " + std::to_string(type));
        if (err != NO_ERROR)
          throw py::value_error("payload does not parse as lattice type " + std::to_string(type));
        return std::visit([](auto&& x) { return py::cast(std::move(x)); }, std::move(l));
      },
      py::arg("lattice_type"), py::arg("payload"),
      "Decode an anna.*Value payload into its lattice; ValueError if unknown or malformed.");
}

}  // namespace anna
