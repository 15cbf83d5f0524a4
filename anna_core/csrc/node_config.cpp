// Node configuration JSON reader. See node_config.hpp for the contract.
#include "node_config.hpp"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <utility>
#include <vector>

namespace anna {
namespace {

struct JsonValue {
  enum Type { kNull, kBool, kNumber, kString, kObject } type = kNull;
  bool boolean = false;
  double number = 0;
  bool integral = false;
  long long integer = 0;
  std::string text;
  std::vector<std::pair<std::string, std::string>> members;  // kObject: string values only
};

class FlatJsonReader {
 public:
  explicit FlatJsonReader(const std::string& s) : s_(s) {}

  template <class Fn>
  void read_object(Fn&& on_member) {
    skip_ws();
    expect('{');
    skip_ws();
    if (peek() == '}') {
      ++i_;
    } else {
      while (true) {
        skip_ws();
        std::string key = read_string();
        skip_ws();
        expect(':');
        skip_ws();
        JsonValue v = read_value(key);
        on_member(key, v);
        skip_ws();
        if (peek() == ',') { ++i_; continue; }
        expect('}');
        break;
      }
    }
    skip_ws();
    if (i_ != s_.size()) fail("trailing characters after the object");
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::invalid_argument("node config JSON: " + what + " at offset " + std::to_string(i_));
  }
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void skip_ws() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++i_;
  }
  bool consume(const char* word) {
    std::size_t n = std::char_traits<char>::length(word);
    if (s_.compare(i_, n, word) != 0) return false;
    i_ += n;
    return true;
  }

  static void put_utf8(std::string* out, unsigned cp) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  unsigned read_hex4() {
    if (i_ + 4 > s_.size()) fail("truncated \\u escape");
    unsigned v = 0;
    for (int k = 0; k < 4; ++k) {
      char c = s_[i_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= c - '0';
      else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
      else fail("bad \\u escape");
    }
    return v;
  }

  std::string read_string() {
    expect('"');
    std::string out;
    while (true) {
      if (i_ >= s_.size()) fail("unterminated string");
      char c = s_[i_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in string");
      if (c != '\\') { out.push_back(c); continue; }
      if (i_ >= s_.size()) fail("unterminated escape");
      char e = s_[i_++];
      switch (e) {
        case '"': out.push_back('"'); break;
        case '\\': out.push_back('\\'); break;
        case '/': out.push_back('/'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'u': {
          unsigned cp = read_hex4();
          if (cp >= 0xD800 && cp < 0xDC00) {
            if (!consume("\\u")) fail("lone surrogate");
            unsigned lo = read_hex4();
            if (lo < 0xDC00 || lo >= 0xE000) fail("bad surrogate pair");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          put_utf8(&out, cp);
          break;
        }
        default: fail("bad escape");
      }
    }
  }

  JsonValue read_value(const std::string& key) {
    JsonValue v;
    char c = peek();
    if (c == '"') {
      v.type = JsonValue::kString;
      v.text = read_string();
    } else if (c == '{') {
      read_string_object(key, &v);
    } else if (consume("true")) {
      v.type = JsonValue::kBool;
      v.boolean = true;
    } else if (consume("false")) {
      v.type = JsonValue::kBool;
    } else if (consume("null")) {
      v.type = JsonValue::kNull;
    } else if (c == '-' || std::isdigit(static_cast<unsigned char>(c))) {
      std::size_t start = i_;
      if (peek() == '-') ++i_;
      bool integral = true;
      while (i_ < s_.size()) {
        char d = s_[i_];
        if (std::isdigit(static_cast<unsigned char>(d))) { ++i_; continue; }
        if (d == '.' || d == 'e' || d == 'E' || d == '+' || d == '-') { integral = false; ++i_; continue; }
        break;
      }
      std::string num = s_.substr(start, i_ - start);
      char* end = nullptr;
      v.type = JsonValue::kNumber;
      v.number = std::strtod(num.c_str(), &end);
      if (end != num.c_str() + num.size() || !std::isfinite(v.number)) fail("bad number");
      v.integral = integral || (std::floor(v.number) == v.number && std::fabs(v.number) < 9e15);
      v.integer = integral ? std::strtoll(num.c_str(), nullptr, 10) : static_cast<long long>(v.number);
    } else {
      fail("value of \"" + key + "\" must be a string, number, boolean or null");
    }
    return v;
  }

  // One level of nesting: an object whose values are all strings.
  void read_string_object(const std::string& key, JsonValue* v) {
    v->type = JsonValue::kObject;
    expect('{');
    skip_ws();
    if (peek() == '}') {
      ++i_;
      return;
    }
    while (true) {
      skip_ws();
      std::string name = read_string();
      skip_ws();
      expect(':');
      skip_ws();
      if (peek() != '"') fail("the values inside \"" + key + "\" must be strings");
      v->members.emplace_back(std::move(name), read_string());
      skip_ws();
      if (peek() == ',') { ++i_; continue; }
      expect('}');
      return;
    }
  }

  const std::string& s_;
  std::size_t i_ = 0;
};

std::string want_string(const std::string& key, const JsonValue& v) {
  if (v.type != JsonValue::kString) throw std::invalid_argument("node config: " + key + " must be a string");
  return v.text;
}

long long want_int(const std::string& key, const JsonValue& v, long long lo, long long hi) {
  if (v.type != JsonValue::kNumber || !v.integral)
    throw std::invalid_argument("node config: " + key + " must be an integer");
  if (v.integer < lo || v.integer > hi)
    throw std::invalid_argument("node config: " + key + " must be in [" + std::to_string(lo) +
                                ", " + std::to_string(hi) + "]");
  return v.integer;
}

}  // namespace

NodeConfig parse_node_config(const std::string& json) {
  NodeConfig c;
  bool has_node_id = false;
  FlatJsonReader reader(json);
  reader.read_object([&](const std::string& key, const JsonValue& v) {
    if (v.type == JsonValue::kNull) {
      if (key == "node_id") throw std::invalid_argument("node config: node_id must not be null");
      return;  // default
    }
    if (key == "node_id") {
      c.node_id = want_string(key, v);
      has_node_id = true;
    } else if (key == "tier") {
      if (v.type == JsonValue::kNumber) {
        c.tier = static_cast<int>(want_int(key, v, 0, 1));
      } else {
        std::string t = want_string(key, v);
        if (t == "memory") c.tier = 0;
        else if (t == "disk") c.tier = 1;
        else throw std::invalid_argument("node config: tier must be \"memory\" or \"disk\"");
      }
    } else if (key == "threads") {
      c.threads = static_cast<int>(want_int(key, v, 1, 1024));
    } else if (key == "ip") {
      c.ip = want_string(key, v);
    } else if (key == "data_dir") {
      c.data_dir = want_string(key, v);
    } else if (key == "gossip_period_ms") {
      c.gossip_period_ms = static_cast<int>(want_int(key, v, 1, 3600 * 1000));
    } else if (key == "max_value_bytes") {
      c.max_value_bytes = static_cast<std::size_t>(want_int(key, v, 1, 1LL << 40));
    } else if (key == "pin_threads") {
      if (v.type != JsonValue::kBool) throw std::invalid_argument("node config: pin_threads must be a boolean");
      c.pin_threads = v.boolean;
    } else if (key == "client_links") {
      if (v.type != JsonValue::kBool) throw std::invalid_argument("node config: client_links must be a boolean");
      c.client_links = v.boolean;
    } else if (key == "unix_links") {
      if (v.type != JsonValue::kBool) throw std::invalid_argument("node config: unix_links must be a boolean");
      c.unix_links = v.boolean;
    } else if (key == "log_level") {
      c.log_level = want_string(key, v);
    } else if (key == "handoff_retry_ms") {
      c.handoff_retry_ms = static_cast<int>(want_int(key, v, 1, 3600 * 1000));
    } else if (key == "handoff_window_ms") {
      c.handoff_window_ms = static_cast<int>(want_int(key, v, 1, 24 * 3600 * 1000));
    } else if (key == "fetch_timeout_ms") {
      c.fetch_timeout_ms = static_cast<int>(want_int(key, v, 1, 3600 * 1000));
    } else if (key == "max_push_sockets") {
      c.max_push_sockets = static_cast<std::size_t>(want_int(key, v, 1, 1000000));
    } else if (key == "push_handshake_ms") {
      c.push_handshake_ms = static_cast<int>(want_int(key, v, 1, 3600 * 1000));
    } else if (key == "stats_top_k") {
      c.stats_top_k = static_cast<std::size_t>(want_int(key, v, 1, 1000000));
    } else if (key == "service_rate") {
      if (v.type != JsonValue::kNumber)
        throw std::invalid_argument("node config: service_rate must be a number");
      if (!(v.number == 0 || (v.number >= kMinServiceRate && v.number <= kMaxServiceRate)))
        throw std::invalid_argument(
            "node config: service_rate must be 0 (no limit) or in [0.001, 1e9] requests/s");
      c.service_rate = v.number;
    } else if (key == "capacity_bytes") {
      c.capacity_bytes = static_cast<std::uint64_t>(want_int(key, v, 0, 1LL << 62));
    } else if (key == "disk_sync") {
      std::string m = want_string(key, v);
      if (!parse_disk_sync(m, &c.disk_sync))
        throw std::invalid_argument(
            "node config: disk_sync must be \"none\", \"interval\" or \"always\", got \"" + m +
            "\"");
    } else if (key == "disk_sync_interval_ms") {
      c.disk_sync_interval_ms = static_cast<int>(want_int(key, v, 1, 3600 * 1000));
    } else if (key == "tombstone_ttl_ms") {
      c.tombstone_ttl_ms = static_cast<int>(want_int(key, v, 1, 24 * 3600 * 1000));
    } else if (key == "curve_public_key") {
      c.curve.public_key = want_string(key, v);
    } else if (key == "curve_secret_key") {
      c.curve.secret_key = want_string(key, v);
    } else if (key == "curve_admitted") {
      if (v.type != JsonValue::kObject)
        throw std::invalid_argument("node config: curve_admitted must be an object {public key: role}");
      for (const auto& [k, role] : v.members) c.curve.admitted[k] = role;
    } else {
      throw std::invalid_argument("node config: unknown key \"" + key + "\"");
    }
  });
  if (!has_node_id || c.node_id.empty()) throw std::invalid_argument("node config: node_id is required");
  if (c.tier == 1 && c.data_dir.empty())
    throw std::invalid_argument("node config: a disk node needs data_dir");
  if (c.ip.empty()) throw std::invalid_argument("node config: ip must not be empty");
  check_curve_keys(c.curve);
  return c;
}

}  // namespace anna
