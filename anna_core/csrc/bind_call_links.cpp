// Python binding of call links (call_links.hpp): anna_core._core.CallLinkServer for an
// executor worker, anna_core._core.CallLinkClient for a client.
//
// Contract:
//   CallLinkServer(ip, max_frame, max_links=256, where="", public_key=b"", secret_key=b"",
//                  admitted={}, unix_links=True): keys in Z85 (40 bytes); `admitted` maps a
//     Z85 public key to its role, as runtime.auth.Credentials.allowed does; an empty secret
//     key means plain links; unix_links: a Unix-domain socket next to the TCP port
//     (link.hpp). RuntimeError when it cannot listen; ValueError for bad keys.
//     .address, .fileno() (the epoll descriptor to poll for reading), service() ->
//     [(link, payload: bytes, role: str)], send(link, payload) -> bool, stats() -> dict
//     (its "unix": links accepted over the Unix-domain socket).
//   split_link_address(address) -> (host, port, unix path or "") or None (link.hpp);
//   unix_link_dir(base) -> (dir or "", why) and sweep_stale_links(dir) -> files removed
//     (unix_links.hpp), for tests and tools.
//   CallLinkClient(public_key=b"", secret_key=b"", max_frame=...): .fileno(),
//     begin(address, server_key, timeout) -> (link, why) (link 0 when it cannot start;
//     else it opens in wait(), without blocking), ready(link) -> bool,
//     send(link, payload, timeout) -> bool, watch(fd) (one more descriptor wait() wakes
//     for: a client's answer socket's ZMQ_FD),
//     wait(timeout) -> (watched readable, [(link, payload)], [(link, why, taken)],
//     [opened link]) after waiting up to `timeout` (0: not at all) for a link or the watched
//     descriptor (taken: how many of the client's frames the worker served from a link it
//     closed for a fault, else -1), finish(link) (half-close: no more sends, still read),
//     close(link), .open_links, .unix_links (of them, over a Unix-domain socket).
//   Every call that touches a socket releases the GIL; calls from several threads are
//   serialised by a lock per object, except that wait() waits without it (another thread
//   may send meanwhile). Timeouts are in seconds.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <mutex>

#include "call_links.hpp"
#include "link.hpp"
#include "unix_links.hpp"

namespace py = pybind11;

namespace anna {
namespace {

// A wait's timeout: 0 s is no wait at all (millis() rounds a timeout up to at least 1 ms).
int wait_millis(double seconds) {
  if (!(seconds > 0)) return 0;
  return static_cast<int>(std::ceil(std::min(seconds, 3600.0) * 1000.0));
}

int millis(double seconds) {
  if (!(seconds > 0)) return 1;
  return static_cast<int>(std::min(seconds, 3600.0) * 1000.0) + 1;
}

class PyCallLinkServer {
 public:
  PyCallLinkServer(const std::string& ip, std::size_t max_frame, std::size_t max_links,
                   const std::string& where, const py::bytes& public_key,
                   const py::bytes& secret_key, const std::map<py::bytes, std::string>& admitted,
                   bool unix_links) {
    CurveKeys keys;
    keys.public_key = public_key;
    keys.secret_key = secret_key;
    for (const auto& [key, role] : admitted) keys.admitted.emplace(std::string(key), role);
    // (roles are the worker's: "function" is one, which the kernel's check_curve_keys, made
    // for KVS nodes, does not know; WorkerLinks refuses keys that are not Z85 itself)
    s_ = std::make_unique<CallLinkServer>(ip, max_frame, max_links, where, keys, unix_links);
  }

  py::list service() {
    frames_.clear();
    {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(mu_);
      s_->service(&frames_);
    }
    py::list out;
    for (auto& [link, payload, role] : frames_)
      out.append(py::make_tuple(link, py::bytes(payload), py::str(role)));
    frames_.clear();
    return out;
  }

  bool send(std::uint64_t link, const py::bytes& payload) {
    std::string_view view = payload;
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(mu_);
    return s_->send(link, view);
  }

  py::dict stats() {
    std::lock_guard<std::mutex> lock(mu_);
    const WorkerLinks& l = s_->links();
    py::dict d;
    d["open"] = l.open();
    d["accepted"] = l.accepted();
    d["unix"] = l.unix_accepted();
    d["refused"] = l.refused();
    d["dropped"] = l.dropped();
    d["frames"] = l.frames();
    d["auth_refused"] = l.auth_refused();
    d["secured"] = l.secured();
    return d;
  }

  const std::string& address() const { return s_->address(); }
  int fileno() const { return s_->fd(); }

 private:
  std::mutex mu_;
  std::unique_ptr<CallLinkServer> s_;
  std::vector<CallLinkServer::Frame> frames_;
};

class PyCallLinkClient {
 public:
  PyCallLinkClient(const py::bytes& public_key, const py::bytes& secret_key,
                   std::size_t max_frame) {
    try {
      c_ = std::make_unique<CallLinkClient>(public_key, secret_key, max_frame);
    } catch (const std::invalid_argument& e) {
      throw py::value_error(e.what());
    }
  }

  py::tuple begin(const std::string& address, const std::string& server_key, double timeout) {
    std::string why;
    std::uint64_t id;
    {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(mu_);
      id = c_->begin(address, server_key, millis(timeout), &why);
    }
    return py::make_tuple(id, py::str(why));
  }

  bool ready(std::uint64_t link) {
    std::lock_guard<std::mutex> lock(mu_);
    return c_->ready(link);
  }

  bool send(std::uint64_t link, const py::bytes& payload, double timeout) {
    std::string_view view = payload;
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(mu_);
    return c_->send(link, view, millis(timeout));
  }

  void watch(int fd) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!c_->watch(fd))
      throw std::runtime_error(std::string("call links: epoll cannot watch descriptor ") +
                               std::to_string(fd) + ": " + std::strerror(errno));
  }

  // Waits up to `timeout` s (0: not at all) for a link or the watched descriptor, with the
  // GIL released and without the lock (another thread may send meanwhile), then takes what
  // the links have under it: (whether the watched descriptor is readable, frames, broken,
  // opened).
  py::tuple wait(double timeout) {
    CallLinkClient::Frames frames;
    CallLinkClient::Broken broken;
    std::vector<std::uint64_t> opened;
    bool watched;
    {
      py::gil_scoped_release release;
      epoll_event events[CallLinkClient::kMaxEvents];
      int n = c_->ready(events, wait_millis(timeout));
      std::lock_guard<std::mutex> lock(mu_);
      watched = c_->take(events, n, &frames, &broken, &opened);
    }
    py::tuple out = answers(frames, broken, opened);
    return py::make_tuple(watched, out[0], out[1], out[2]);
  }

  void close(std::uint64_t link) {
    std::lock_guard<std::mutex> lock(mu_);
    c_->close(link);
  }

  void finish(std::uint64_t link) {
    std::lock_guard<std::mutex> lock(mu_);
    c_->finish(link);
  }

  static py::tuple answers(const CallLinkClient::Frames& frames,
                           const CallLinkClient::Broken& broken,
                           const std::vector<std::uint64_t>& opened) {
    py::list f, b, o;
    for (auto& [link, payload] : frames) f.append(py::make_tuple(link, py::bytes(payload)));
    for (auto& [link, why, taken] : broken) b.append(py::make_tuple(link, py::str(why), taken));
    for (std::uint64_t link : opened) o.append(link);
    return py::make_tuple(f, b, o);
  }

  std::size_t open_links() {
    std::lock_guard<std::mutex> lock(mu_);
    return c_->open_links();
  }
  std::size_t unix_links() {
    std::lock_guard<std::mutex> lock(mu_);
    return c_->unix_links();
  }
  int fileno() const { return c_->fd(); }
  bool secured() const { return c_->secured(); }

 private:
  std::mutex mu_;
  std::unique_ptr<CallLinkClient> c_;
};

}  // namespace

void bind_call_links(py::module_& m) {
  py::class_<PyCallLinkServer>(m, "CallLinkServer", "A worker's call links (call_links.hpp).")
      .def(py::init<const std::string&, std::size_t, std::size_t, const std::string&,
                    const py::bytes&, const py::bytes&, const std::map<py::bytes, std::string>&,
                    bool>(),
           py::arg("ip"), py::arg("max_frame"), py::arg("max_links") = std::size_t{256},
           py::arg("where") = std::string(), py::arg("public_key") = py::bytes(),
           py::arg("secret_key") = py::bytes(),
           py::arg("admitted") = std::map<py::bytes, std::string>{},
           py::arg("unix_links") = true)
      .def_property_readonly("address", &PyCallLinkServer::address)
      .def("fileno", &PyCallLinkServer::fileno)
      .def("service", &PyCallLinkServer::service)
      .def("send", &PyCallLinkServer::send, py::arg("link"), py::arg("payload"))
      .def("stats", &PyCallLinkServer::stats);
  py::class_<PyCallLinkClient>(m, "CallLinkClient", "A client's call links (call_links.hpp).")
      .def(py::init<const py::bytes&, const py::bytes&, std::size_t>(),
           py::arg("public_key") = py::bytes(), py::arg("secret_key") = py::bytes(),
           py::arg("max_frame") = std::size_t{64} << 20)
      .def("fileno", &PyCallLinkClient::fileno)
      .def_property_readonly("secured", &PyCallLinkClient::secured)
      .def_property_readonly("open_links", &PyCallLinkClient::open_links)
      .def_property_readonly("unix_links", &PyCallLinkClient::unix_links)
      .def("begin", &PyCallLinkClient::begin, py::arg("address"), py::arg("server_key"),
           py::arg("timeout"))
      .def("ready", &PyCallLinkClient::ready, py::arg("link"))
      .def("send", &PyCallLinkClient::send, py::arg("link"), py::arg("payload"),
           py::arg("timeout"))
      .def("watch", &PyCallLinkClient::watch, py::arg("fd"))
      .def("wait", &PyCallLinkClient::wait, py::arg("timeout"))
      .def("close", &PyCallLinkClient::close, py::arg("link"))
      .def("finish", &PyCallLinkClient::finish, py::arg("link"));
  m.def("split_link_address", [](const std::string& address) -> py::object {
    std::string host, unix_path;
    int port = 0;
    if (!split_link_address(address, &host, &port, &unix_path)) return py::none();
    return py::make_tuple(host, port, unix_path);
  }, py::arg("address"), "A link address' TCP host, port and Unix path (link.hpp), or None.");
  m.def("unix_link_dir", [](const std::string& base) {
    std::string why;
    std::string dir = unix_link_dir(base, &why);
    return py::make_tuple(dir, why);
  }, py::arg("base"), "The link sockets' directory under base, or ('', why) (unix_links.hpp).");
  m.def("sweep_stale_links", &sweep_stale_links, py::arg("dir"),
        "Removes the socket files of gone listeners in dir (unix_links.hpp).");
}

}  // namespace anna
