// Numbers in sentences (the verdict, reasons): read at 3 a.m., so 6800 is "6,800".
#pragma once
#include <cstdint>
#include <string>

namespace qscope {

std::string fmt_count(uint64_t n);
// "1 call", "6 calls": a count and its noun (a regular plural), as a sentence needs them.
std::string counted(uint64_t n, const std::string& noun);

}  // namespace qscope
