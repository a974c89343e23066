// PLACEHOLDER: replaced by the jvm probe family's owner.
#include "source.h"

namespace qscope {
namespace {
class JvmSource final : public Source {
public:
    const char* name() const override { return "jvm"; }
    void start(const Target&, const Config&) override {}
    void collect(Snapshot&, const Tick&) override {}
};
}  // namespace
std::unique_ptr<Source> make_jvm_source() { return std::make_unique<JvmSource>(); }
}  // namespace qscope
