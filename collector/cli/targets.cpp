#include "cli/targets.h"

#include <cctype>
#include <map>
#include <sstream>

namespace qscope {

bool valid_service_name(const std::string& n) {
    if (n.empty() || n.size() > 64) return false;
    for (char c : n)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) return false;
    return true;
}

NamedTarget parse_target_arg(const std::string& arg) {
    // The name ends at the first '=' if that comes before the selector's ':' (a cmdline
    // regex may hold '=' of its own).
    const auto eq = arg.find('='), colon = arg.find(':');
    if (eq != std::string::npos && (colon == std::string::npos || eq < colon)) {
        const std::string name = arg.substr(0, eq);
        if (!valid_service_name(name))
            throw Error(Exit::usage, "--target " + arg + ": \"" + name +
                                         "\" is not a service name (letters, digits, _ - ., at most 64)");
        try {
            return {name, parse_selector(arg.substr(eq + 1))};
        } catch (const Error& e) {
            throw Error(Exit::usage, "--target " + arg + ": " + e.what());
        }
    }
    try {
        const Selector s = parse_selector(arg);
        return {s.text(), s};
    } catch (const Error& e) {
        throw Error(Exit::usage, "--target " + arg + ": " + e.what() + " (the form is NAME=KIND:VALUE)");
    }
}

std::vector<NamedTarget> parse_targets_file(const std::string& text, const std::string& file) {
    std::vector<NamedTarget> out;
    std::map<std::string, int> first_line;
    std::istringstream in(text);
    std::string line;
    int n = 0;
    auto fail = [&](const std::string& why) { throw Error(Exit::usage, file + ":" + std::to_string(n) + ": " + why); };
    while (std::getline(in, line)) {
        ++n;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        const auto b = line.find_first_not_of(" \t");
        if (b == std::string::npos || line[b] == '#') continue;
        const auto name_end = line.find_first_of(" \t", b);
        const std::string name = line.substr(b, name_end == std::string::npos ? std::string::npos : name_end - b);
        const auto sb = name_end == std::string::npos ? std::string::npos : line.find_first_not_of(" \t", name_end);
        if (sb == std::string::npos) fail("expected NAME SELECTOR (e.g. `web port:8080`), got \"" + line + "\"");
        if (!valid_service_name(name))
            fail("\"" + name + "\" is not a service name (letters, digits, _ - ., at most 64)");
        std::string sel = line.substr(sb);
        while (!sel.empty() && (sel.back() == ' ' || sel.back() == '\t')) sel.pop_back();
        NamedTarget t{name, {}};
        try {
            t.selector = parse_selector(sel);
        } catch (const Error& e) {
            fail(e.what());
        }
        if (auto it = first_line.find(name); it != first_line.end())
            fail("duplicate name \"" + name + "\" (first on line " + std::to_string(it->second) + ")");
        first_line[name] = n;
        out.push_back(std::move(t));
    }
    if (out.empty()) throw Error(Exit::usage, file + ": no targets (one per line: NAME KIND:VALUE, e.g. `web port:8080`)");
    return out;
}

void check_unique_services(const std::vector<NamedTarget>& targets) {
    std::map<std::string, const NamedTarget*> seen;
    for (const auto& t : targets) {
        auto [it, fresh] = seen.emplace(t.service, &t);
        if (!fresh)
            throw Error(Exit::usage, "two targets named \"" + t.service + "\" (" + it->second->selector.text() +
                                         " and " + t.selector.text() + "): each service needs its own name");
    }
}

}  // namespace qscope
