// The targets of one exporter: `--target NAME=SELECTOR` (repeatable) and `--config FILE`.
// Each has a service name, the `service` label of its series.
#pragma once
#include <string>
#include <vector>

#include "engine/selector.h"

namespace qscope {

struct NamedTarget {
    std::string service;   // "" only for a lone --pid: its series carry no service label
    Selector selector;
};

// "web=port:8080" → {web, port:8080}; "port:8080" → {"port:8080", port:8080}. Throws
// Error(usage) for a bad name or selector.
NamedTarget parse_target_arg(const std::string& arg);

// A --config file: one target per line, "NAME SELECTOR" (SELECTOR is KIND:VALUE and runs to
// the end of the line, so a cmdline regex may hold spaces); blank lines and lines starting
// with '#' are skipped. Throws Error(usage) "FILE:LINE: reason" for the first bad line, a
// duplicate name, or a file with no target.
std::vector<NamedTarget> parse_targets_file(const std::string& text, const std::string& file_name);

// Throws Error(usage) naming the first service name given twice.
void check_unique_services(const std::vector<NamedTarget>& targets);

// A service name: letters, digits, '_', '-', '.'; 1-64 characters.
bool valid_service_name(const std::string& name);

}  // namespace qscope
