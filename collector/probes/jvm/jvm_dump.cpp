#include "probes/jvm/jvm_dump.h"

#include <cstdlib>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <stdexcept>

#include "sys/proc_stat.h"

namespace qscope::jvm {

CommandResult run_command(const std::vector<std::string>& argv, double timeout_seconds) {
    CommandResult r;
    if (argv.empty()) {
        r.error = "empty command";
        return r;
    }
    int out_pipe[2], err_pipe[2];
    if (pipe2(out_pipe, O_CLOEXEC) != 0) {
        r.error = "pipe failed";
        return r;
    }
    if (pipe2(err_pipe, O_CLOEXEC) != 0) {
        close(out_pipe[0]);
        close(out_pipe[1]);
        r.error = "pipe failed";
        return r;
    }
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_t pid = fork();
    if (pid < 0) {
        r.error = "fork failed";
        for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) close(fd);
        return r;
    }
    if (pid == 0) {
        // Own process group so a timeout kill also takes the JVM jcmd starts.
        setpgid(0, 0);
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0) dup2(devnull, 0);
        dup2(out_pipe[1], 1);
        dup2(err_pipe[1], 2);
        execv(args[0], args.data());
        _exit(127);
    }
    close(out_pipe[1]);
    close(err_pipe[1]);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
    pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
    int open_fds = 2;
    char buf[65536];
    while (open_fds > 0) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) {
            r.timed_out = true;
            break;
        }
        int n = poll(fds, 2, static_cast<int>(left.count()));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) continue;
        for (int i = 0; i < 2; i++) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            ssize_t k = read(fds[i].fd, buf, sizeof buf);
            if (k > 0) {
                (i == 0 ? r.out : r.err).append(buf, static_cast<size_t>(k));
            } else if (k == 0 || errno != EINTR) {
                close(fds[i].fd);
                fds[i].fd = -1;
                open_fds--;
            }
        }
    }
    for (auto& f : fds)
        if (f.fd >= 0) close(f.fd);
    if (r.timed_out) kill(-pid, SIGKILL), kill(pid, SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!r.timed_out && WIFEXITED(status)) r.exit_status = WEXITSTATUS(status);
    if (r.exit_status == 127) r.error = "cannot execute " + argv[0];
    return r;
}

ThreadDump thread_dump(const std::string& jcmd, int pid, double timeout_seconds) {
    ThreadDump d;
    const auto now = std::chrono::steady_clock::now().time_since_epoch();
    const std::string file = "/tmp/qscope-threads-" + std::to_string(getpid()) + "-" +
                             std::to_string(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count()) +
                             ".json";
    auto r = run_command({jcmd, std::to_string(pid), "Thread.dump_to_file", "-format=json", file}, timeout_seconds);
    // The JVM writes the file in its own mount namespace.
    const std::string host_file = "/proc/" + std::to_string(pid) + "/root" + file;
    std::string text;
    const bool got = read_file(host_file, text) || read_file(file, text);
    unlink(host_file.c_str());
    if (r.timed_out || r.exit_status != 0 || !got) {
        std::string why = r.timed_out ? "timed out" : !r.error.empty() ? r.error : r.err.empty() ? r.out : r.err;
        while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
        d.error = "jcmd Thread.dump_to_file failed: " + why;
        return d;
    }
    try {
        d.parked = aggregate_thread_dump(text);
    } catch (const std::exception& e) {
        d.error = e.what();
    }
    return d;
}

namespace {
// "java.base/..." or "java.base@25.0.3/..." : the JDK's own modules.
bool is_jdk_frame(const std::string& f) {
    auto slash = f.find('/');
    auto paren = f.find('(');
    if (slash == std::string::npos || (paren != std::string::npos && slash > paren)) return false;
    return f.rfind("java.", 0) == 0 || f.rfind("jdk.", 0) == 0;
}

bool is_plumbing(const std::string& m) {
    static const char* prefixes[] = {"java.lang.VirtualThread.", "java.lang.System$",
                                     "jdk.internal.misc.",       "java.util.concurrent.locks.LockSupport.",
                                     "java.lang.Thread.sleep",   "java.lang.Object.wait0"};
    for (const char* p : prefixes)
        if (m.rfind(p, 0) == 0) return true;
    return false;
}
}  // namespace

std::string frame_method(const std::string& frame) {
    std::string f = frame;
    auto paren = f.find('(');
    if (paren != std::string::npos) f.resize(paren);
    auto slash = f.find('/');
    if (slash != std::string::npos) f = f.substr(slash + 1);
    return f;
}

std::vector<ParkedFrames> aggregate_thread_dump(const std::string& json_text, size_t depth) {
    using nlohmann::json;
    json j = json::parse(json_text, nullptr, false);
    if (j.is_discarded() || !j.contains("threadDump") || !j["threadDump"].contains("threadContainers"))
        throw std::runtime_error("not a JSON thread dump (expected threadDump.threadContainers)");
    std::map<std::vector<std::string>, uint64_t> groups;
    for (const auto& c : j["threadDump"]["threadContainers"]) {
        if (!c.contains("threads") || !c["threads"].is_array()) continue;
        for (const auto& t : c["threads"]) {
            if (!t.value("virtual", false)) continue;
            if (t.value("state", std::string()) == "RUNNABLE") continue;
            std::vector<std::string> raw;
            if (t.contains("stack") && t["stack"].is_array())
                for (const auto& f : t["stack"])
                    if (f.is_string()) raw.push_back(f.get<std::string>());
            size_t start = raw.size();
            for (size_t i = 0; i < raw.size(); i++)
                if (!is_jdk_frame(raw[i])) {
                    start = i > 0 ? i - 1 : 0;
                    break;
                }
            if (start == raw.size()) {
                // Only JDK frames (an executor's idle virtual thread, say): skip the park
                // plumbing and show what remains.
                start = 0;
                while (start < raw.size() && is_plumbing(frame_method(raw[start]))) start++;
                if (start == raw.size()) start = 0;
            }
            std::vector<std::string> key;
            for (size_t i = start; i < raw.size() && key.size() < depth; i++) key.push_back(frame_method(raw[i]));
            groups[key]++;
        }
    }
    std::vector<ParkedFrames> out;
    for (auto& [frames, n] : groups) out.push_back({frames, n});
    std::stable_sort(out.begin(), out.end(), [](const ParkedFrames& a, const ParkedFrames& b) {
        return a.count > b.count;
    });
    return out;
}

std::vector<ThreadPrintEntry> parse_thread_print(const std::string& text) {
    // "ForkJoinPool-1-worker-1" #23 [9243] daemon prio=5 os_prio=0 cpu=.. elapsed=.. tid=0x00007f.. nid=9243 ...
    static const std::regex head(R"re(^"(.*)" #\d+ (?:\[(\d+)\] )?(daemon )?.*?tid=0x([0-9a-f]+) nid=(\d+))re");
    std::vector<ThreadPrintEntry> out;
    size_t pos = 0;
    while (pos < text.size()) {
        size_t nl = text.find('\n', pos);
        if (nl == std::string::npos) nl = text.size();
        if (text[pos] == '"') {
            std::string line = text.substr(pos, nl - pos);
            std::smatch m;
            if (std::regex_search(line, m, head)) {
                ThreadPrintEntry e;
                e.name = m[1];
                e.is_daemon = m[3].matched;
                // Foreign text: strtoull saturates where stoull would throw on 17+ digits.
                e.jt = std::strtoull(m[4].str().c_str(), nullptr, 16);
                const unsigned long long nid = std::strtoull(m[5].str().c_str(), nullptr, 10);
                e.nid = static_cast<int>(nid);
                if (nid > 0 && nid <= 0x3fffffff) out.push_back(e);  // else not a Linux tid
            }
        }
        pos = nl + 1;
    }
    return out;
}

bool is_carrier_name(const std::string& java_name) {
    static const std::regex re(R"(^ForkJoinPool-\d+-worker-\d+$)");
    return std::regex_match(java_name, re);
}

}  // namespace qscope::jvm
