// PLACEHOLDER: replaced by the TUI owner.
#include "app.h"
#include "errors.h"
namespace qscope {
int run_top(const Config&, const TopOptions&) { throw Error(Exit::failure, "top: not built yet"); }
}  // namespace qscope
