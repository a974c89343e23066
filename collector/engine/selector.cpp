#include "engine/selector.h"

#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <map>
#include <set>

#include "sys/proc_stat.h"
#include "sys/sock_diag.h"

namespace qscope {

const char* contract_name(SelectorKind k) {
    switch (k) {
        case SelectorKind::pid: return "pid";
        case SelectorKind::pidfile: return "pidfile";
        case SelectorKind::comm: return "comm";
        case SelectorKind::cmdline: return "cmdline";
        case SelectorKind::port: return "port";
        case SelectorKind::cgroup: return "cgroup";
    }
    return "?";
}

std::string Selector::text() const { return std::string(contract_name(kind)) + ":" + value; }

namespace {

constexpr SelectorKind kKinds[] = {SelectorKind::pid,     SelectorKind::pidfile, SelectorKind::comm,
                                   SelectorKind::cmdline, SelectorKind::port,    SelectorKind::cgroup};

bool parse_number(const std::string& s, long max, long& out) {
    if (s.empty() || s.size() > 10 || s.find_first_not_of("0123456789") != std::string::npos) return false;
    out = std::atol(s.c_str());
    return out >= 1 && out <= max;
}

std::string describe(const ProcEntry& e) {
    std::string cmd = e.cmdline.empty() ? "[" + e.comm + "]" : e.cmdline;
    if (cmd.size() > 120) cmd = cmd.substr(0, 117) + "...";
    return "PID " + std::to_string(e.pid) + " (" + e.comm + "): " + cmd;
}

// qscope itself and the processes it runs under (sudo, the shell of `sh -c`): their
// command lines contain the selector's own text.
std::vector<int> self_and_ancestors(const std::vector<ProcEntry>& table) {
    std::map<int, int> parent;
    for (const auto& e : table) parent[e.pid] = e.ppid;
    std::vector<int> out;
    for (int p = getpid(); p > 0 && out.size() < 4096; p = parent.count(p) ? parent[p] : 0) out.push_back(p);
    return out;
}

Resolution found(int pid) {
    Resolution r;
    r.outcome = Resolution::Outcome::found;
    r.pid = pid;
    return r;
}

Resolution none(std::string reason) {
    Resolution r;
    r.outcome = Resolution::Outcome::none;
    r.reason = std::move(reason);
    return r;
}

Resolution failed(Exit code, std::string reason) {
    Resolution r;
    r.outcome = Resolution::Outcome::error;
    r.code = code;
    r.reason = std::move(reason);
    return r;
}

Resolution resolve_pid(int pid, const std::string& what) {
    const auto e = read_proc_entry(pid);
    if (!e || e->kernel_thread || e->state == 'Z') return none(what + " is not running");
    return found(pid);
}

Resolution resolve_pidfile(const std::string& path) {
    std::string text;
    errno = 0;
    if (!read_file(path, text)) {
        const int err = errno;
        if (err == ENOENT) return none("pidfile " + path + " does not exist");
        return failed(err == EACCES ? Exit::permission : Exit::no_target,
                      "cannot read pidfile " + path + ": " + errno_text(err ? err : EIO));
    }
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
        return failed(Exit::no_target, "pidfile " + path + " is a directory");
    int pid = 0;
    if (!parse_pidfile(text, pid)) {
        // Empty while the service writes it: a moment later it holds the PID.
        if (text.find_first_not_of(" \t\r\n") == std::string::npos) return none("pidfile " + path + " is empty");
        std::string shown = text.substr(0, 40);
        for (auto& c : shown)
            if (static_cast<unsigned char>(c) < 0x20) c = ' ';
        return failed(Exit::no_target, "pidfile " + path + " does not hold a PID (it reads \"" + shown + "\")");
    }
    return resolve_pid(pid, "PID " + std::to_string(pid) + " (from pidfile " + path + ")");
}

std::set<uint64_t> listener_inodes(uint16_t port) {
    std::set<uint64_t> out;
    for (int family : {AF_INET, AF_INET6})
        for (const auto& s : sock_diag_dump(family, 1u << TCP_LISTEN, false))
            if (s.sport == port) out.insert(s.inode);
    return out;
}

// Why `value` cannot be a selector of this kind ("" when it can).
std::string invalid_value(SelectorKind kind, const std::string& value) {
    if (value.empty()) return "empty value";
    long n = 0;
    switch (kind) {
        case SelectorKind::pid:
            if (!parse_number(value, 1L << 30, n)) return "not a PID (a positive number)";
            break;
        case SelectorKind::port:
            if (!parse_number(value, 65535, n)) return "not a TCP port (1-65535)";
            break;
        case SelectorKind::comm:
            // The kernel keeps 15 bytes of a process name: a longer one can never match.
            if (value.size() > 15)
                return "longer than the 15 characters the kernel keeps of a process name (/proc/PID/comm); "
                       "use --cmdline for longer names";
            break;
        case SelectorKind::cmdline: {
            std::string error;
            if (!CmdlineRegex(value, &error).valid()) return "not a regular expression (" + error + ")";
            break;
        }
        case SelectorKind::pidfile:
        case SelectorKind::cgroup:
            break;
    }
    return "";
}

}  // namespace

Selector make_selector(SelectorKind kind, const std::string& value) {
    const std::string why = invalid_value(kind, value);
    if (!why.empty()) throw Error(Exit::usage, std::string("--") + contract_name(kind) + " " + value + ": " + why);
    return Selector{kind, value};
}

Selector parse_selector(const std::string& text) {
    const auto colon = text.find(':');
    std::string kinds;
    for (auto k : kKinds) kinds += std::string(kinds.empty() ? "" : ", ") + contract_name(k);
    if (colon == std::string::npos)
        throw Error(Exit::usage, "selector \"" + text + "\": expected KIND:VALUE, KIND one of " + kinds +
                                     " (e.g. port:8080)");
    const std::string kind = text.substr(0, colon), value = text.substr(colon + 1);
    for (auto k : kKinds)
        if (kind == contract_name(k)) {
            const std::string why = invalid_value(k, value);
            if (!why.empty()) throw Error(Exit::usage, "selector \"" + text + "\": " + why);
            return Selector{k, value};
        }
    throw Error(Exit::usage, "selector \"" + text + "\": unknown kind \"" + kind + "\" (one of " + kinds + ")");
}

bool parse_pidfile(const std::string& text, int& pid) {
    const auto b = text.find_first_not_of(" \t\r\n");
    if (b == std::string::npos) return false;
    const auto e = text.find_last_not_of(" \t\r\n");
    long n = 0;
    if (!parse_number(text.substr(b, e - b + 1), 1L << 30, n)) return false;
    pid = static_cast<int>(n);
    return true;
}

std::vector<int> match_comm(const std::vector<ProcEntry>& table, const std::string& name) {
    std::vector<int> out;
    for (const auto& e : table)
        if (e.comm == name) out.push_back(e.pid);
    return out;
}

namespace {

// glibc compiles `x+` as `xx*` and `x{n,m}` as m copies of x, so nesting multiplies: 30
// nested `(...)+` took 5 GB in regcomp (measured; the fuzzer found `.++++...`). Patterns
// that could cost that are refused; a command line never needs them.
std::string too_costly(const std::string& p) {
    constexpr size_t kMaxLength = 1024;
    constexpr int kMaxPlus = 8;
    if (p.size() > kMaxLength) return "longer than " + std::to_string(kMaxLength) + " characters";
    int plus = 0;
    bool after_quantifier = false;
    for (size_t i = 0; i < p.size(); ++i) {
        const char c = p[i];
        if (c == '\\') {
            ++i;  // an escaped character is a literal
            after_quantifier = false;
            continue;
        }
        if (c == '[') {
            // A bracket expression is one character: skip to its ']' (a leading ']' or "^]" is a
            // member; "[:alpha:]" and the like hold no ']').
            size_t j = i + 1;
            if (j < p.size() && p[j] == '^') ++j;
            if (j < p.size() && p[j] == ']') ++j;
            while (j < p.size() && p[j] != ']') {
                if (p[j] == '[' && j + 1 < p.size() && (p[j + 1] == ':' || p[j + 1] == '.' || p[j + 1] == '=')) {
                    const auto close = p.find(std::string(1, p[j + 1]) + "]", j + 2);
                    j = close == std::string::npos ? p.size() : close + 2;
                } else {
                    ++j;
                }
            }
            i = j;
            after_quantifier = false;
            continue;
        }
        if (c == '{') return "repetition bounds {n,m} are not supported (use *, + or ?)";
        const bool quantifier = c == '*' || c == '+' || c == '?';
        if (quantifier && after_quantifier) return "a quantifier right after another (e.g. \"a+*\")";
        if (c == '+' && ++plus > kMaxPlus) return "more than " + std::to_string(kMaxPlus) + " '+' (use *)";
        after_quantifier = quantifier;
    }
    return "";
}

}  // namespace

CmdlineRegex::CmdlineRegex(const std::string& pattern, std::string* error) {
    if (const std::string why = too_costly(pattern); !why.empty()) {
        if (error) *error = why;
        return;
    }
    const int rc = regcomp(&re_, pattern.c_str(), REG_EXTENDED | REG_NOSUB);
    valid_ = rc == 0;
    if (!valid_ && error) {
        char buf[256];
        regerror(rc, &re_, buf, sizeof buf);
        *error = buf;
    }
}

CmdlineRegex::~CmdlineRegex() {
    if (valid_) regfree(&re_);
}

bool CmdlineRegex::search(const std::string& text) const {
    return valid_ && regexec(&re_, text.c_str(), 0, nullptr, 0) == 0;
}

std::vector<int> match_cmdline(const std::vector<ProcEntry>& table, const std::string& pattern) {
    const CmdlineRegex re(pattern);
    std::vector<int> out;
    for (const auto& e : table)
        if (!e.cmdline.empty() && re.search(e.cmdline)) out.push_back(e.pid);
    return out;
}

std::vector<int> match_cgroup(const std::vector<std::pair<int, std::string>>& cgroups, const std::string& path) {
    std::vector<int> out;
    for (const auto& [pid, cg] : cgroups)
        if (path == "/" || cg == path || (cg.size() > path.size() && cg.compare(0, path.size(), path) == 0 &&
                                          cg[path.size()] == '/'))
            out.push_back(pid);
    return out;
}

std::string normalize_cgroup_path(const std::string& path, const std::string& mount) {
    std::string p = path;
    if (!mount.empty() && p.compare(0, mount.size(), mount) == 0 && (p.size() == mount.size() || p[mount.size()] == '/'))
        p = p.substr(mount.size());
    if (p.empty() || p[0] != '/') p = "/" + p;
    while (p.size() > 1 && p.back() == '/') p.pop_back();
    return p;
}

Resolution choose_target(const std::vector<ProcEntry>& table, const std::vector<int>& matches,
                         const std::vector<int>& excluded, const std::string& what) {
    std::map<int, const ProcEntry*> by_pid;
    for (const auto& e : table) by_pid[e.pid] = &e;
    const std::set<int> skip(excluded.begin(), excluded.end());
    std::vector<const ProcEntry*> m;
    for (int pid : std::set<int>(matches.begin(), matches.end())) {
        auto it = by_pid.find(pid);
        if (it == by_pid.end() || skip.count(pid) || it->second->kernel_thread || it->second->state == 'Z') continue;
        m.push_back(it->second);
    }
    if (m.empty()) return none("no process matches: " + what);
    // The root of one tree is the match every other match descends from.
    auto descends_from = [&](int pid, int ancestor) {
        for (int hops = 0; hops < 4096; ++hops) {
            auto it = by_pid.find(pid);
            if (it == by_pid.end() || it->second->ppid <= 0) return false;
            pid = it->second->ppid;
            if (pid == ancestor) return true;
        }
        return false;
    };
    for (const ProcEntry* root : m) {
        const bool all = std::all_of(m.begin(), m.end(), [&](const ProcEntry* o) {
            return o == root || descends_from(o->pid, root->pid);
        });
        if (all) return found(root->pid);
    }
    Resolution r;
    r.outcome = Resolution::Outcome::ambiguous;
    r.reason = std::to_string(m.size()) + " processes match " + what +
               ", and they are not one process tree: narrow the selector (--cmdline REGEX, --pidfile) or give "
               "--pid:";
    for (const ProcEntry* e : m) r.reason += "\n  " + describe(*e);
    return r;
}

Resolution resolve(const Selector& sel) {
    switch (sel.kind) {
        case SelectorKind::pid: return resolve_pid(std::atoi(sel.value.c_str()), "PID " + sel.value);
        case SelectorKind::pidfile: return resolve_pidfile(sel.value);
        default: break;
    }
    const auto table = read_proc_table();
    const auto excluded = self_and_ancestors(table);
    switch (sel.kind) {
        case SelectorKind::comm:
            return choose_target(table, match_comm(table, sel.value), excluded, "processes named " + sel.value);
        case SelectorKind::cmdline:
            return choose_target(table, match_cmdline(table, sel.value), excluded,
                                 "command lines matching /" + sel.value + "/");
        case SelectorKind::port: {
            const auto port = static_cast<uint16_t>(std::atoi(sel.value.c_str()));
            std::set<uint64_t> inodes;
            try {
                inodes = listener_inodes(port);
            } catch (const Error& e) {
                return failed(e.code(), std::string("--port: ") + e.what());
            }
            if (inodes.empty()) return none("nothing listens on TCP port " + sel.value);
            auto r = choose_target(table, pids_holding_sockets(inodes), excluded,
                                   "processes listening on TCP port " + sel.value);
            if (r.outcome == Resolution::Outcome::none)
                r.reason = "TCP port " + sel.value +
                           " has a listener, but no process whose fds qscope can read holds it (another user "
                           "without CAP_SYS_PTRACE, or a socket passed away)";
            return r;
        }
        case SelectorKind::cgroup: {
            const auto mount = cgroup2_mount();
            if (!mount) return failed(Exit::kernel, "--cgroup: no cgroup2 file system is mounted (see /proc/mounts)");
            const std::string path = normalize_cgroup_path(sel.value, *mount);
            struct stat st {};
            if (::stat((*mount + path).c_str(), &st) != 0)
                return none("cgroup " + path + " does not exist (" + *mount + path + ")");
            std::vector<std::pair<int, std::string>> cgroups;
            for (const auto& e : table)
                if (auto cg = proc_cgroup_v2(e.pid)) cgroups.emplace_back(e.pid, *cg);
            return choose_target(table, match_cgroup(cgroups, path), excluded, "processes in cgroup " + path);
        }
        default: break;
    }
    return failed(Exit::failure, "unknown selector");
}

}  // namespace qscope
