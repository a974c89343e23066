// qs_churn: a process whose threads never stop coming and going — the lifecycle stress for
// qscope's per-thread state (thread pools that grow and shrink, fork/join frameworks).
//
//   qs_churn [--rate N=2000] [--duration S=30] [--spawners K=4] [--linger] [--comm NAME]
//            [--exec-when-file F -- PROGRAM ARGS...]
//
// K spawner threads ("churn-spawner") each create and join short-lived threads ("job-<seq>",
// which sleep 100 µs — an off-CPU wait — and exit) at N/K per second for S seconds.
// Prints "READY port=0" at start and "DONE created=<n> seconds=<t>" when the churn ends;
// then exits, or with --linger idles until SIGTERM. --exec-when-file: as soon as F exists,
// a spawner thread (not the leader: the kernel then moves the leader's PID onto it) execs
// PROGRAM — the same PID becomes another program mid-observation. --comm NAME names the
// leader and the spawners NAME (raw bytes, truncated to 15): a target-chosen name is
// hostile input for qscope (invalid UTF-8, quotes, newlines).
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

double g_rate = 2000;
double g_duration = 30;
int g_spawners = 4;
bool g_linger = false;
std::string g_exec_file;
std::string g_comm;
std::vector<std::string> g_exec_argv;

std::atomic<long> g_created{0};
std::atomic<long> g_seq{0};
std::atomic<bool> g_stop{false};

[[noreturn]] void usage(const std::string& why) {
    std::fprintf(stderr,
                 "qs_churn: %s\nusage: qs_churn [--rate N] [--duration S] [--spawners K] [--linger] [--comm NAME]\n"
                 "                [--exec-when-file F -- PROGRAM ARGS...]\n",
                 why.c_str());
    std::exit(2);
}

double num(const std::string& flag, const char* v, double lo, double hi) {
    char* end = nullptr;
    errno = 0;
    double d = std::strtod(v, &end);
    if (!*v || *end || errno || !(d >= lo && d <= hi)) usage("bad value '" + std::string(v) + "' for " + flag);
    return d;
}

double now_s() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

void sleep_s(double s) {
    if (s <= 0) return;
    timespec ts{static_cast<time_t>(s), static_cast<long>((s - static_cast<double>(static_cast<time_t>(s))) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

void* job_main(void*) {
    char name[16];
    std::snprintf(name, sizeof name, "job-%ld", g_seq.fetch_add(1) % 100000);
    pthread_setname_np(pthread_self(), name);
    timespec ts{0, 100 * 1000};
    nanosleep(&ts, nullptr);
    return nullptr;
}

void maybe_exec() {
    if (g_exec_file.empty()) return;
    struct stat st;
    if (::stat(g_exec_file.c_str(), &st) != 0) return;
    std::vector<char*> argv;
    for (auto& a : g_exec_argv) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::fflush(stdout);
    // The exec'd program inherits this thread's mask: give it default signal handling.
    sigset_t none;
    sigemptyset(&none);
    pthread_sigmask(SIG_SETMASK, &none, nullptr);
    execvp(argv[0], argv.data());
    std::fprintf(stderr, "qs_churn: exec %s: %s\n", argv[0], std::strerror(errno));
    _exit(127);
}

void* spawner_main(void*) {
    pthread_setname_np(pthread_self(), g_comm.empty() ? "churn-spawner" : g_comm.c_str());
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    const double per_spawner = g_rate / g_spawners;
    const double start = now_s();
    const double end = start + g_duration;
    long mine = 0;
    while (!g_stop) {
        maybe_exec();
        const double t = now_s();
        if (t >= end) break;
        // Paced against the schedule, not per-thread sleeps: a stall is caught up, never lost.
        const long due = static_cast<long>((t - start) * per_spawner);
        if (mine >= due) {
            sleep_s(std::min(0.01, (static_cast<double>(mine + 1) / per_spawner) - (t - start)));
            continue;
        }
        pthread_t th;
        if (pthread_create(&th, &attr, job_main, nullptr) == 0) {
            pthread_join(th, nullptr);
            g_created.fetch_add(1);
        }
        ++mine;
    }
    // Keep honouring the exec trigger after the churn (a lingering process can still exec).
    while (!g_stop && !g_exec_file.empty()) {
        maybe_exec();
        sleep_s(0.01);
    }
    pthread_attr_destroy(&attr);
    return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto next = [&]() -> const char* {
            if (i + 1 >= argc) usage("missing value for " + a);
            return argv[++i];
        };
        if (a == "--rate") g_rate = num(a, next(), 0, 1e6);
        else if (a == "--duration") g_duration = num(a, next(), 0, 86400 * 7);
        else if (a == "--spawners") g_spawners = static_cast<int>(num(a, next(), 1, 256));
        else if (a == "--linger") g_linger = true;
        else if (a == "--exec-when-file") g_exec_file = next();
        else if (a == "--comm") g_comm = std::string(next()).substr(0, 15);
        else if (a == "--") {
            for (++i; i < argc; ++i) g_exec_argv.push_back(argv[i]);
        } else usage("unknown flag " + a);
    }
    if (!g_exec_file.empty() && g_exec_argv.empty()) usage("--exec-when-file needs -- PROGRAM ARGS...");
    if (g_rate <= 0 && g_exec_file.empty()) g_duration = 0;

    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    // Only the leader takes stop signals (sigtimedwait); every thread inherits the mask.
    pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

    if (!g_comm.empty()) pthread_setname_np(pthread_self(), g_comm.c_str());
    std::printf("READY port=0\n");
    std::fflush(stdout);
    const double start = now_s();
    std::vector<pthread_t> sp(static_cast<size_t>(g_spawners));
    for (auto& t : sp) {
        pthread_create(&t, nullptr, spawner_main, nullptr);
    }
    // Wait for the churn to end or a stop signal.
    timespec tick{0, 50 * 1000000L};
    bool stopped = false;
    while (now_s() - start < g_duration) {
        int sig = sigtimedwait(&sigs, nullptr, &tick);
        if (sig == SIGTERM || sig == SIGINT) {
            stopped = true;
            break;
        }
    }
    if (g_exec_file.empty()) {
        g_stop = true;
        for (auto& t : sp) pthread_join(t, nullptr);
    }
    std::printf("DONE created=%ld seconds=%.3f\n", g_created.load(), now_s() - start);
    std::fflush(stdout);
    if (stopped || (!g_linger && g_exec_file.empty())) return 0;
    for (;;) {
        int sig = sigwaitinfo(&sigs, nullptr);
        if (sig == SIGTERM || sig == SIGINT) return 0;
    }
}
