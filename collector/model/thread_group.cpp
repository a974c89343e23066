#include "model/thread_group.h"

#include <cctype>

namespace qscope {

std::string thread_group_name(const std::string& comm) {
    size_t end = comm.size();
    while (end > 0 && std::isdigit(static_cast<unsigned char>(comm[end - 1]))) --end;
    // strip the separator the digits hung from, but never the whole name
    while (end > 0 && end < comm.size() && (comm[end - 1] == '-' || comm[end - 1] == '_' ||
                                            comm[end - 1] == '#' || comm[end - 1] == ' ' ||
                                            comm[end - 1] == '.'))
        --end;
    if (end == 0) return comm;
    return comm.substr(0, end);
}

}  // namespace qscope
