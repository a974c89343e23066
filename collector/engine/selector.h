// Which process a target selector names. `--pid` names one process for its lifetime; the
// others (--pidfile, --comm, --cmdline, --port, --cgroup) name a service, and are asked
// again after it restarts (cli/follower.h). A selector matching several processes names
// their tree's root when they form one tree (nginx's master and workers all hold the
// listener); several unrelated processes are an error that lists them, never a guess.
#pragma once
#include <regex.h>

#include <string>
#include <vector>

#include "model/errors.h"
#include "sys/proc_table.h"

namespace qscope {

enum class SelectorKind { pid, pidfile, comm, cmdline, port, cgroup };
// "pid", "pidfile", "comm", "cmdline", "port", "cgroup": the flag's name and the KIND of
// KIND:VALUE (--target, --config).
const char* contract_name(SelectorKind k);

struct Selector {
    SelectorKind kind = SelectorKind::pid;
    std::string value;           // as given: "8080", "nginx", "/run/nginx.pid"
    std::string text() const;    // "port:8080": the service label when no name is given
    // A PID cannot come back; every other selector is asked again after the target exits.
    bool follows_restarts() const { return kind != SelectorKind::pid; }
};

// "KIND:VALUE" (port:8080, comm:nginx, cmdline:java .*app\.jar). Throws Error(usage) saying
// what is wrong: unknown kind, empty value, a port or PID that is not a number, a bad regex.
Selector parse_selector(const std::string& text);
// The same checks for a selector given as a flag (--port 8080 → kind port, value "8080").
Selector make_selector(SelectorKind kind, const std::string& value);

struct Resolution {
    enum class Outcome {
        found,      // pid: the target (a tree's root)
        none,       // nothing matches now; waiting may help (reason says what was looked for)
        ambiguous,  // several unrelated processes match (listed in reason)
        error,      // the selector cannot be answered (an unreadable pidfile); code, reason
    };
    Outcome outcome = Outcome::none;
    int pid = 0;
    std::string reason;
    Exit code = Exit::no_target;
};

// The pure core: among the PIDs that match (rows of `table`), the target or why there is
// none. Kernel threads, zombies and `excluded` (qscope and its ancestors: `sudo qscope
// export --cmdline app` must not match sudo) never match. `what` describes the selector
// for the messages ("processes named nginx").
Resolution choose_target(const std::vector<ProcEntry>& table, const std::vector<int>& matches,
                         const std::vector<int>& excluded, const std::string& what);
// A --cmdline pattern: POSIX extended (grep -E). Not std::regex: libstdc++ matches `.*`
// by recursion, one frame per character, and a JVM's command line (a classpath of tens of
// KiB) overflowed the stack (measured: a crash at 50,000 characters); glibc's matcher is not
// recursive.
class CmdlineRegex {
public:
    explicit CmdlineRegex(const std::string& pattern, std::string* error = nullptr);
    ~CmdlineRegex();
    CmdlineRegex(const CmdlineRegex&) = delete;
    CmdlineRegex& operator=(const CmdlineRegex&) = delete;
    bool valid() const { return valid_; }
    bool search(const std::string& text) const;  // anywhere in text

private:
    regex_t re_{};
    bool valid_ = false;
};

// The PIDs of `table` whose comm is `name` / whose cmdline `pattern` finds.
std::vector<int> match_comm(const std::vector<ProcEntry>& table, const std::string& name);
std::vector<int> match_cmdline(const std::vector<ProcEntry>& table, const std::string& pattern);
// The PIDs of `table` in cgroup `path` or below it, given each process's cgroup v2 path.
std::vector<int> match_cgroup(const std::vector<std::pair<int, std::string>>& cgroups, const std::string& path);
// A cgroup PATH as the user gave it → the path /proc/PID/cgroup shows: relative to the
// cgroup2 mount ("/sys/fs/cgroup/unified/system.slice/x.service" and "system.slice/x.service"
// both → "/system.slice/x.service"), no trailing '/'.
std::string normalize_cgroup_path(const std::string& path, const std::string& cgroup2_mount);
// Pidfile content → PID: one positive decimal number, surrounding whitespace allowed.
bool parse_pidfile(const std::string& text, int& pid);

// Asks the system now: reads /proc (and sock_diag for --port, the cgroup2 mount for --cgroup).
Resolution resolve(const Selector& sel);

}  // namespace qscope
