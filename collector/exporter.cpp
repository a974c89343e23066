// PLACEHOLDER: replaced by the exporter owner.
#include "app.h"
#include "errors.h"
namespace qscope {
int run_export(const Config&, const ExportOptions&) { throw Error(Exit::failure, "export: not built yet"); }
}  // namespace qscope
