// PLACEHOLDER: replaced by the sock probe family's owner.
#include "source.h"

namespace qscope {
namespace {
class SockSource final : public Source {
public:
    const char* name() const override { return "sock"; }
    void start(const Target&, const Config&) override {}
    void collect(Snapshot&, const Tick&) override {}
};
}  // namespace
std::unique_ptr<Source> make_sock_source() { return std::make_unique<SockSource>(); }
}  // namespace qscope
