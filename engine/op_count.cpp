#include "engine/op_count.h"

#include <ATen/record_function.h>
#include <cstring>
#include <stdexcept>

namespace crowdtrain::engine {
namespace {

// RecordFunction takes plain function pointers: the counters are global.
std::atomic<bool> g_active{false};
std::atomic<int64_t> g_ops{0};
std::atomic<int64_t> g_hostReads{0};
std::atomic<int64_t> g_stepReads{0};
std::atomic<int64_t> g_inStepRead{0};

std::unique_ptr<at::ObserverContext> onStart(const at::RecordFunction& fn)
{
    const char* name = fn.name();
    if (fn.scope() == at::RecordScope::USER_SCOPE) {
        if (std::strcmp(name, kStepRead) == 0) {
            ++g_stepReads;
            ++g_inStepRead;
        }
        return nullptr;
    }
    ++g_ops;
    if (std::strcmp(name, "aten::_local_scalar_dense") == 0 && g_inStepRead.load() == 0)
        ++g_hostReads;
    return nullptr;
}

void onEnd(const at::RecordFunction& fn, at::ObserverContext*)
{
    if (fn.scope() == at::RecordScope::USER_SCOPE && std::strcmp(fn.name(), kStepRead) == 0)
        --g_inStepRead;
}

} // namespace

OpCount::OpCount()
{
    if (g_active.exchange(true))
        throw std::logic_error("one OpCount at a time");
    g_ops = 0;
    g_hostReads = 0;
    g_stepReads = 0;
    g_inStepRead = 0;
    m_handle = at::addThreadLocalCallback(
        at::RecordFunctionCallback(onStart, onEnd).scopes({at::RecordScope::FUNCTION, at::RecordScope::USER_SCOPE}));
}

OpCount::~OpCount()
{
    at::removeCallback(m_handle);
    g_active = false;
}

OpCounts OpCount::counts() const
{
    return {g_ops.load(), g_hostReads.load(), g_stepReads.load()};
}

} // namespace crowdtrain::engine
