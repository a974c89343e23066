// Numbers in sentences (the verdict, reasons): read at 3 a.m., so 6800 is "6,800".
#pragma once
#include <cstdint>
#include <string>

namespace qscope {

std::string fmt_count(uint64_t n);
// "1 call", "6 calls": a count and its noun, as a sentence needs them. `plural`: for a noun
// whose plural is not noun + "s" ("retries").
std::string counted(uint64_t n, const std::string& noun, const std::string& plural = {});

}  // namespace qscope
