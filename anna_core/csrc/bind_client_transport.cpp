// Python binding of the client's native transport (anna_core._core.ClientTransport), what
// anna_core.Client sends and receives through.
//
// Contract (client_transport.hpp; anna_core/DESIGN.md "Processes"):
//   ClientTransport(ip="127.0.0.1", public_key=b"", secret_key=b"", cluster_keys=[],
//                   max_answer_bytes=..., max_sockets=512): keys in Z85 (40 bytes), as
//   runtime.auth.KeyPair holds them; an empty secret key means plain sockets. ValueError for
//   bad keys or limits, RuntimeError when the answer socket cannot be bound.
//   .address: where workers and routing send answers (with the public key when keyed).
//   send(address, kind, payload) -> bool; collect(ids, id_field, timeout, enough) ->
//   list[(id, bytes)]; exchange(address, kind, payload, request_id, id_field, timeout) ->
//   bytes | None (send, then wait for that one answer: one call, one GIL release).
//   key_request(address, type, key, request_id, timeout, lattice_type=0, payload=b"",
//   timestamp=0, lww_at=0, reveal=False) -> answer | None: the whole of one single-key
//   request in one call (client_ops.hpp): builds the KeyRequest (lww_at > 0 wraps `payload` as
//   an LWW value at that timestamp), sends it (one frame, or kind "request" above a frame
//   part), waits for its answer and decodes it, with the GIL released from the first step to
//   the last. answer = (error, lattice_type, payload, revealed, replicas, addresses,
//   error_detail, responder) for the tuple of `key`; None when it was not sent, nothing came
//   by the timeout, or what came is not a KeyResponse. key_wait(request_id, key, timeout,
//   reveal=False) waits longer for an answer key_request gave up on. lww_payload_bound(n):
//   the largest LWW payload a value of n bytes makes.
//   Every call releases the GIL while it works and waits; a signal during a wait runs
//   Python's handlers (KeyboardInterrupt reaches the caller) and the wait goes on otherwise.
//   Calls from several threads are serialised by a lock. After close() sends return False,
//   waits return at once with what they have, and stats() still answers.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <mutex>

#include "client_ops.hpp"
#include "client_transport.hpp"

namespace py = pybind11;

namespace anna {
namespace {

class PyClientTransport {
 public:
  PyClientTransport(const std::string& ip, const py::bytes& public_key,
                    const py::bytes& secret_key, const std::vector<py::bytes>& cluster_keys,
                    std::size_t max_answer_bytes, std::size_t max_sockets) {
    CurveKeys keys;
    keys.public_key = public_key;
    keys.secret_key = secret_key;
    if (!keys.secret_key.empty())
      for (const auto& k : cluster_keys) keys.admitted.emplace(std::string(k), kClusterRole);
    else if (!cluster_keys.empty())
      throw py::value_error("cluster keys given without this client's own key pair");
    try {
      t_ = std::make_unique<ClientTransport>(ip, std::move(keys), max_answer_bytes, max_sockets);
    } catch (const std::invalid_argument& e) {
      throw py::value_error(e.what());
    }
  }

  const std::string& address() const { return t_->address(); }

  bool send(const std::string& address, const std::string& kind, const std::string& payload) {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(mu_);
    return t_->send(address, kind, payload);
  }

  py::list collect(const std::vector<std::string>& ids, int id_field, double timeout,
                   std::size_t enough) {
    std::vector<std::pair<std::string, std::string>> out;
    wait(ids, id_field, timeout, enough, &out);
    py::list result;
    for (auto& [id, payload] : out) result.append(py::make_tuple(py::str(id), py::bytes(payload)));
    return result;
  }

  py::object exchange(const std::string& address, const std::string& kind,
                      const std::string& payload, const std::string& request_id, int id_field,
                      double timeout) {
    std::vector<std::pair<std::string, std::string>> out;
    bool sent;
    {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(mu_);
      sent = t_->send(address, kind, payload);
    }
    if (!sent) return py::none();  // as an unanswered request: the caller's retries decide
    wait({request_id}, id_field, timeout, 1, &out);
    if (out.empty()) return py::none();
    return py::bytes(out.front().second);
  }

  py::object key_request(const std::string& address, int type, const std::string& key,
                         const std::string& request_id, double timeout, int lattice_type,
                         const std::string& payload, std::uint64_t timestamp,
                         std::uint64_t lww_at, bool reveal) {
    auto deadline = deadline_after(timeout);
    KeyRequestSpec spec;
    spec.type = type;
    spec.key = key;
    spec.lattice_type = lattice_type;
    spec.payload = payload;
    spec.timestamp = timestamp;
    spec.lww_at = lww_at;
    spec.request_id = request_id;
    KeyAnswer answer;
    ClientTransport::Wait result;
    {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(mu_);
      spec.response_address = t_->address();
      std::string request = encode_key_request(spec);
      if (!t_->send(address, request.size() < kFramePartBytes ? "" : "request", request)) {
        result = ClientTransport::Wait::kDeadline;  // as an unanswered request
      } else {
        result = await_answer(request_id, key, reveal, deadline, &answer);
        // The caller may wait for it again (key_wait): an answer that comes meanwhile, while
        // it waits for another (its routing lookup), is kept for that wait.
        if (result == ClientTransport::Wait::kDeadline) t_->keep_late(request_id);
      }
    }
    return finish(result, request_id, key, reveal, deadline, &answer);
  }

  py::object key_wait(const std::string& request_id, const std::string& key, double timeout,
                      bool reveal) {
    auto deadline = deadline_after(timeout);
    KeyAnswer answer;
    ClientTransport::Wait result;
    {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(mu_);
      result = await_answer(request_id, key, reveal, deadline, &answer);
    }
    return finish(result, request_id, key, reveal, deadline, &answer);
  }

  py::dict stats() const {
    py::dict d;
    d["stale"] = t_->stale();
    d["malformed"] = t_->malformed();
    d["oversize"] = t_->oversize();
    d["last_oversize_bytes"] = t_->last_oversize();
    d["auth_refused"] = t_->auth_refused();
    d["push_refused"] = t_->push_refused();
    d["max_answer_bytes"] = t_->max_answer_bytes();
    d["links_open"] = t_->links_open();
    d["links_unix"] = t_->links_unix();
    d["link_requests"] = t_->link_requests();
    d["link_answers"] = t_->link_answers();
    d["link_failures"] = t_->link_failures();
    d["link_resent"] = t_->link_resent();
    return d;
  }

  void close() {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(mu_);
    t_->close();
  }

  bool closed() const { return t_->closed(); }

 private:
  static ClientTransport::Clock::time_point deadline_after(double timeout) {
    if (!(timeout >= 0)) timeout = 0;  // NaN too
    if (timeout > 86400.0 * 365) timeout = 86400.0 * 365;
    return ClientTransport::Clock::now() +
           std::chrono::duration_cast<ClientTransport::Clock::duration>(
               std::chrono::duration<double>(timeout));
  }

  // Waits (the GIL released, mu_ held) for the answer to `request_id` and decodes it: kDone
  // with `answer` filled, kDeadline when none came or it is not a KeyResponse, kInterrupted.
  ClientTransport::Wait await_answer(const std::string& request_id, const std::string& key,
                                     bool reveal, ClientTransport::Clock::time_point deadline,
                                     KeyAnswer* answer) {
    std::vector<std::pair<std::string, std::string>> out;
    auto result = t_->collect({request_id}, ClientTransport::kAnswerIdField, deadline, 1, &out);
    if (result == ClientTransport::Wait::kInterrupted) return result;
    if (out.empty()) return ClientTransport::Wait::kDeadline;
    if (!decode_key_answer(out.front().second, key, reveal, answer))
      return ClientTransport::Wait::kDeadline;  // as an unanswered request: retries decide
    return ClientTransport::Wait::kDone;
  }

  // Runs Python's signal handlers while a wait is interrupted (their exception reaches the
  // caller), then the answer as a tuple, or None.
  py::object finish(ClientTransport::Wait result, const std::string& request_id,
                    const std::string& key, bool reveal,
                    ClientTransport::Clock::time_point deadline, KeyAnswer* answer) {
    while (result == ClientTransport::Wait::kInterrupted) {
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(mu_);
      result = await_answer(request_id, key, reveal, deadline, answer);
    }
    if (result != ClientTransport::Wait::kDone) return py::none();
    py::list addresses;
    for (const auto& a : answer->addresses) addresses.append(py::str(a));
    return py::make_tuple(answer->error, answer->lattice_type, py::bytes(answer->payload),
                          answer->revealed, answer->replicas, std::move(addresses),
                          py::str(answer->error_detail), py::str(answer->responder));
  }

  void wait(const std::vector<std::string>& ids, int id_field, double timeout, std::size_t enough,
            std::vector<std::pair<std::string, std::string>>* out) {
    auto deadline = deadline_after(timeout);
    while (true) {
      ClientTransport::Wait result;
      {
        py::gil_scoped_release release;
        std::lock_guard<std::mutex> lock(mu_);
        result = t_->collect(ids, id_field, deadline, enough, out);
      }
      if (result != ClientTransport::Wait::kInterrupted) return;
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    }
  }

  std::mutex mu_;
  std::unique_ptr<ClientTransport> t_;
};

}  // namespace

void bind_client_transport(py::module_& m) {
  py::class_<PyClientTransport>(m, "ClientTransport",
                                "The Anna client's native transport (client_transport.hpp).")
      .def(py::init<const std::string&, const py::bytes&, const py::bytes&,
                    const std::vector<py::bytes>&, std::size_t, std::size_t>(),
           py::arg("ip") = "127.0.0.1", py::arg("public_key") = py::bytes(),
           py::arg("secret_key") = py::bytes(), py::arg("cluster_keys") = std::vector<py::bytes>{},
           py::arg("max_answer_bytes") = std::size_t{80} << 20,
           py::arg("max_sockets") = std::size_t{512})
      .def_property_readonly("address", &PyClientTransport::address)
      .def_property_readonly("closed", &PyClientTransport::closed)
      .def("send", &PyClientTransport::send, py::arg("address"), py::arg("kind"), py::arg("payload"))
      .def("collect", &PyClientTransport::collect, py::arg("ids"), py::arg("id_field"),
           py::arg("timeout"), py::arg("enough"))
      .def("exchange", &PyClientTransport::exchange, py::arg("address"), py::arg("kind"),
           py::arg("payload"), py::arg("request_id"), py::arg("id_field"), py::arg("timeout"))
      .def("key_request", &PyClientTransport::key_request, py::arg("address"), py::arg("type"),
           py::arg("key"), py::arg("request_id"), py::arg("timeout"), py::arg("lattice_type") = 0,
           py::arg("payload") = std::string(), py::arg("timestamp") = std::uint64_t{0},
           py::arg("lww_at") = std::uint64_t{0}, py::arg("reveal") = false)
      .def("key_wait", &PyClientTransport::key_wait, py::arg("request_id"), py::arg("key"),
           py::arg("timeout"), py::arg("reveal") = false)
      .def("stats", &PyClientTransport::stats)
      .def("close", &PyClientTransport::close)
      .def_property_readonly_static("connect_timeout_ms", [](py::object) {
        return PushCache::kConnectTimeoutMs;  // runtime/sockets.py's CONNECT_TIMEOUT_MS
      });
  m.def("lww_payload_bound", &lww_payload_bound, py::arg("value_bytes"),
        "The largest LWW payload a value of `value_bytes` bytes encodes to.");
  m.def("find_field", [](const py::bytes& payload, int field) -> py::object {
    std::string data = payload, value;
    if (!ClientTransport::find_field(data.data(), data.size(), field, &value)) return py::none();
    return py::bytes(value);
  }, py::arg("payload"), py::arg("field"),
     "The top-level length-delimited protobuf field `field` of `payload`, or None.");
}

}  // namespace anna
