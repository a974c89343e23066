#include "output/diff.h"

#include <cstdio>
#include <ctime>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <vector>

namespace qscope {

namespace {

using json = nlohmann::ordered_json;
using Num = std::optional<double>;

// The number at `path`, or none when a side does not have it (an older qscope, a family off).
Num at(const json& j, const std::vector<const char*>& path) {
    const json* p = &j;
    for (const char* k : path) {
        if (!p->is_object() || !p->contains(k)) return std::nullopt;
        p = &(*p)[k];
    }
    if (p->is_number()) return p->get<double>();
    if (p->is_boolean()) return p->get<bool>() ? 1.0 : 0.0;
    return std::nullopt;
}

// The member `key` of j, by reference (json::value() copies: pointers into it would dangle),
// or an empty value of the kind asked for.
const json& member(const json& j, const char* key, bool array = false) {
    static const json empty_object = json::object(), empty_array = json::array();
    if (j.is_object())
        if (auto it = j.find(key); it != j.end()) return *it;
    return array ? empty_array : empty_object;
}

std::string text(const json& j, const char* key) {
    return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : "";
}

enum class Unit { count, seconds, rate, percent, flag };

std::string fmt(Num v, Unit u) {
    if (!v) return "—";
    char b[48];
    const double x = *v;
    switch (u) {
        case Unit::count: std::snprintf(b, sizeof b, "%.0f", x); break;
        case Unit::rate: std::snprintf(b, sizeof b, x >= 100 || x == 0 ? "%.0f/s" : x >= 1 ? "%.1f/s" : "%.2f/s", x); break;
        case Unit::flag: return x != 0 ? "yes" : "no";
        case Unit::percent: std::snprintf(b, sizeof b, "%.0f%%", x * 100); break;
        case Unit::seconds:
            if (x == 0)
                std::snprintf(b, sizeof b, "0");
            else if (x >= 1)
                std::snprintf(b, sizeof b, "%.2f s", x);
            else if (x >= 1e-3)
                std::snprintf(b, sizeof b, "%.1f ms", x * 1e3);
            else
                std::snprintf(b, sizeof b, "%.0f µs", x * 1e6);
            break;
    }
    return b;
}

// "a → b" where the two print differently, else the one value.
std::string change(Num a, Num b, Unit u) {
    const std::string x = fmt(a, u), y = fmt(b, u);
    return x == y ? x : x + " → " + y;
}

bool same(Num a, Num b, Unit u) { return fmt(a, u) == fmt(b, u); }

// A counter of the window, per second of it: windows of different lengths compare.
Num per_second(const json& s, Num v) {
    const Num w = at(s, {"window_seconds"});
    if (!v || !w || *w <= 0) return std::nullopt;
    return *v / *w;
}

// One compared quantity: its name, unit and where it is in an element (a listener, a peer...).
struct Field {
    const char* name;
    Unit unit;
    std::function<Num(const json& snap, const json& elem)> get;
};

Field plain(const char* name, Unit u, std::initializer_list<const char*> path) {
    return {name, u, [p = std::vector<const char*>(path)](const json&, const json& e) { return at(e, p); }};
}

Field rate(const char* name, std::initializer_list<const char*> path) {
    Field f = plain(name, Unit::rate, path);
    auto get = f.get;
    f.get = [get](const json& s, const json& e) { return per_second(s, get(s, e)); };
    return f;
}

// "name a → b, name c" for the fields of one element on each side (null: absent there).
// Sets `changed` when any field differs.
std::string row(const std::vector<Field>& fields, const json& sa, const json* a, const json& sb, const json* b,
                bool& changed) {
    std::string out;
    for (const Field& f : fields) {
        const Num x = a ? f.get(sa, *a) : Num(), y = b ? f.get(sb, *b) : Num();
        // Nothing on either side says nothing: zeros are left out.
        if (x.value_or(0) == 0 && y.value_or(0) == 0) continue;
        changed |= !same(x, y, f.unit);
        // An element on one side only shows that side's values.
        const std::string v = !a ? fmt(y, f.unit) : !b ? fmt(x, f.unit) : change(x, y, f.unit);
        out += (out.empty() ? "" : ", ") + std::string(f.name) + " " + v;
    }
    return out;
}

// The elements of a list on both sides, matched by `key`, in order of first appearance.
using Key = std::function<std::string(const json&)>;
std::vector<std::pair<std::string, std::pair<const json*, const json*>>> match(const json& la, const json& lb,
                                                                                const Key& key) {
    std::vector<std::pair<std::string, std::pair<const json*, const json*>>> out;
    std::map<std::string, size_t> index;
    auto add = [&](const json& list, bool second) {
        if (!list.is_array()) return;
        for (const auto& e : list) {
            const std::string k = key(e);
            auto [it, fresh] = index.emplace(k, out.size());
            if (fresh) out.push_back({k, {nullptr, nullptr}});
            auto& slot = out[it->second].second;
            (second ? slot.second : slot.first) = &e;
        }
    };
    add(la, false);
    add(lb, true);
    return out;
}

// Cells beyond the fields, of an element on each side (null: absent there); sets `changed`.
using Extra = std::function<std::string(const json* a, const json* b, bool& changed)>;

// A section of keyed rows; rows that did not change are counted, not printed.
void keyed_section(std::ostringstream& o, const char* title, const char* list, const DiffSide& a, const DiffSide& b,
                   const Key& key, const std::vector<Field>& fields, const Extra& extra = nullptr) {
    const auto rows = match(member(a.snap, list, true), member(b.snap, list, true), key);
    o << title << "\n";
    if (rows.empty()) {
        o << "  (none on either side)\n";
        return;
    }
    size_t unchanged = 0;
    for (const auto& [k, ab] : rows) {
        bool changed = !ab.first || !ab.second;
        std::string cells = row(fields, a.snap, ab.first, b.snap, ab.second, changed);
        if (extra)
            if (const std::string more = extra(ab.first, ab.second, changed); !more.empty())
                cells += (cells.empty() ? "" : ", ") + more;
        if (!changed) {
            ++unchanged;
            continue;
        }
        const char* only = !ab.first ? " (only in B)" : !ab.second ? " (only in A)" : "";
        o << "  " << k << only << "  " << cells << "\n";
    }
    if (unchanged == rows.size())
        o << "  unchanged (" << unchanged << ")\n";
    else if (unchanged)
        o << "  " << unchanged << " more unchanged\n";
}

std::string utc(Num unix_ms) {
    if (!unix_ms) return "?";
    const std::time_t t = static_cast<std::time_t>(*unix_ms / 1000);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char b[32];
    std::strftime(b, sizeof b, "%Y-%m-%d %H:%M:%S UTC", &tm);
    return b;
}

void header(std::ostringstream& o, const char* name, const DiffSide& s) {
    const json& t = member(s.snap, "target");
    char w[32];
    std::snprintf(w, sizeof w, "%.1f s", at(s.snap, {"window_seconds"}).value_or(0));
    o << "  " << name << "  " << s.label << ": PID " << fmt(at(t, {"pid"}), Unit::count) << " (" << text(t, "comm")
      << "), " << w << " ending " << utc(at(s.snap, {"taken_at_unix_ms"})) << "\n";
}

void verdict(std::ostringstream& o, const DiffSide& a, const DiffSide& b) {
    const json& va = member(a.snap, "verdict");
    const json& vb = member(b.snap, "verdict");
    auto line = [](const json& v) { return text(v, "severity") + ": " + text(v, "summary"); };
    o << "verdict\n";
    if (line(va) == line(vb)) {
        o << "  unchanged  " << line(va) << "\n";
        return;
    }
    o << "  A  " << line(va) << "\n  B  " << line(vb) << "\n";
    if (text(va, "stage") != text(vb, "stage"))
        o << "  the limit moved: " << text(va, "stage") << " → " << text(vb, "stage") << "\n";
}

void requests(std::ostringstream& o, const DiffSide& a, const DiffSide& b) {
    const std::vector<Field> fields = {
        plain("in flight", Unit::count, {"in_flight"}),
        plain("max", Unit::count, {"in_flight_max"}),
        plain("unread", Unit::count, {"waiting_unread"}),
        plain("unread max", Unit::count, {"waiting_unread_max"}),
        rate("completed", {"completed"}),
        plain("latency p50", Unit::seconds, {"latency_seconds", "p50"}),
        plain("p99", Unit::seconds, {"latency_seconds", "p99"}),
        rate("5xx", {"status", "5xx"}),
        rate("dropped", {"dropped"}),
        plain("oldest in flight", Unit::seconds, {"oldest_in_flight_seconds"}),
    };
    const json* ra = a.snap.contains("requests") ? &a.snap["requests"] : nullptr;
    const json* rb = b.snap.contains("requests") ? &b.snap["requests"] : nullptr;
    o << "requests\n";
    if (!ra && !rb) {
        o << "  (not observed on either side: --no-requests)\n";
        return;
    }
    bool changed = false;
    o << "  " << row(fields, a.snap, ra, b.snap, rb, changed) << "\n";
}

// Thread groups: what they are blocked by is a map of syscalls, compared syscall by syscall.
std::string blocked_by(const json* a, const json* b, bool& changed) {
    std::map<std::string, std::pair<double, double>> by;
    if (a)
        for (const auto& [sc, n] : member(*a, "blocked_by").items()) by[sc].first = n.get<double>();
    if (b)
        for (const auto& [sc, n] : member(*b, "blocked_by").items()) by[sc].second = n.get<double>();
    std::string out;
    for (const auto& [sc, n] : by) {
        if (n.first == 0 && n.second == 0) continue;
        changed |= !same(n.first, n.second, Unit::count);
        const std::string v = !a ? fmt(n.second, Unit::count) : !b ? fmt(n.first, Unit::count) : change(n.first, n.second, Unit::count);
        out += (out.empty() ? "blocked in " : ", ") + sc + " " + v;
    }
    return out;
}

void threads(std::ostringstream& o, const DiffSide& a, const DiffSide& b) {
    keyed_section(o, "threads", "thread_groups", a, b, [](const json& g) { return text(g, "name"); },
                  {plain("threads", Unit::count, {"threads"}), plain("running", Unit::count, {"running"}),
                   plain("runnable", Unit::count, {"runnable"}),
                   plain("runqueue wait p99", Unit::seconds, {"runqueue_wait", "p99"})},
                  blocked_by);
}

void carriers(std::ostringstream& o, const DiffSide& a, const DiffSide& b) {
    const json& ca = member(a.snap, "carriers");
    const json& cb = member(b.snap, "carriers");
    const bool da = ca.value("detected", false), db = cb.value("detected", false);
    o << "carriers\n";
    if (!da && !db) {
        o << "  none detected on either side\n";
        return;
    }
    const std::vector<Field> fields = {
        plain("threads", Unit::count, {"threads"}),
        plain("running", Unit::count, {"running"}),
        plain("runnable", Unit::count, {"runnable"}),
        plain("stalled", Unit::count, {"stalled"}),
        rate("stall events", {"stall_events"}),
        plain("busy", Unit::count, {"busy"}),
        plain("of procs", Unit::count, {"procs"}),
    };
    bool changed = false;
    o << "  " << (da ? text(ca, "runtime") : text(cb, "runtime")) << (da && db ? "" : da ? " (only in A)" : " (only in B)")
      << "  " << row(fields, a.snap, da ? &ca : nullptr, b.snap, db ? &cb : nullptr, changed) << "\n";
    const std::vector<Field> loop = {
        plain("utilization", Unit::percent, {"utilization"}),
        plain("longest turn", Unit::seconds, {"longest_turn_seconds"}),
        plain("p99 turn", Unit::seconds, {"p99_turn_seconds"}),
        rate("stalls", {"stalls"}),
        plain("unread", Unit::count, {"unread"}),
        plain("accept queue", Unit::count, {"accept_queue"}),
    };
    const auto rows = match(member(ca, "loops", true), member(cb, "loops", true), [](const json& l) {
        return "loop " + text(l, "name") + " (tid " + fmt(at(l, {"tid"}), Unit::count) + ")";
    });
    for (const auto& [k, ab] : rows) {
        bool c = false;
        const std::string cells = row(loop, a.snap, ab.first, b.snap, ab.second, c);
        const char* only = !ab.first ? " (only in B)" : !ab.second ? " (only in A)" : "";
        o << "  " << k << only << "  " << cells << "\n";
    }
}

}  // namespace

std::string render_diff(const DiffSide& a, const DiffSide& b) {
    std::ostringstream o;
    o << "qscope diff\n";
    header(o, "A", a);
    header(o, "B", b);
    verdict(o, a, b);
    keyed_section(o, "door", "listeners", a, b,
                  [](const json& l) {
                      const std::string path = text(l, "unix_path");
                      return path.empty() ? ":" + fmt(at(l, {"port"}), Unit::count) : "unix:" + path;
                  },
                  {plain("queue", Unit::count, {"accept_queue"}), plain("max", Unit::count, {"accept_queue_max"}),
                   plain("of backlog", Unit::count, {"backlog"}), rate("overflows", {"overflows"}),
                   rate("accepted", {"accepted"}), plain("accept wait p99", Unit::seconds, {"accept_wait_seconds", "p99"}),
                   plain("connections", Unit::count, {"connections"}),
                   plain("at a connection limit", Unit::flag, {"connection_limit"})});
    requests(o, a, b);
    keyed_section(o, "downstream", "downstream", a, b, [](const json& d) { return text(d, "peer"); },
                  {plain("busy", Unit::count, {"busy"}), plain("max", Unit::count, {"busy_max"}),
                   plain("of connections", Unit::count, {"connections"}), rate("calls", {"calls"}),
                   plain("call p99", Unit::seconds, {"call_seconds", "p99"}),
                   plain("oldest busy", Unit::seconds, {"oldest_busy_seconds"}), rate("resets", {"resets"}),
                   rate("connect failures", {"connect_failures"})});
    threads(o, a, b);
    carriers(o, a, b);
    return o.str();
}

}  // namespace qscope
