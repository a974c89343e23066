// Numbers in sentences (the verdict, reasons): read at 3 a.m., so 6800 is "6,800".
#pragma once
#include <cstdint>
#include <string>

namespace qscope {

std::string fmt_count(uint64_t n);

}  // namespace qscope
