#include "engine/process_tree.h"

#include <dirent.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "engine/bpf_util.h"
#include "engine/kernel_features.h"
#include "engine/shared_hooks.h"
#include "model/errors.h"
#include "sys/proc_stat.h"
#include "tree.h"
#include "tree.skel.h"

namespace qscope {

namespace {

std::string trim(std::string s) {
    while (!s.empty() && (s.back() == ' ' || s.back() == '\n')) s.pop_back();
    size_t i = 0;
    while (i < s.size() && s[i] == ' ') i++;
    return s.substr(i);
}

// cmdline with its NUL separators as spaces: the title a server set, or argv.
std::string read_cmdline(int pid) {
    std::string s;
    if (!read_file("/proc/" + std::to_string(pid) + "/cmdline", s)) return "";
    for (auto& c : s)
        if (c == '\0') c = ' ';
    return trim(s);
}

std::string read_comm(int pid) {
    std::string s;
    if (!read_file("/proc/" + std::to_string(pid) + "/comm", s)) return "";
    return trim(s);
}

bool read_stat(int pid, ProcStat& st) {
    std::string text;
    return read_file("/proc/" + std::to_string(pid) + "/stat", text) && parse_proc_stat(text, st);
}

int parent_of(int pid) {
    std::string text;
    if (!read_file("/proc/" + std::to_string(pid) + "/stat", text)) return 0;
    const auto close = text.rfind(')');
    if (close == std::string::npos) return 0;
    // ") S PPID ..."
    return std::atoi(text.c_str() + std::min(close + 4, text.size()));
}

// The numeric entries of a /proc directory: pids or tids.
std::vector<int> numeric_entries(const std::string& dir) {
    std::vector<int> out;
    if (DIR* d = opendir(dir.c_str())) {
        while (auto* e = readdir(d))
            if (e->d_name[0] >= '0' && e->d_name[0] <= '9') out.push_back(std::atoi(e->d_name));
        closedir(d);
    }
    return out;
}

// Children of `pid`: /proc/PID/task/TID/children lists those each thread forked, one file
// per thread; every process's stat names its parent, one file per process on the host. The
// shorter list is read: a server of 10,000 threads cost 10,000 reads (~0.3 s) before its
// first frame, where the host had a few hundred processes. Without CONFIG_PROC_CHILDREN, the
// scan of parents is the only way.
std::vector<int> children_of(int pid) {
    const std::string task_dir = "/proc/" + std::to_string(pid) + "/task";
    const std::vector<int> tids = numeric_entries(task_dir);
    // A process of a few threads reads their files without listing the host: a tree of 300
    // single-threaded workers would list /proc 300 times.
    constexpr size_t kFewThreads = 64;
    std::vector<int> procs;
    if (tids.size() > kFewThreads) procs = numeric_entries("/proc");
    std::vector<int> out;
    if (tids.size() <= kFewThreads || tids.size() <= procs.size()) {
        bool have_file = false;
        std::string text;
        for (int tid : tids) {
            if (!read_file(task_dir + "/" + std::to_string(tid) + "/children", text)) continue;
            have_file = true;
            std::istringstream in(text);
            for (int c; in >> c;) out.push_back(c);
        }
        if (have_file || tids.empty()) return out;
        if (procs.empty()) procs = numeric_entries("/proc");  // no CONFIG_PROC_CHILDREN
    }
    for (int p : procs)
        if (parent_of(p) == pid) out.push_back(p);
    return out;
}

// One process's records from a pid-filtered iterator of the tree's; nullopt where only /proc
// can answer. Before 6.1 the kernel has no pid filter (E2BIG: a link_info it does not know),
// and an unfiltered walk of every process per call is not the speed-up these are for: `off`
// is set then, and the callers read /proc from there on.
std::optional<std::vector<char>> read_pid_iter(bpf_program* prog, int pid, std::atomic<bool>& off, const char* what) {
    if (off) return std::nullopt;
    union bpf_iter_link_info linfo;
    std::memset(&linfo, 0, sizeof(linfo));
    linfo.task.pid = static_cast<__u32>(pid);
    DECLARE_LIBBPF_OPTS(bpf_iter_attach_opts, opts);
    opts.link_info = &linfo;
    opts.link_info_len = sizeof(linfo);
    Link link(bpf_program__attach_iter(prog, &opts));
    if (!link) {
        if (errno != ESRCH && errno != ENOENT) off = true;
        return std::nullopt;
    }
    try {
        return read_iter(link.get(), what);
    } catch (const Error&) {
        return std::nullopt;  // the process went away mid-walk, say: /proc answers for it
    }
}

}  // namespace

std::string process_role(const std::string& comm, const std::string& cmdline, bool is_root) {
    // A title is "name: what", the name being the comm or a stem of it (php-fpm8.2 titles
    // itself "php-fpm: pool www"); PostgreSQL with cluster_name puts "15/main: " in between.
    std::string title;
    const auto colon = cmdline.find(": ");
    if (colon != std::string::npos && colon > 0) {
        const std::string name = cmdline.substr(0, colon);
        const bool plain = name.find_first_of(" /") == std::string::npos;
        if (plain && !comm.empty() && (comm.rfind(name, 0) == 0 || name.rfind(comm, 0) == 0)) {
            title = trim(cmdline.substr(colon + 2));
            static const std::regex cluster(R"(^[^ :]+: )");
            title = std::regex_replace(title, cluster, "", std::regex_constants::format_first_only);
        }
    }
    if (title.empty()) return is_root ? "main" : "child";
    // PostgreSQL backends: "user database host(port) activity" or "... [local] activity".
    static const std::regex backend(R"(^\S+ \S+ (\S+\(\d+\)|\[local\])( |$))");
    if (std::regex_search(title, backend)) return "client backend";
    // "<what> process <program and its options>": nginx and php-fpm name the program after it.
    static const std::regex process(R"(^(.*? process)( |$))");
    if (std::smatch m; std::regex_search(title, m, process)) return m[1];
    // Paths, pool names in brackets and options are details, not the role:
    // "worker [app:app]", "pool www -x".
    for (const char* cut : {" /", " (", " [", " -"}) {
        const auto p = title.find(cut);
        if (p != std::string::npos) title.resize(p);
    }
    return trim(title);
}

struct ProcessTree::Bpf {
    Owned<tree_bpf, tree_bpf__destroy> skel;
    std::vector<Link> links;
    RingBuffer rb;
    MappedWords bits;  // the bitmap
    qs_tree_range* range = nullptr;  // the skeleton's mmapped .data.tree section
    // The fd-table iterator (qs_fd_sockets) was refused: callers read /proc from then on.
    mutable std::atomic<bool> fd_iter_off{false};
    // The same for the thread iterator (qs_thread_names).
    mutable std::atomic<bool> thread_iter_off{false};
};

ProcessTree::~ProcessTree() {
    // No fork marks a byte once the slot is 0; then every byte it marked goes.
    if (shared_.hooks && bpf_ && bpf_->skel) {
        __atomic_store_n(&bpf_->skel->bss->owner_slot, 0, __ATOMIC_SEQ_CST);
        shared_.hooks->release_all(static_cast<uint8_t>(shared_.slot + 1));
    }
}

std::unique_ptr<ProcessTree> ProcessTree::open(int root, bool children, SharedSlot shared) {
    std::unique_ptr<ProcessTree> t(new ProcessTree());
    t->root_ = root;
    t->children_ = children;
    t->bpf_ = std::make_unique<Bpf>();
    auto& b = *t->bpf_;
    // One bit per possible tgid. pid_max rarely changes after boot; a fork beyond the
    // bitmap is counted as lost (tree.bpf.c) and shows in lost_events.
    const uint32_t words = static_cast<uint32_t>(std::max<long>((pid_max() + 63) / 64, root / 64 + 1));
    const auto open_sized = [&] {
        b.skel.reset(tree_bpf::open());
        if (!b.skel) throw_bpf_error("tree: opening BPF object", errno ? errno : EINVAL);
        bpf_check(bpf_map__set_max_entries(b.skel->maps.qs_tree, words), "tree: sizing map qs_tree");
        if (shared.hooks) {
            bpf_check(bpf_map__set_max_entries(b.skel->maps.qs_owner, shared.hooks->owner_words()),
                      "tree: sizing map qs_owner");
            bpf_check(bpf_map__reuse_fd(b.skel->maps.qs_owner, shared.hooks->owner_map_fd()),
                      "tree: sharing map qs_owner");
        }
    };
    open_sized();
    const KernelBtfLoan loan;
    if (int err = tree_bpf::load(b.skel.get())) {
        // The iterators are a speed-up, never a reason not to run: a kernel or policy that
        // refuses them gets the object without them (and /proc walks).
        open_sized();
        bpf_program__set_autoload(b.skel->progs.qs_fd_sockets, false);
        bpf_program__set_autoload(b.skel->progs.qs_thread_names, false);
        b.fd_iter_off = true;
        b.thread_iter_off = true;
        if (tree_bpf::load(b.skel.get())) throw_load_error(ProbeFamily::tree, "tree: loading BPF programs (tree.bpf.c)", err);
    }
    b.bits = MappedWords(b.skel->maps.qs_tree, words, "tree: mmap of map qs_tree");
    if (!b.skel->data_tree) throw_bpf_error("tree: section .data.tree is not mmapped", EINVAL);
    b.range = &b.skel->data_tree->qs_tree_range;
    // Empty until the root is marked: min > max rejects everything.
    b.range->min = UINT64_MAX;
    b.range->max = 0;
    // The slot before the fork program attaches and the seeding marks: no member is missed.
    if (shared.hooks) {
        t->shared_ = std::move(shared);
        b.skel->bss->owner_slot = static_cast<__u32>(t->shared_.slot + 1);
    }
    if (children) {
        // Attach before seeding: a fork during the walk is then seen by one or the other.
        for (bpf_program* p : {b.skel->progs.qs_tree_fork, b.skel->progs.qs_tree_exit})
            b.links.push_back(attach_program(p, std::string("tree: attaching ") + bpf_program__name(p)));
        b.rb = open_ring_buffer(b.skel->maps.tree_events, &ProcessTree::on_event, t.get(), "tree: ring buffer tree_events");
    }
    t->add(root, 0);
    if (children) t->seed_descendants(root);
    if (t->owner_conflict_) {
        // Another target's process is in this tree (two selectors found one server): the
        // shared hooks hand a process to one owner only, so this tree gives its bytes back
        // and its families attach their own programs, as without an exporter.
        __atomic_store_n(&b.skel->bss->owner_slot, 0, __ATOMIC_SEQ_CST);
        t->shared_.hooks->release_all(static_cast<uint8_t>(t->shared_.slot + 1));
        t->shared_ = {};
    }
    return t;
}

std::vector<ProbeAttach> ProcessTree::attach() const {
    std::vector<ProbeAttach> out;
    for (const bpf_program* p : {bpf_->skel->progs.qs_tree_fork, bpf_->skel->progs.qs_tree_exit})
        out.push_back(children_ ? program_attach(ProbeFamily::tree, p)
                                : hook_off(ProbeFamily::tree, program_attach(ProbeFamily::tree, p).hook,
                                           "--no-children: only the PID given is observed"));
    // Refused on a kernel before 6.1 (no pid filter), or its program by the verifier.
    const ProbeAttach fds = program_attach(ProbeFamily::tree, bpf_->skel->progs.qs_fd_sockets);
    out.push_back(bpf_->fd_iter_off ? hook_off(ProbeFamily::tree, fds.hook,
                                               "no fd-table iterator with a pid filter (Linux 6.1+): a target's socket "
                                               "fds are read from /proc/PID/fd, a readlink each")
                                    : fds);
    const ProbeAttach names = program_attach(ProbeFamily::tree, bpf_->skel->progs.qs_thread_names);
    out.push_back(bpf_->thread_iter_off ? hook_off(ProbeFamily::tree, names.hook,
                                                   "no task iterator with a pid filter (Linux 6.1+): a target's thread "
                                                   "names are read from /proc/PID/task/TID/comm, a file each")
                                        : names);
    return out;
}

static_assert(sizeof(qs_fd_sock) == 56, "bpf/tree.h: struct qs_fd_sock");
static_assert(sizeof(qs_thread_name) == 24, "bpf/tree.h: struct qs_thread_name");

std::optional<std::vector<SocketFd>> ProcessTree::socket_fds(int pid) const {
    const auto buf = read_pid_iter(bpf_->skel->progs.qs_fd_sockets, pid, bpf_->fd_iter_off, "tree: fd-table iterator");
    if (!buf) return std::nullopt;
    std::vector<SocketFd> out;
    out.reserve(buf->size() / sizeof(qs_fd_sock));
    for (size_t at = 0; at + sizeof(qs_fd_sock) <= buf->size(); at += sizeof(qs_fd_sock)) {
        qs_fd_sock r;
        std::memcpy(&r, buf->data() + at, sizeof(r));
        if (r.tgid != static_cast<uint32_t>(pid)) continue;
        SocketFd s{static_cast<int>(r.fd), r.ino, std::nullopt};
        if (r.tcp) {
            TcpEnds& e = s.tcp.emplace();
            e.family = r.family;
            e.state = r.state;
            e.local_port = r.lport;
            e.remote_port = r.rport;
            std::memcpy(e.local.data(), r.laddr, e.local.size());
            std::memcpy(e.remote.data(), r.raddr, e.remote.size());
        }
        out.push_back(std::move(s));
    }
    return out;
}

std::optional<std::map<int, std::string>> ProcessTree::thread_names(int pid) const {
    const auto buf = read_pid_iter(bpf_->skel->progs.qs_thread_names, pid, bpf_->thread_iter_off, "tree: thread iterator");
    if (!buf) return std::nullopt;
    std::map<int, std::string> out;
    for (size_t at = 0; at + sizeof(qs_thread_name) <= buf->size(); at += sizeof(qs_thread_name)) {
        qs_thread_name r;
        std::memcpy(&r, buf->data() + at, sizeof(r));
        if (r.tgid != static_cast<uint32_t>(pid)) continue;
        out[static_cast<int>(r.tid)] = std::string(r.comm, strnlen(r.comm, sizeof(r.comm)));
    }
    return out;
}

int ProcessTree::map_fd() const { return bpf_map__fd(bpf_->skel->maps.qs_tree); }

int ProcessTree::range_map_fd() const { return bpf_map__fd(bpf_->skel->maps.data_tree); }

uint64_t ProcessTree::lost_events() const {
    return __atomic_load_n(&bpf_->skel->bss->lost_events, __ATOMIC_RELAXED);
}

// Atomic, like the kernel side: a fork into the same 64-PID word must not be lost.
void ProcessTree::mark(int pid, bool on) {
    const uint32_t w = static_cast<uint32_t>(pid) >> 6;
    if (w >= bpf_->bits.size()) return;  // beyond pid_max
    if (shared_.hooks) {
        const auto mine = static_cast<uint8_t>(shared_.slot + 1);
        if (on && !shared_.hooks->swap_owner(pid, 0, mine)) owner_conflict_ = true;
        if (!on) shared_.hooks->swap_owner(pid, mine, 0);
    }
    const uint64_t bit = 1ULL << (pid & 63);
    if (!on) {
        __atomic_fetch_and(&bpf_->bits.data()[w], ~bit, __ATOMIC_SEQ_CST);
        return;
    }
    __atomic_fetch_or(&bpf_->bits.data()[w], bit, __ATOMIC_SEQ_CST);
    // The bit first, then the range that lets readers reach it.
    const __u64 p = static_cast<__u64>(pid);
    __u64 cur = __atomic_load_n(&bpf_->range->max, __ATOMIC_SEQ_CST);
    while (p > cur && !__atomic_compare_exchange_n(&bpf_->range->max, &cur, p, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
    }
    cur = __atomic_load_n(&bpf_->range->min, __ATOMIC_SEQ_CST);
    while (p < cur && !__atomic_compare_exchange_n(&bpf_->range->min, &cur, p, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
    }
}

// Threads: in /proc/PID/status counts the zombie leader until the last thread is released.
bool process_exited(int pid, char leader_state) {
    if (leader_state == 'X') return true;
    if (leader_state != 'Z') return false;
    std::string status;
    if (!read_file("/proc/" + std::to_string(pid) + "/status", status)) return true;
    const auto p = status.find("\nThreads:");
    return p == std::string::npos || std::atoi(status.c_str() + p + 9) <= 1;
}

void ProcessTree::add(int pid, int ppid) {
    ProcStat st;
    if (!read_stat(pid, st) || process_exited(pid, st.state)) return;
    ProcessMember m;
    m.pid = pid;
    m.ppid = ppid;
    m.start_time_ticks = st.start_time;
    m.comm = read_comm(pid);
    m.role = process_role(m.comm, read_cmdline(pid), pid == root_);
    members_[pid] = m;
    unsettled_[pid] = kSettlingRefreshes;
    mark(pid, true);
}

// Breadth first, each parent marked before its children are read: a child forked after the
// read is caught by the fork program, one forked before is in the list.
void ProcessTree::seed_descendants(int pid) {
    std::vector<int> todo{pid};
    while (!todo.empty()) {
        const int p = todo.back();
        todo.pop_back();
        for (int c : children_of(p)) {
            if (members_.count(c)) continue;
            add(c, p);
            if (members_.count(c)) todo.push_back(c);
        }
    }
}

int ProcessTree::on_event(void* ctx, void* data, size_t size) {
    auto* self = static_cast<ProcessTree*>(ctx);
    if (size < sizeof(qs_tree_event)) return 0;
    const auto* e = static_cast<const qs_tree_event*>(data);
    const int pid = static_cast<int>(e->tgid);
    if (e->kind == QS_TREE_FORK) {
        self->add(pid, static_cast<int>(e->ptgid));
    } else if (e->kind == QS_TREE_EXIT) {
        self->members_.erase(pid);
    }
    return 0;
}

void ProcessTree::rescan() {
    for (auto it = members_.begin(); it != members_.end();) {
        ProcStat st;
        if (!read_stat(it->first, st) || st.start_time != it->second.start_time_ticks ||
            process_exited(it->first, st.state)) {
            // Gone, or its PID reused by a stranger: the bit goes too.
            if (it->first != root_) mark(it->first, false);
            it = members_.erase(it);
        } else {
            ++it;
        }
    }
    std::vector<int> pids;
    for (const auto& [pid, m] : members_) pids.push_back(pid);
    for (int pid : pids) seed_descendants(pid);
}

void ProcessTree::refresh() {
    if (bpf_->rb) {
        ring_buffer__consume(bpf_->rb.get());
        if (const uint64_t lost = lost_events(); lost != lost_seen_) {
            lost_seen_ = lost;
            rescan();
        }
    }
    // A forked child takes its title (and so its role) a moment after the fork, and until
    // then shows its parent's: re-read it for the first few refreshes only, so a settled
    // tree of 500 backends costs no reads per tick.
    for (auto it = unsettled_.begin(); it != unsettled_.end();) {
        auto m = members_.find(it->first);
        if (m == members_.end() || --it->second <= 0) {
            it = unsettled_.erase(it);
            continue;
        }
        if (std::string comm = read_comm(m->first); !comm.empty()) m->second.comm = comm;
        m->second.role = process_role(m->second.comm, read_cmdline(m->first), m->first == root_);
        ++it;
    }
}

std::vector<ProcessMember> ProcessTree::members() const {
    std::vector<ProcessMember> out;
    out.reserve(members_.size());
    if (auto it = members_.find(root_); it != members_.end()) out.push_back(it->second);
    for (const auto& [pid, m] : members_)
        if (pid != root_) out.push_back(m);
    return out;
}

}  // namespace qscope
