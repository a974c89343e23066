// Helpers for integration tests: spawn real processes, run the real qscope binary, read
// the oracles (ss, /proc, netstat). Everything here talks to the live system.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace qs_test {

// Absolute paths into the build tree.
std::string qscope_bin();                          // build/qscope
std::string target_bin(const std::string& name);   // build/targets/<name>
std::string source_dir();

// Prints "SKIP: reason" and returns; fails the current test when QSCOPE_FAIL_ON_SKIP=1
// (CI), since a skipped integration test proves nothing.
void skip(const std::string& reason);
// True when we may load BPF (root); otherwise calls skip() and returns false.
bool require_root();

// A child process, killed (SIGTERM, then SIGKILL after 2 s) when destroyed.
class Proc {
public:
    Proc() = default;
    Proc(Proc&& o) noexcept;
    Proc& operator=(Proc&& o) noexcept;
    Proc(const Proc&) = delete;
    ~Proc();

    pid_t pid() const { return pid_; }
    bool running();
    // Waits up to timeout; returns the exit status (WEXITSTATUS, or 128+signal), or -1.
    int wait(double timeout_seconds);
    void signal(int sig);
    void kill_and_wait();
    // Captured stdout/stderr so far (when spawned with capture).
    std::string out() const;
    std::string err() const;
    // Waits until stdout contains `needle`; returns the matching line or "".
    std::string wait_for_output(const std::string& needle, double timeout_seconds);

    friend Proc spawn(const std::vector<std::string>&, const std::map<std::string, std::string>&, bool);

private:
    pid_t pid_ = -1;
    int status_ = -1;
    bool reaped_ = false;
    std::string out_path_, err_path_;
};

// Starts argv[0] (absolute path, or searched in PATH) with extra environment; stdout and
// stderr go to temp files readable through out()/err().
Proc spawn(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {},
           bool new_session = false);

struct RunResult {
    int rc = -1;                 // exit status, 128+signal, or -1 on timeout (then killed)
    std::string out, err;
    nlohmann::json json;         // parsed stdout when it is JSON (else null)
};
// The sock family's probe_attach row of a snapshot for `hook` ("sk_data_ready"), or null.
const nlohmann::json* sock_attach_row(const nlohmann::json& snapshot, const std::string& hook);
// Runs a command to completion with a timeout.
RunResult run(const std::vector<std::string>& argv, double timeout_seconds,
              const std::map<std::string, std::string>& env = {});
// A QSCOPE_TEST_CGROUP run: the test binary and its servers in a fresh cgroup v2 of their own,
// where qscope scopes arrivals to it.
bool in_test_cgroup();
// qscope's JSON output, parsed (discarded when not JSON and !throw_on_error). In a
// QSCOPE_TEST_CGROUP run, a snapshot whose arrivals were not scoped to the cgroup fails the test
// (as do run() and parse_metrics()).
nlohmann::json qscope_json(const std::string& text, bool throw_on_error = true);
// Runs `qscope args...`; json parsed when stdout is JSON.
RunResult run_qscope(const std::vector<std::string>& args, double timeout_seconds);
// `sh -c cmd`, stdout returned; rc optional.
std::string sh(const std::string& cmd, int* rc = nullptr);

// Starts one of our test targets and waits for its "READY port=N" line.
struct Server {
    Proc proc;
    uint16_t port = 0;
};
Server start_target(const std::string& name, const std::vector<std::string>& args, double timeout_seconds = 10);

bool wait_for_port(uint16_t port, double timeout_seconds, const char* host = "127.0.0.1");
// Call before starting a server on `port`: a listener already there would answer in place of
// the test's server (and fool wait_for_port). One left by an earlier test binary that was
// killed (a ctest timeout, a crash) is stopped, with every process naming the same /tmp/qs-*
// scratch directory; anything else fails the test, naming the holder.
void require_free_port(uint16_t port);
// qscope has attached when its process holds every family's BPF links (it prints nothing in
// --json mode): the families attach side by side, and the first window opens once the last
// is done, so this waits until the count has stood still for 0.4 s (the last family's seeding
// walk) with at least the sock family's five.
bool wait_attached(pid_t qscope_pid, double timeout_seconds);
// Any BPF program held yet (a prog_id in /proc/PID/fdinfo)? Attach in any mode, even one
// that loads no sock links (e.g. a target refused halfway).
bool holds_bpf_programs(pid_t pid);
void sleep_s(double seconds);
double now_s();  // monotonic seconds
// The upper median (the middle of the sorted values, the higher one of an even count); -1 for
// none. Of an instant's samples that dip below the steady value (a client between requests)
// half may dip and it still reads the steady value.
double median(std::vector<double> v);

// ---- oracles ----------------------------------------------------------------------------
struct SsSocket {
    std::string state;           // LISTEN, ESTAB, ...
    uint64_t recvq = 0, sendq = 0;
    std::string local, peer;     // "ip:port"
    uint16_t local_port = 0, peer_port = 0;
    std::vector<int> pids;       // from users:(...) when -p was used
};
// `ss -Htan -p [filter]`, parsed. filter e.g. "sport = :8080".
std::vector<SsSocket> ss(const std::string& filter = "", bool listening = false);
// Recv-Q of the listening socket on `port` (current accept-queue depth), or -1.
int64_t ss_listen_recvq(uint16_t port);
// TcpExt counter from /proc/net/netstat, e.g. "ListenOverflows".
uint64_t netstat_counter(const std::string& name);
// /proc/PID/task/*: per-thread comm, state letter and syscall number (-1 running).
struct TaskState {
    int tid = 0;
    std::string comm;
    char state = '?';
    long syscall = -2;           // -1 running in user space, -2 unknown
};
std::vector<TaskState> proc_tasks(pid_t pid);
// /proc/PID/task/TID/schedstat: seconds on a CPU and seconds runnable waiting for one (the
// scheduler's own accounting, in ns); {-1, -1} when the thread is gone.
std::pair<double, double> thread_schedstat(pid_t pid, pid_t tid);
uint64_t proc_rss_kib(pid_t pid);
// Reads a one-line JSON counters file written by our targets; null if absent/partial.
nlohmann::json read_counters(const std::string& path);
// Polls qs_server's counters until it has completed requests and a worker has waited at its
// pool (the pool-gate scenario is on); returns the last read.
nlohmann::json wait_for_pool_gate(const std::string& counters_path, double timeout_seconds);
// A file removed when this goes out of scope. Declare it before the process that writes it
// (e.g. a target's --counters-file): the process is stopped first, then the file goes, even
// when a REQUIRE ends the test early.
struct ScratchFile {
    std::string path;
    explicit ScratchFile(std::string p) : path(std::move(p)) {}
    ScratchFile(const ScratchFile&) = delete;
    ~ScratchFile();
};
// The whole file ("" when unreadable).
std::string read_text(const std::string& path);
std::string temp_dir(const std::string& prefix);  // fresh directory under /tmp
// Minimal blocking HTTP/1.0 GET; returns the body ("" on failure). For stub_status etc.
std::string http_get(const std::string& host, uint16_t port, const std::string& path, double timeout_seconds = 5);

// ---- real servers ------------------------------------------------------------------------
// A private PostgreSQL cluster (tests/apps/pg.sh): loopback TCP on `port` and its Unix socket
// in socket_dir() (.s.PGSQL.<port>). Stopped when this goes out of scope.
struct PgCluster {
    std::string dir;
    uint16_t port = 0;
    pid_t postmaster = 0;
    bool ok = false;
    explicit PgCluster(uint16_t p);
    ~PgCluster();
    PgCluster(const PgCluster&) = delete;
    std::string socket_dir() const { return dir + "/cluster"; }
    std::string socket_path() const { return socket_dir() + "/.s.PGSQL." + std::to_string(port); }
    std::string conn() const { return "-h 127.0.0.1 -p " + std::to_string(port) + " -U postgres"; }
    std::string psql(const std::string& sql) const;
    // pg_stat_activity's client backends matching `where`, less the sampling session itself.
    int count(const std::string& where) const;
};

// ---- Prometheus (Debian's prometheus package), for the exporter's tests --------------------
// /metrics text → "name{labels}" → value (comments skipped).
std::map<std::string, double> parse_metrics(const std::string& text);
bool have_prometheus();
// A real Prometheus on 127.0.0.1:port scraping `targets` (ADDR:PORT) every second as job
// "qscope"; stopped, and its scratch directory removed, when destroyed.
// Every PromQL expression of dashboards/qscope.json, as written (with $variables).
std::vector<std::string> dashboard_exprs();
class Prometheus {
public:
    // rule_files: rule files (absolute paths) it evaluates every second.
    Prometheus(uint16_t port, const std::vector<std::string>& targets, const std::vector<std::string>& rule_files = {});
    ~Prometheus();
    Prometheus(const Prometheus&) = delete;
    // GET /api/v1/...; null on failure. query(): the instant query's data.result array.
    nlohmann::json get(const std::string& path, const std::map<std::string, std::string>& params);
    nlohmann::json query(const std::string& expr);
    std::string err() const { return proc_.err(); }

private:
    std::string dir_;
    uint16_t port_;
    Proc proc_;
};

// Direct children of `pid` (every thread's /proc/PID/task/TID/children).
std::set<int> children(pid_t pid);

// nginx, the oracle of several tests: its binary ("" when not installed), the first worker
// of a master (0 after `timeout_seconds`), and its stub_status page ("Active connections: N
// \n server accepts handled requests\n A H R \n Reading: r Writing: w Waiting: x"), -1
// for what could not be read.
std::string find_nginx();
// A test's own nginx.conf at prefix/nginx.conf: root, in the foreground, `workers` worker
// processes, its pid, error log and temp files under prefix (created: prefix/logs, prefix/tmp),
// so no test touches /etc/nginx or another's files; `http` is the body of the http block
// (access_log, upstreams, servers). Returns the file's path.
std::string write_nginx_conf(const std::string& prefix, int workers, const std::string& http);
pid_t nginx_worker(pid_t master, double timeout_seconds);
struct StubStatus {
    long requests = -1;  // handled since start
    long writing = -1;   // requests whose response is being produced or written
};
StubStatus stub_status(uint16_t port, const std::string& path = "/nginx_status");

}  // namespace qs_test
