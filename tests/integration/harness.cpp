#include "harness.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <httplib.h>

#include "sys/proc_table.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>
#include <utility>

extern char** environ;

namespace qs_test {

std::string source_dir() { return QSCOPE_SOURCE_DIR; }
std::string qscope_bin() { return std::string(QSCOPE_BINARY_DIR) + "/qscope"; }
std::string target_bin(const std::string& name) { return std::string(QSCOPE_BINARY_DIR) + "/targets/" + name; }

void skip(const std::string& reason) {
    std::printf("SKIP: %s\n", reason.c_str());
    std::fflush(stdout);
    const char* f = std::getenv("QSCOPE_FAIL_ON_SKIP");
    if (f && std::string(f) == "1") FAIL("skipped in CI, which counts as a failure: " << reason);
}

bool require_root() {
    if (geteuid() == 0) return true;
    skip("integration tests load BPF programs and need root");
    return false;
}

double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

double median(std::vector<double> v) {
    if (v.empty()) return -1;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

namespace {
// QSCOPE_TEST_CGROUP=1 (ctest's integration.<name>.cgroup): the test binary, and so every
// server it starts, runs in a cgroup of its own, where `--scope auto` scopes arrivals to the
// target's cgroup (docs/kernel.md "Scoped to the target's cgroup"); run(), qscope_json() and
// parse_metrics() then hold every snapshot and /metrics read to that mode. The cgroup goes
// when the binary exits.
class TestCgroup {
public:
    TestCgroup() {
        if (!std::getenv("QSCOPE_TEST_CGROUP")) return;
        const auto mount = qscope::cgroup2_mount();
        const auto home = qscope::proc_cgroup_v2(getpid());
        if (!mount || !home) {
            std::fprintf(stderr, "QSCOPE_TEST_CGROUP: no cgroup v2 here (%s)\n", mount ? "/proc/self/cgroup" : "/proc/mounts");
            std::exit(1);
        }
        home_ = *mount + (*home == "/" ? "" : *home);
        dir_ = *mount + "/qscope-it-" + std::to_string(getpid());
        if (mkdir(dir_.c_str(), 0755) != 0 || !join(dir_)) {
            std::fprintf(stderr, "QSCOPE_TEST_CGROUP: cannot make and join %s: %s\n", dir_.c_str(), std::strerror(errno));
            std::exit(1);
        }
        std::printf("QSCOPE_TEST_CGROUP: this test and its servers run in cgroup %s\n", dir_.c_str());
    }
    ~TestCgroup() {
        if (dir_.empty()) return;
        join(home_);
        // Servers a test killed may take a moment to leave.
        for (int i = 0; i < 40 && rmdir(dir_.c_str()) != 0 && errno == EBUSY; ++i) sleep_s(0.05);
    }
    bool active() const { return !dir_.empty(); }

private:
    static bool join(const std::string& dir) {
        std::ofstream f(dir + "/cgroup.procs");
        f << getpid() << std::flush;
        return static_cast<bool>(f);
    }
    std::string dir_, home_;
};
const TestCgroup test_cgroup;

// In a QSCOPE_TEST_CGROUP run, a snapshot whose arrivals are not scoped to the cgroup did
// not test what the run is for.
void check_scope(const nlohmann::json& j) {
    if (!test_cgroup.active()) return;
    const nlohmann::json* arrivals = sock_attach_row(j, "sk_data_ready");
    const nlohmann::json* unscoped = sock_attach_row(j, "cgroup_skb/ingress");
    if (arrivals && arrivals->value("attach", "") != "cgroup_skb")
        FAIL_CHECK("QSCOPE_TEST_CGROUP: arrivals via " << arrivals->value("attach", "")
                                                        << ", not the target's cgroup: "
                                                        << (unscoped ? unscoped->value("off", "") : ""));
}
// The same for an exporter's /metrics (qscope_sock_scope_info).
void check_scope(const std::map<std::string, double>& metrics) {
    if (!test_cgroup.active()) return;
    for (const auto& [k, v] : metrics)
        if (k.rfind("qscope_sock_scope_info{", 0) == 0 && v == 1 && k.find("mode=\"cgroup\"") == std::string::npos)
            FAIL_CHECK("QSCOPE_TEST_CGROUP: arrivals not scoped to the target's cgroup: " << k);
}

// Every scratch directory of this test binary, removed when it exits: servers write there
// (a PostgreSQL cluster is ~40 MB), and a test that fails half-way leaves no cleanup behind.
std::vector<std::string>& temp_dirs() {
    static std::vector<std::string> dirs;
    return dirs;
}
void remove_temp_dirs() {
    std::error_code ec;  // best effort, at exit
    for (const auto& d : temp_dirs()) std::filesystem::remove_all(d, ec);
}
}  // namespace

std::string temp_dir(const std::string& prefix) {
    std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
    char* p = mkdtemp(tmpl.data());
    if (!p) throw std::runtime_error("mkdtemp failed");
    if (temp_dirs().empty()) std::atexit(remove_temp_dirs);
    temp_dirs().push_back(p);
    return p;
}

ScratchFile::~ScratchFile() { ::unlink(path.c_str()); }

std::string read_text(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::ostringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// ---- Proc ----------------------------------------------------------------------------
Proc::Proc(Proc&& o) noexcept { *this = std::move(o); }
Proc& Proc::operator=(Proc&& o) noexcept {
    if (this != &o) {
        if (pid_ > 0 && !reaped_) kill_and_wait();
        if (!out_path_.empty()) unlink(out_path_.c_str());
        if (!err_path_.empty()) unlink(err_path_.c_str());
        pid_ = o.pid_;
        status_ = o.status_;
        reaped_ = o.reaped_;
        out_path_ = std::exchange(o.out_path_, {});
        err_path_ = std::exchange(o.err_path_, {});
        o.pid_ = -1;
        o.reaped_ = true;
    }
    return *this;
}
Proc::~Proc() {
    if (pid_ > 0 && !reaped_) kill_and_wait();
    if (!out_path_.empty()) unlink(out_path_.c_str());
    if (!err_path_.empty()) unlink(err_path_.c_str());
}

bool Proc::running() {
    if (pid_ <= 0 || reaped_) return false;
    int st = 0;
    pid_t r = waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
        reaped_ = true;
        status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        return false;
    }
    return true;
}

int Proc::wait(double timeout) {
    const double end = now_s() + timeout;
    while (running()) {
        if (now_s() > end) return -1;
        sleep_s(0.01);
    }
    return status_;
}

void Proc::signal(int sig) {
    if (pid_ > 0 && !reaped_) ::kill(pid_, sig);
}

void Proc::kill_and_wait() {
    if (pid_ <= 0 || reaped_) return;
    ::kill(pid_, SIGTERM);
    if (wait(2.0) < 0 && running()) {
        ::kill(pid_, SIGKILL);
        wait(5.0);
    }
}

std::string Proc::out() const { return out_path_.empty() ? "" : read_text(out_path_); }
std::string Proc::err() const { return err_path_.empty() ? "" : read_text(err_path_); }

std::string Proc::wait_for_output(const std::string& needle, double timeout) {
    const double end = now_s() + timeout;
    while (now_s() < end) {
        const std::string o = out();
        auto p = o.find(needle);
        if (p != std::string::npos) {
            auto s = o.rfind('\n', p);
            auto e = o.find('\n', p);
            s = s == std::string::npos ? 0 : s + 1;
            return o.substr(s, e == std::string::npos ? std::string::npos : e - s);
        }
        if (!running()) return "";
        sleep_s(0.02);
    }
    return "";
}

Proc spawn(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env, bool new_session) {
    Proc p;
    // Our PID in the names: what a killed test binary left running is known by them.
    std::string out_t = "/tmp/qs-out-" + std::to_string(::getpid()) + "-XXXXXX";
    std::string err_t = "/tmp/qs-err-" + std::to_string(::getpid()) + "-XXXXXX";
    int ofd = mkstemp(out_t.data()), efd = mkstemp(err_t.data());
    p.out_path_ = out_t;
    p.err_path_ = err_t;
    pid_t pid = fork();
    if (pid == 0) {
        // Catch2's handlers are inherited until exec: a child killed in that window would
        // print a fake test failure.
        for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGSEGV, SIGABRT, SIGPIPE}) ::signal(sig, SIG_DFL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, nullptr);
        if (new_session) setsid();
        dup2(ofd, 1);
        dup2(efd, 2);
        int nul = open("/dev/null", O_RDONLY);
        dup2(nul, 0);
        for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
        std::vector<char*> args;
        for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
        args.push_back(nullptr);
        execvp(args[0], args.data());
        std::fprintf(stderr, "exec %s: %s\n", args[0], std::strerror(errno));
        _exit(127);
    }
    close(ofd);
    close(efd);
    p.pid_ = pid;
    return p;
}

const nlohmann::json* sock_attach_row(const nlohmann::json& snapshot, const std::string& hook) {
    if (!snapshot.is_object() || !snapshot.contains("probe_attach")) return nullptr;
    for (const auto& a : snapshot["probe_attach"])
        if (a.value("family", "") == "sock" && a.value("hook", "") == hook) return &a;
    return nullptr;
}

RunResult run(const std::vector<std::string>& argv, double timeout, const std::map<std::string, std::string>& env) {
    Proc p = spawn(argv, env);
    RunResult r;
    r.rc = p.wait(timeout);
    if (r.rc < 0) p.kill_and_wait();
    r.out = p.out();
    r.err = p.err();
    if (!r.out.empty() && (r.out[0] == '{' || r.out[0] == '[')) {
        r.json = qscope_json(r.out, false);
        if (r.json.is_discarded()) r.json = nullptr;
    }
    return r;
}

bool in_test_cgroup() { return test_cgroup.active(); }

nlohmann::json qscope_json(const std::string& text, bool throw_on_error) {
    nlohmann::json j = nlohmann::json::parse(text, nullptr, throw_on_error);
    check_scope(j);
    return j;
}

RunResult run_qscope(const std::vector<std::string>& args, double timeout) {
    std::vector<std::string> argv{qscope_bin()};
    argv.insert(argv.end(), args.begin(), args.end());
    return run(argv, timeout);
}

std::string sh(const std::string& cmd, int* rc) {
    std::string out;
    FILE* f = popen(cmd.c_str(), "r");
    if (!f) {
        if (rc) *rc = -1;
        return out;
    }
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
    int st = pclose(f);
    if (rc) *rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return out;
}

Server start_target(const std::string& name, const std::vector<std::string>& args, double timeout) {
    std::vector<std::string> argv{target_bin(name)};
    argv.insert(argv.end(), args.begin(), args.end());
    Server s;
    s.proc = spawn(argv);
    const std::string line = s.proc.wait_for_output("READY port=", timeout);
    if (line.empty())
        throw std::runtime_error(name + " did not become ready: " + s.proc.err());
    s.port = static_cast<uint16_t>(std::atoi(line.c_str() + line.find("port=") + 5));
    return s;
}

bool wait_for_port(uint16_t port, double timeout, const char* host) {
    const double end = now_s() + timeout;
    while (now_s() < end) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(port);
        inet_pton(AF_INET, host, &a.sin_addr);
        const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
        close(fd);
        if (ok) return true;
        sleep_s(0.05);
    }
    return false;
}

bool wait_attached(pid_t qscope_pid, double timeout_seconds) {
    const double end = now_s() + timeout_seconds;
    const std::string dir = "/proc/" + std::to_string(qscope_pid) + "/fd";
    int last = -1;
    double stable_since = 0;
    while (now_s() < end) {
        int links = 0;
        if (DIR* d = opendir(dir.c_str())) {
            char buf[64];
            while (dirent* e = readdir(d)) {
                const ssize_t n = readlink((dir + "/" + e->d_name).c_str(), buf, sizeof(buf) - 1);
                if (n > 0 && std::string(buf, static_cast<size_t>(n)) == "anon_inode:bpf_link") ++links;
            }
            closedir(d);
        }
        if (links != last) {
            last = links;
            stable_since = now_s();
        } else if (links >= 5 && now_s() - stable_since >= 0.4) {
            return true;
        }
        sleep_s(0.05);
    }
    return false;
}

bool holds_bpf_programs(pid_t pid) {
    const std::string dir = "/proc/" + std::to_string(pid) + "/fdinfo";
    DIR* d = opendir(dir.c_str());
    if (!d) return false;
    bool found = false;
    while (auto* e = readdir(d)) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        if (read_text(dir + "/" + e->d_name).find("prog_id:") != std::string::npos) {
            found = true;
            break;
        }
    }
    closedir(d);
    return found;
}

// ---- oracles ---------------------------------------------------------------------------
static uint16_t port_of(const std::string& addr) {
    auto p = addr.rfind(':');
    return p == std::string::npos ? 0 : static_cast<uint16_t>(std::atoi(addr.c_str() + p + 1));
}

namespace {
// The test binary whose spawn() started `pid` (or its parent: children inherit the output
// files), by the PID the files' names carry; 0 when it holds none.
int spawning_binary(int pid) {
    static const std::regex output(R"(^/tmp/qs-(?:out|err)-(\d+)-)");
    std::error_code ec;
    for (const auto& fd : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
        const std::string target = std::filesystem::read_symlink(fd.path(), ec).string();
        std::smatch m;
        if (std::regex_search(target, m, output)) return std::stoi(m[1]);
    }
    return 0;
}
// Stops what test binaries killed mid-test (a ctest timeout, a crash) left running: their
// servers hold ports, and their load generators would load the next test's servers.
void stop_orphans_of_killed_runs() {
    for (const qscope::ProcEntry& p : qscope::read_proc_table()) {
        if (p.kernel_thread) continue;
        const int binary = spawning_binary(p.pid);
        if (binary == 0) continue;
        // Gone, or a zombie its parent has not reaped yet.
        const auto b = qscope::read_proc_entry(binary);
        if (b && b->state != 'Z') continue;
        std::printf("harness: stopping %s (pid %d), left by a killed test run\n", p.cmdline.c_str(), p.pid);
        ::kill(p.pid, SIGKILL);
    }
}
}  // namespace

void require_free_port(uint16_t port) {
    stop_orphans_of_killed_runs();
    const std::string filter = "sport = :" + std::to_string(port);
    for (int i = 0; i < 20 && !ss(filter, true).empty(); ++i) sleep_s(0.05);  // the killed let go
    if (!ss(filter, true).empty()) FAIL("port " << port << " is already in use: " << sh("ss -Hltnp '" + filter + "'"));
}

std::vector<SsSocket> ss(const std::string& filter, bool listening) {
    std::string cmd = std::string("ss -Hn -p ") + (listening ? "-lt" : "-ta") + " " + filter + " 2>/dev/null";
    std::istringstream in(sh(cmd));
    std::vector<SsSocket> out;
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream ls(line);
        SsSocket s;
        if (!listening) {
            ls >> s.state >> s.recvq >> s.sendq >> s.local >> s.peer;
        } else {
            s.state = "LISTEN";
            std::string st;
            ls >> st >> s.recvq >> s.sendq >> s.local >> s.peer;
        }
        s.local_port = port_of(s.local);
        s.peer_port = port_of(s.peer);
        for (size_t p = line.find("pid="); p != std::string::npos; p = line.find("pid=", p + 4))
            s.pids.push_back(std::atoi(line.c_str() + p + 4));
        out.push_back(s);
    }
    return out;
}

int64_t ss_listen_recvq(uint16_t port) {
    for (const auto& s : ss("sport = :" + std::to_string(port), true))
        if (s.local_port == port) return static_cast<int64_t>(s.recvq);
    return -1;
}

uint64_t netstat_counter(const std::string& name) {
    std::ifstream f("/proc/net/netstat");
    std::string header, values;
    while (std::getline(f, header) && std::getline(f, values)) {
        if (header.rfind("TcpExt:", 0) != 0) continue;
        std::istringstream hs(header), vs(values);
        std::string h, v;
        while (hs >> h && vs >> v)
            if (h == name) return std::stoull(v);
    }
    return 0;
}

std::vector<TaskState> proc_tasks(pid_t pid) {
    std::vector<TaskState> out;
    const std::string dir = "/proc/" + std::to_string(pid) + "/task/";
    std::istringstream ls(sh("ls " + dir + " 2>/dev/null"));
    std::string tid;
    while (ls >> tid) {
        TaskState t;
        t.tid = std::atoi(tid.c_str());
        const std::string stat = read_text(dir + tid + "/stat");
        auto o = stat.find('('), c = stat.rfind(')');
        if (o == std::string::npos || c == std::string::npos) continue;
        t.comm = stat.substr(o + 1, c - o - 1);
        t.state = c + 2 < stat.size() ? stat[c + 2] : '?';
        const std::string sc = read_text(dir + tid + "/syscall");
        if (sc.rfind("running", 0) == 0)
            t.syscall = -1;
        else if (!sc.empty())
            t.syscall = std::atol(sc.c_str());
        out.push_back(t);
    }
    return out;
}

std::pair<double, double> thread_schedstat(pid_t pid, pid_t tid) {
    std::istringstream in(
        read_text("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/schedstat"));
    double run = 0, wait = 0;
    if (!(in >> run >> wait)) return {-1, -1};
    return {run / 1e9, wait / 1e9};
}

uint64_t proc_rss_kib(pid_t pid) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(f, line))
        if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6));
    return 0;
}

nlohmann::json read_counters(const std::string& path) {
    const std::string text = read_text(path);
    if (text.empty()) return nullptr;
    try {
        return nlohmann::json::parse(text);
    } catch (...) {
        return nullptr;
    }
}

nlohmann::json wait_for_pool_gate(const std::string& counters_path, double timeout_seconds) {
    const double end = now_s() + timeout_seconds;
    nlohmann::json c;
    while (now_s() < end) {
        c = read_counters(counters_path);
        if (!c.is_null() && c.value("completed", 0) > 20 && c.value("pool_waiters_max", 0) >= 1) break;
        sleep_s(0.1);
    }
    return c;
}

std::string http_get(const std::string& host, uint16_t port, const std::string& path, double timeout) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    timeval tv{static_cast<time_t>(timeout), static_cast<suseconds_t>((timeout - static_cast<int>(timeout)) * 1e6)};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    inet_pton(AF_INET, host.c_str(), &a.sin_addr);
    std::string resp;
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
        const std::string req = "GET " + path + " HTTP/1.0\r\nHost: " + host + "\r\n\r\n";
        if (write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
            char buf[4096];
            ssize_t n;
            while ((n = read(fd, buf, sizeof buf)) > 0) resp.append(buf, static_cast<size_t>(n));
        }
    }
    close(fd);
    auto p = resp.find("\r\n\r\n");
    return p == std::string::npos ? "" : resp.substr(p + 4);
}

std::set<int> children(pid_t pid) {
    std::set<int> out;
    const std::string s = sh("cat /proc/" + std::to_string(pid) + "/task/*/children 2>/dev/null");
    std::istringstream in(s);
    int c;
    while (in >> c) out.insert(c);
    return out;
}

std::string find_nginx() {
    for (const char* p : {"/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"})
        if (access(p, X_OK) == 0) return p;
    return "";
}

std::string write_nginx_conf(const std::string& prefix, int workers, const std::string& http) {
    for (const char* d : {"/logs", "/tmp"}) ::mkdir((prefix + d).c_str(), 0755);
    const std::string path = prefix + "/nginx.conf";
    std::ofstream conf(path);
    conf << "user root;\n"
            "worker_processes " << workers << ";\n"
            "daemon off;\n"
            "pid " << prefix << "/nginx.pid;\n"
            "error_log " << prefix << "/logs/error.log warn;\n"
            "events { worker_connections 1024; }\n"
            "http {\n"
            "  client_body_temp_path " << prefix << "/tmp/body;\n"
            "  proxy_temp_path " << prefix << "/tmp/proxy;\n"
            "  fastcgi_temp_path " << prefix << "/tmp/fastcgi;\n"
            "  uwsgi_temp_path " << prefix << "/tmp/uwsgi;\n"
            "  scgi_temp_path " << prefix << "/tmp/scgi;\n"
         << http << "}\n";
    return path;
}

PgCluster::PgCluster(uint16_t p) : port(p) {
    dir = temp_dir("qs-pg");
    ::chmod(dir.c_str(), 0755);
    int rc = 0;
    const std::string o =
        sh(source_dir() + "/tests/apps/pg.sh start " + dir + "/cluster " + std::to_string(port) + " 2>&1", &rc);
    ok = rc == 0;
    if (!ok) std::printf("pg.sh start failed: %s\n", o.c_str());
    std::ifstream pidf(dir + "/cluster/data/postmaster.pid");
    pidf >> postmaster;
}

PgCluster::~PgCluster() { sh(source_dir() + "/tests/apps/pg.sh stop " + dir + "/cluster >/dev/null 2>&1"); }

std::string PgCluster::psql(const std::string& sql) const {
    return sh("psql " + conn() + " -d postgres -Atqc \"" + sql + "\" 2>&1");
}

int PgCluster::count(const std::string& where) const {
    return std::atoi(psql("select count(*) from pg_stat_activity where backend_type = 'client backend' and "
                          "pid <> pg_backend_pid() and " + where).c_str());
}

std::map<std::string, double> parse_metrics(const std::string& text) {
    std::map<std::string, double> out;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty() || line[0] == '#') continue;
        const auto sp = line.rfind(' ');
        if (sp == std::string::npos) continue;
        out[line.substr(0, sp)] = std::strtod(line.c_str() + sp + 1, nullptr);
    }
    check_scope(out);
    return out;
}

static void collect_exprs(const nlohmann::json& j, std::vector<std::string>& out) {
    if (j.is_object()) {
        for (auto it = j.begin(); it != j.end(); ++it) {
            if (it.key() == "expr" && it.value().is_string())
                out.push_back(it.value().get<std::string>());
            else
                collect_exprs(it.value(), out);
        }
    } else if (j.is_array()) {
        for (const auto& e : j) collect_exprs(e, out);
    }
}

std::vector<std::string> dashboard_exprs() {
    std::vector<std::string> out;
    std::ifstream f(source_dir() + "/dashboards/qscope.json");
    collect_exprs(nlohmann::json::parse(f), out);
    return out;
}

bool have_prometheus() {
    int rc = 0;
    sh("command -v prometheus >/dev/null", &rc);
    return rc == 0;
}

Prometheus::Prometheus(uint16_t port, const std::vector<std::string>& targets, const std::vector<std::string>& rule_files)
    : dir_(temp_dir("qs-prometheus")), port_(port) {
    {
        std::ofstream cfg(dir_ + "/prometheus.yml");
        cfg << "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n  evaluation_interval: 1s\n";
        if (!rule_files.empty()) {
            cfg << "rule_files: [";
            for (size_t i = 0; i < rule_files.size(); ++i) cfg << (i ? ", '" : "'") << rule_files[i] << "'";
            cfg << "]\n";
        }
        cfg << "scrape_configs:\n  - job_name: qscope\n    static_configs:\n      - targets: [";
        for (size_t i = 0; i < targets.size(); ++i) cfg << (i ? ", '" : "'") << targets[i] << "'";
        cfg << "]\n";
    }
    proc_ = spawn({"prometheus", "--config.file=" + dir_ + "/prometheus.yml", "--storage.tsdb.path=" + dir_ + "/data",
                   "--web.listen-address=127.0.0.1:" + std::to_string(port), "--log.level=warn"});
}

Prometheus::~Prometheus() {
    proc_.kill_and_wait();
    sh("rm -rf " + dir_);
}

nlohmann::json Prometheus::get(const std::string& path, const std::map<std::string, std::string>& params) {
    httplib::Client cli("127.0.0.1", port_);
    cli.set_connection_timeout(2, 0);
    cli.set_read_timeout(10, 0);
    httplib::Params p(params.begin(), params.end());
    auto res = cli.Get(("/api/v1/" + path).c_str(), p, httplib::Headers{});
    if (!res || res->status != 200) return nullptr;
    try {
        return nlohmann::json::parse(res->body);
    } catch (...) {
        return nullptr;
    }
}

nlohmann::json Prometheus::query(const std::string& expr) {
    const auto j = get("query", {{"query", expr}});
    if (j.is_null() || !j.contains("data")) return nlohmann::json::array();
    return j["data"]["result"];
}

pid_t nginx_worker(pid_t master, double timeout) {
    const double end = now_s() + timeout;
    while (now_s() < end) {
        std::ifstream f("/proc/" + std::to_string(master) + "/task/" + std::to_string(master) + "/children");
        pid_t child = 0;
        if (f >> child && child > 0) return child;
        sleep_s(0.05);
    }
    return 0;
}

StubStatus stub_status(uint16_t port, const std::string& path) {
    StubStatus st;
    const std::string body = http_get("127.0.0.1", port, path, 5);
    std::smatch m;
    static const std::regex counts(R"(\n\s*(\d+)\s+(\d+)\s+(\d+)\s*\n)");
    static const std::regex writing("Writing: (\\d+)");
    if (std::regex_search(body, m, counts)) st.requests = std::stol(m[3]);
    if (std::regex_search(body, m, writing)) st.writing = std::stol(m[1]);
    return st;
}

}  // namespace qs_test
