#include "engine/bpf_util.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <string_view>
#include <thread>

#include "sys/proc_stat.h"

namespace qscope {

static int g_verbose = 0;

static int libbpf_print(enum libbpf_print_level level, const char* fmt, va_list args) {
    if (level == LIBBPF_DEBUG && g_verbose < 2) return 0;
    if (level == LIBBPF_INFO && g_verbose < 2) return 0;
    if (level == LIBBPF_WARN && g_verbose < 1) return 0;
    // libbpf's own messages already start "libbpf: ".
    std::fputs(std::strncmp(fmt, "libbpf: ", 8) == 0 ? "qscope: " : "qscope: libbpf: ", stderr);
    return std::vfprintf(stderr, fmt, args);
}

void init_libbpf_logging(int verbose) {
    g_verbose = verbose;
    libbpf_set_print(libbpf_print);
}

// Effective capability check without libcap: /proc/self/status CapEff.
static bool has_cap(int cap) {
    std::ifstream f("/proc/self/status");
    std::string line;
    while (std::getline(f, line)) {
        if (line.rfind("CapEff:", 0) == 0) {
            unsigned long long v = std::stoull(line.substr(7), nullptr, 16);
            return (v >> cap) & 1ULL;
        }
    }
    return false;
}

void check_bpf_privileges() {
    constexpr int CAP_SYS_ADMIN_ = 21, CAP_PERFMON_ = 38, CAP_BPF_ = 39, CAP_SYS_PTRACE_ = 19;
    const bool admin = has_cap(CAP_SYS_ADMIN_);
    const bool bpf = admin || (has_cap(CAP_BPF_) && has_cap(CAP_PERFMON_));
    if (!bpf)
        throw Error(Exit::permission,
                    "not permitted to load BPF tracing programs: run as root, or grant "
                    "CAP_BPF,CAP_PERFMON,CAP_DAC_READ_SEARCH,CAP_SYS_PTRACE (docs/security.md)");
    (void)CAP_SYS_PTRACE_;
}

void check_btf() {
    struct stat st;
    if (stat("/sys/kernel/btf/vmlinux", &st) != 0)
        throw Error(Exit::kernel,
                    "kernel has no BTF (/sys/kernel/btf/vmlinux missing): qscope needs a kernel "
                    "built with CONFIG_DEBUG_INFO_BTF=y (5.8+)");
}

static bool ensure_tracefs(std::string& root) {
    struct stat st;
    if (stat("/sys/kernel/tracing/events", &st) == 0) {
        root = "/sys/kernel/tracing";
        return true;
    }
    if (stat("/sys/kernel/debug/tracing/events", &st) == 0) {
        root = "/sys/kernel/debug/tracing";
        return true;
    }
    if (mount("nodev", "/sys/kernel/tracing", "tracefs", 0, nullptr) == 0 &&
        stat("/sys/kernel/tracing/events", &st) == 0) {
        root = "/sys/kernel/tracing";
        return true;
    }
    return false;
}

bool KernelTracepoints::has_tracefs(const std::string& category, const std::string& name) {
    std::string root;
    if (!ensure_tracefs(root)) return false;
    struct stat st;
    return stat((root + "/events/" + category + "/" + name + "/id").c_str(), &st) == 0;
}

std::shared_ptr<btf> shared_vmlinux_btf() {
    static std::mutex mu;
    static std::weak_ptr<btf> held;
    // Under the lock through the parse: a second asker waits for this parse, not its own.
    std::lock_guard<std::mutex> g(mu);
    if (auto b = held.lock()) return b;
    std::shared_ptr<btf> b(btf__load_vmlinux_btf(), btf__free);
    held = b;
    return b;
}

namespace {
// The parse this thread's loan offers libbpf, null outside one.
thread_local const std::shared_ptr<btf>* t_offer = nullptr;

// Every lend libbpf has not freed yet, each holding the parse alive: libbpf 1.1 frees what it
// got before its load returns, but a libbpf that kept it to the object's close, on another
// thread, must still find it alive and have its free spared.
std::mutex g_lent_mu;
std::vector<std::shared_ptr<btf>> g_lent;

btf* lend(const std::shared_ptr<btf>& parse) {
    std::lock_guard<std::mutex> g(g_lent_mu);
    g_lent.push_back(parse);
    return parse.get();
}

// The lend of b, taken out of the list (empty when b was not lent). Released by the caller
// outside the lock: the last holder's release frees the parse, through btf__free again.
std::shared_ptr<btf> take_back(const btf* b) {
    std::lock_guard<std::mutex> g(g_lent_mu);
    auto it = std::find_if(g_lent.begin(), g_lent.end(), [b](const auto& p) { return p.get() == b; });
    if (it == g_lent.end()) return nullptr;
    std::shared_ptr<btf> p = std::move(*it);
    g_lent.erase(it);
    return p;
}

// libbpf's own definition of a function this file interposes.
template <class Fn>
Fn libbpf_definition(const char* name) {
    return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}
}  // namespace

KernelBtfLoan::KernelBtfLoan() : held_(shared_vmlinux_btf()), outer_(t_offer) {
    if (held_) t_offer = &held_;
}

KernelBtfLoan::~KernelBtfLoan() { t_offer = outer_; }

}  // namespace qscope

// libbpf calls these two through its PLT, so these definitions, exported from the executable
// (collector/CMakeLists.txt), are the ones it reaches; every call outside a loan, and every free
// of what was not lent, goes on to libbpf's.
extern "C" {
btf* btf__load_vmlinux_btf(void) {
    if (qscope::t_offer) return qscope::lend(*qscope::t_offer);
    static const auto parse = qscope::libbpf_definition<btf* (*)()>("btf__load_vmlinux_btf");
    if (!parse) {
        errno = ENOSYS;
        return nullptr;
    }
    return parse();
}

void btf__free(btf* b) {
    if (b && qscope::take_back(b)) return;
    static const auto free_btf = qscope::libbpf_definition<void (*)(btf*)>("btf__free");
    if (free_btf) free_btf(b);
}
}

namespace qscope {

btf* KernelTracepoints::vmlinux() {
    if (!loaded_) {
        vmlinux_ = shared_vmlinux_btf();
        loaded_ = true;
    }
    return vmlinux_.get();
}

int KernelTracepoints::function_args(const std::string& name) {
    btf* b = vmlinux();
    const int id = b ? btf__find_by_name_kind(b, name.c_str(), BTF_KIND_FUNC) : -1;
    if (id <= 0) return -1;
    const btf_type* t = btf__type_by_id(b, btf__type_by_id(b, id)->type);  // func proto
    return t && btf_is_func_proto(t) ? btf_vlen(t) : -1;
}

bool KernelTracepoints::has_enum_value(const std::string& type, const std::string& value) {
    btf* b = vmlinux();
    const int id = b ? btf__find_by_name_kind(b, type.c_str(), BTF_KIND_ENUM) : -1;
    if (id <= 0) return false;
    const btf_type* t = btf__type_by_id(b, id);
    const struct btf_enum* e = btf_enum(t);
    for (int i = 0; i < btf_vlen(t); i++)
        if (value == btf__name_by_offset(b, e[i].name_off)) return true;
    return false;
}

int KernelTracepoints::btf_args(const std::string& name) {
    btf* b = vmlinux();
    if (!b) return -1;
    const int id = btf__find_by_name_kind(b, ("btf_trace_" + name).c_str(), BTF_KIND_TYPEDEF);
    if (id <= 0) return -1;
    const btf_type* t = btf__type_by_id(b, id);
    t = btf__type_by_id(b, t->type);                            // pointer
    if (t && btf_is_ptr(t)) t = btf__type_by_id(b, t->type);    // func proto
    return t && btf_is_func_proto(t) ? btf_vlen(t) - 1 : -1;
}

namespace {

// This process's kretprobe events, by function: made once, shared by every program on the
// function (a tracefs event runs each program attached to it), removed at exit.
struct RetprobeEvents {
    std::mutex mu;
    std::string root;                        // tracefs
    std::map<std::string, int> ids;          // function -> event id
    std::map<std::string, std::string> refused;  // function -> why tracefs made it no event
    ~RetprobeEvents() {
        for (const auto& [function, id] : ids) write_kprobe_events("-:qscope/" + name(function, getpid()));
    }
    static std::string name(const std::string& function, int pid) { return function + "_" + std::to_string(pid); }
    bool write_kprobe_events(const std::string& line) const {
        const int fd = open((root + "/kprobe_events").c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
        if (fd < 0) return false;
        const bool ok = write(fd, line.c_str(), line.size()) == static_cast<ssize_t>(line.size());
        close(fd);
        return ok;
    }
    // The events of qscope processes that are gone (killed before their exit removed them),
    // and any under this process's PID before it made one (a killed qscope's, the PID reused).
    void remove_stale() const {
        std::ifstream in(root + "/kprobe_events");
        for (std::string l; std::getline(in, l);) {
            const auto g = l.find(":qscope/"), sp = l.find(' ');
            if (g == std::string::npos || sp == std::string::npos || sp < g) continue;
            const std::string ev = l.substr(g + 8, sp - g - 8);
            const auto us = ev.rfind('_');
            if (us == std::string::npos) continue;
            const int pid = std::atoi(ev.c_str() + us + 1);
            if (pid > 0 && (pid == getpid() || (kill(pid, 0) != 0 && errno == ESRCH)))
                write_kprobe_events("-:qscope/" + ev);
        }
    }
    // The event id, made on first use; -1 with errno (and `refused` said) when tracefs refuses.
    int id(const std::string& function) {
        std::lock_guard<std::mutex> g(mu);
        if (auto it = ids.find(function); it != ids.end()) return it->second;
        const auto refuse = [&](const std::string& what) {
            const int err = errno;
            refused[function] = what + ": " + std::strerror(err);
            errno = err;
            return -1;
        };
        if (root.empty()) {
            if (!ensure_tracefs(root)) return refuse("no tracefs");
            remove_stale();
        }
        const std::string ev = name(function, getpid());
        if (!write_kprobe_events("r" + std::to_string(kRetprobeSlots) + ":qscope/" + ev + " " + function + "\n"))
            return refuse("writing " + root + "/kprobe_events");
        std::string text;
        if (!read_file(root + "/events/qscope/" + ev + "/id", text)) return refuse("reading the event's id");
        refused.erase(function);
        return ids[function] = std::atoi(text.c_str());
    }
    std::string slots_said() {
        std::lock_guard<std::mutex> g(mu);
        if (refused.empty()) return std::to_string(kRetprobeSlots) + " return slots";
        std::string why;
        for (const auto& [function, what] : refused) why += (why.empty() ? "" : "; ") + function + ": " + what;
        const std::string some = ids.empty() ? "" : " on " + std::to_string(refused.size()) + " of its functions";
        return "the kernel's default return slots" + some + ", max(10, 2 x CPUs) (" + why + ")";
    }
    static RetprobeEvents& of_process() {
        static RetprobeEvents events;
        return events;
    }
};

}  // namespace

bpf_link* attach_link(bpf_program* prog) {
    constexpr std::string_view kSection = "kretprobe/";
    const std::string sec = bpf_program__section_name(prog);
    if (sec.rfind(kSection, 0) != 0) return bpf_program__attach(prog);
    const int id = RetprobeEvents::of_process().id(sec.substr(kSection.size()));
    if (id < 0) return bpf_program__attach(prog);  // no kprobe_events: the kernel's default slots
    perf_event_attr attr{};
    attr.size = sizeof(attr);
    attr.type = PERF_TYPE_TRACEPOINT;
    attr.config = static_cast<uint64_t>(id);
    // One event on one CPU: a tracefs event runs its programs on every CPU (libbpf's own
    // tracefs kprobes do the same).
    const int pfd = static_cast<int>(syscall(__NR_perf_event_open, &attr, -1, 0, -1, PERF_FLAG_FD_CLOEXEC));
    if (pfd < 0) return nullptr;
    bpf_link* l = bpf_program__attach_perf_event(prog, pfd);  // owns pfd from here
    if (!l) {
        const int err = errno;
        close(pfd);
        errno = err;
    }
    return l;
}

std::string kretprobe_slots_said() { return RetprobeEvents::of_process().slots_said(); }

Link attach_program(bpf_program* prog, const std::string& what) {
    Link l(attach_link(prog));
    if (!l) throw_bpf_error(what, errno);
    return l;
}

void detach_concurrently(std::vector<Link>& links) noexcept {
    // The kernel serializes most of the wait: a few closers overlap what it does not. A tree
    // of hundreds of processes under --tls holds two uprobe links each; not a thread per link.
    constexpr size_t kClosers = 16;
    const size_t n = std::min(kClosers, links.size());
    std::vector<std::thread> closers;
    try {
        closers.reserve(n);
        for (size_t i = 0; i < n; ++i)
            closers.emplace_back([&links, i, n] {
                for (size_t j = i; j < links.size(); j += n) links[j].reset();
            });
    } catch (...) {
        // Out of threads: the links left are detached below, one by one.
    }
    for (std::thread& t : closers) t.join();
    links.clear();
}

ProbeAttach program_attach(ProbeFamily family, const bpf_program* prog) {
    const std::string sec = bpf_program__section_name(prog);
    const auto slash = sec.find('/');
    const std::string kind = sec.substr(0, slash);
    const std::string rest = slash == std::string::npos ? "" : sec.substr(slash + 1);
    const std::string last = sec.substr(sec.rfind('/') + 1);
    if (kind == "tp_btf") return {family, rest, AttachType::tp_btf, rest};
    if (kind == "tracepoint") return {family, last, AttachType::tracepoint, rest};
    if (kind == "iter" || kind == "iter.s") return {family, rest, AttachType::iterator, sec};
    if (kind == "uprobe") return {family, bpf_program__name(prog), AttachType::uprobe, rest};
    if (kind == "perf_event") return {family, bpf_program__name(prog), AttachType::perf_event, "perf_event"};
    if (kind == "fentry") return {family, rest, AttachType::fentry, rest};
    if (kind == "fexit") return {family, rest, AttachType::fexit, rest};
    if (kind == "kprobe") return {family, rest, AttachType::kprobe, rest};
    if (kind == "kretprobe") return {family, rest, AttachType::kretprobe, rest};
    return {family, bpf_program__name(prog), AttachType::none, sec};
}

ProbeAttach hook_off(ProbeFamily family, std::string hook, std::string why) {
    return {family, std::move(hook), AttachType::none, "", std::move(why)};
}

MappedWords::MappedWords(bpf_map* map, uint32_t words, const std::string& what) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t bytes = (words * sizeof(uint64_t) + page - 1) / page * page;
    void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, bpf_map__fd(map), 0);
    if (m == MAP_FAILED) throw_bpf_error(what, errno);
    words_ = static_cast<uint64_t*>(m);
    size_ = words;
    bytes_ = bytes;
}

MappedWords::~MappedWords() {
    if (words_) munmap(words_, bytes_);
}

MappedWords::MappedWords(MappedWords&& o) noexcept : words_(o.words_), size_(o.size_), bytes_(o.bytes_) {
    o.words_ = nullptr;
}

MappedWords& MappedWords::operator=(MappedWords&& o) noexcept {
    if (this != &o) {
        if (words_) munmap(words_, bytes_);
        words_ = o.words_;
        size_ = o.size_;
        bytes_ = o.bytes_;
        o.words_ = nullptr;
    }
    return *this;
}

void make_empty_bss(bpf_map* bss, const std::string& what) {
    // A name the kernel would cut short would not find this map again: libbpf's copy, then.
    if (std::strlen(bpf_map__name(bss)) >= BPF_OBJ_NAME_LEN) return;
    // BPF_F_MMAPABLE, as libbpf's own: the skeleton maps it after the load. No BTF: its layout
    // is plain data (no lock, timer or kptr the kernel would need to know of).
    LIBBPF_OPTS(bpf_map_create_opts, opts, .map_flags = BPF_F_MMAPABLE);
    const int fd = bpf_map_create(BPF_MAP_TYPE_ARRAY, bpf_map__name(bss), sizeof(__u32), bpf_map__value_size(bss), 1,
                                  &opts);
    if (fd < 0) throw_bpf_error(what, errno);
    // libbpf populates only the maps it makes; the object's copies (load_side) find this one by
    // its name, which the kernel keeps as given.
    const int err = bpf_map__reuse_fd(bss, fd);
    close(fd);  // reuse_fd holds its own
    bpf_check(err, what);
}

RingBuffer open_ring_buffer(bpf_map* map, ring_buffer_sample_fn on_record, void* ctx, const std::string& what) {
    RingBuffer rb(ring_buffer__new(bpf_map__fd(map), on_record, ctx, nullptr));
    if (!rb) throw_bpf_error(what, errno);
    return rb;
}

std::vector<char> read_iter(bpf_link* link, const std::string& what) {
    const int fd = bpf_iter_create(bpf_link__fd(link));
    if (fd < 0) throw_bpf_error(what, errno);
    std::vector<char> out;
    char chunk[1 << 16];
    for (;;) {
        const ssize_t n = ::read(fd, chunk, sizeof(chunk));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            const int e = errno;
            ::close(fd);
            throw_bpf_error(what, e);
        }
        if (n == 0) break;
        out.insert(out.end(), chunk, chunk + n);
    }
    ::close(fd);
    return out;
}

void throw_bpf_error(const std::string& what, int err) {
    const int e = err < 0 ? -err : err;
    if (e == EPERM || e == EACCES)
        throw Error(Exit::permission, what + ": " + errno_text(e) +
                                          " (needs root or CAP_BPF+CAP_PERFMON; under a "
                                          "container also an unconfined seccomp profile)");
    throw Error(Exit::kernel, what + ": " + errno_text(e));
}

}  // namespace qscope
