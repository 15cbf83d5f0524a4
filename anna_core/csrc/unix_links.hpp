// Unix-domain link sockets: where a link listener's socket file lives, who can reach it, and
// how a client decides it may use one. The transport only: framing, handshake and admission
// are the same as over TCP (link.hpp, secure_link.hpp).
//
// Contract:
//   * unix_link_dir(base, &why): the directory this process' listeners put their socket
//     files in, base + "/anna-links-<euid>" (base "/tmp" in service), created mode 0700 when
//     missing. "" with *why set when it cannot be made or is not one this euid alone can
//     reach: a symbolic link, a directory another user owns, or one with any group or other
//     permission bit (someone else made it first) — the listener then offers TCP alone.
//   * listen_unix_link(dir, &path, &why): a non-blocking listening AF_UNIX stream socket
//     bound at dir/<pid>-<32 random hex digits> (unguessable, unique per listener), or -1
//     with *why set. Before binding it removes what killed listeners left in dir
//     (sweep_stale_links), so files do not pile up across restarts.
//   * sweep_stale_links(dir): removes at most kMaxSweep files of dir named <pid>-... whose
//     process is gone (kill(pid, 0) fails with ESRCH) and whose socket refuses a connect
//     (no process listens on it: a live listener in another pid namespace keeps its file).
//   * connect_unix_link(path): a non-blocking AF_UNIX stream descriptor connected to the
//     listener at path, or -1 at once when the path is not usable here: missing (another
//     host, another pod), not in a directory reachable by its owner alone, refused, its
//     backlog full, or a listener whose uid is not the directory's owner (SO_PEERCRED).
//     Never waits: a Unix-domain connect completes or fails in the call.
//   * unix_link_path_ok(path): an absolute path that fits a sockaddr_un, without NUL.
#pragma once

#include <string>

namespace anna {

constexpr int kMaxSweep = 64;

std::string unix_link_dir(const std::string& base, std::string* why);
int listen_unix_link(const std::string& dir, std::string* path, std::string* why);
int sweep_stale_links(const std::string& dir);
int connect_unix_link(const std::string& path);
bool unix_link_path_ok(const std::string& path);

}  // namespace anna
