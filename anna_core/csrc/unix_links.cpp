// Unix-domain link sockets. See unix_links.hpp for the contract.
#include "unix_links.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace anna {

namespace {

bool fill_sockaddr(const std::string& path, sockaddr_un* sa) {
  if (!unix_link_path_ok(path)) return false;
  std::memset(sa, 0, sizeof *sa);
  sa->sun_family = AF_UNIX;
  std::memcpy(sa->sun_path, path.data(), path.size());
  return true;
}

// A directory (not a link to one) that its owner alone can reach: the owner, or -1.
long private_dir_owner(const std::string& dir) {
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || (st.st_mode & 077) != 0)
    return -1;
  return static_cast<long>(st.st_uid);
}

std::string random_hex(std::size_t bytes) {
  unsigned char raw[32];
  std::size_t got = 0;
  while (got < bytes) {
    ssize_t n = ::getrandom(raw + got, bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return "";
    got += static_cast<std::size_t>(n);
  }
  static const char digits[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < bytes; ++i) {
    out.push_back(digits[raw[i] >> 4]);
    out.push_back(digits[raw[i] & 15]);
  }
  return out;
}

}  // namespace

bool unix_link_path_ok(const std::string& path) {
  return !path.empty() && path[0] == '/' && path.size() < sizeof(sockaddr_un{}.sun_path) &&
         path.find('\0') == std::string::npos;
}

std::string unix_link_dir(const std::string& base, std::string* why) {
  const uid_t me = ::geteuid();
  std::string dir = base + "/anna-links-" + std::to_string(me);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    *why = "cannot make " + dir + ": " + std::strerror(errno);
    return "";
  }
  long owner = private_dir_owner(dir);
  if (owner != static_cast<long>(me)) {
    *why = dir + " is not a directory of uid " + std::to_string(me) +
           " closed to everyone else (mode 0700)";
    return "";
  }
  return dir;
}

int sweep_stale_links(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return 0;
  int removed = 0, looked = 0;
  const pid_t me = ::getpid();
  while (dirent* e = ::readdir(d)) {
    if (removed >= kMaxSweep || ++looked > 16 * kMaxSweep) break;
    std::string name = e->d_name;
    std::size_t dash = name.find('-');
    if (dash == 0 || dash == std::string::npos || dash > 10 ||
        name.find_first_not_of("0123456789") != dash)
      continue;
    long pid = std::stol(name.substr(0, dash));
    if (pid <= 0 || pid == me || ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH)
      continue;
    std::string path = dir + "/" + name;
    sockaddr_un sa;
    if (!fill_sockaddr(path, &sa)) continue;
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) break;
    bool refused = ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 &&
                   errno == ECONNREFUSED;
    ::close(fd);
    if (refused && ::unlink(path.c_str()) == 0) ++removed;
  }
  ::closedir(d);
  return removed;
}

int listen_unix_link(const std::string& dir, std::string* path, std::string* why) {
  sweep_stale_links(dir);
  std::string name = random_hex(16);
  if (name.empty()) {
    *why = std::string("getrandom: ") + std::strerror(errno);
    return -1;
  }
  std::string p = dir + "/" + std::to_string(::getpid()) + "-" + name;
  sockaddr_un sa;
  if (!fill_sockaddr(p, &sa)) {
    *why = "the socket path " + p.substr(0, 128) + " is too long";
    return -1;
  }
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    *why = std::string("socket: ") + std::strerror(errno);
    return -1;
  }
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    *why = "bind " + p + ": " + std::strerror(errno);
    ::close(fd);
    return -1;
  }
  if (::listen(fd, 128) != 0) {
    *why = "listen on " + p + ": " + std::strerror(errno);
    ::close(fd);
    ::unlink(p.c_str());
    return -1;
  }
  *path = p;
  return fd;
}

int connect_unix_link(const std::string& path) {
  sockaddr_un sa;
  if (!fill_sockaddr(path, &sa)) return -1;
  long owner = private_dir_owner(path.substr(0, path.rfind('/')));
  if (owner < 0) return -1;
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  ucred peer{};
  socklen_t len = sizeof peer;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
      ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &len) != 0 ||
      static_cast<long>(peer.uid) != owner) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace anna
