// Sparse decoding: messages and updates are checked in full (size, tables,
// indices, finiteness) before any output is touched, then walked again to
// produce the values.
#include "engine/diloco/sparse_bits.h"
#include "engine/diloco/sparse_codec.h"
#include "engine/error_codes.h"

#include <algorithm>
#include <cmath>

namespace crowdtrain::diloco {

using sparse::MessageChunk;
using sparse::UpdateChunk;

namespace {

Status checkSize(const SparseLayout& layout, std::string_view message)
{
    if (int64_t(message.size()) != layout.messageBytes())
        return Error::make(engine::errc::kBadSize,
            "expected " + std::to_string(layout.messageBytes()) + " bytes for a sparse message of "
                + std::to_string(layout.elements()) + " elements, got " + std::to_string(message.size()));
    return Status::success();
}

// Size, tables and indices, then (only if all pass) op on every value.
template <class Op> Status forEachValue(const SparseLayout& layout, std::string_view message, bool check, Op op)
{
    if (Status ok = checkSize(layout, message); !ok)
        return ok;
    if (check)
        if (Status ok = sparse::walkMessage(layout, message, true, [](const MessageChunk&) {}); !ok)
            return ok;
    return sparse::walkMessage(layout, message, false, [&](const MessageChunk& c) {
        for (int64_t i = 0; i < c.count; ++i)
            op(c.first + c.index[i], c.table[c.code[i]]);
    });
}

template <class Op> Status forEachUpdateValue(const SparseLayout& layout, std::string_view update, Op op)
{
    if (Status ok = sparse::walkUpdate(layout, update, true, [](const UpdateChunk&) {}); !ok)
        return ok;
    return sparse::walkUpdate(layout, update, false, [&](const UpdateChunk& c) {
        for (int64_t i = 0; i < c.count; ++i)
            op(c.first + c.index[i], float(c.q[i]) * c.scale);
    });
}

Status needOutput(const SparseLayout& layout, const float* out)
{
    if (layout.elements() > 0 && out == nullptr)
        return Error::make(engine::errc::kBadArgument, "no output buffer for a sparse payload");
    return Status::success();
}

} // namespace

Status decodeSparse(const SparseLayout& layout, std::string_view message, float* out)
{
    if (Status ok = needOutput(layout, out); !ok)
        return ok;
    if (Status ok = checkSize(layout, message); !ok)
        return ok;
    if (Status ok = sparse::walkMessage(layout, message, true, [](const MessageChunk&) {}); !ok)
        return ok;
    std::fill(out, out + layout.elements(), 0.0f);
    return forEachValue(layout, message, false, [out](int64_t i, float v) { out[i] = v; });
}

Status accumulateSparse(const SparseLayout& layout, std::string_view message, float weight, float* acc)
{
    if (Status ok = needOutput(layout, acc); !ok)
        return ok;
    return forEachValue(layout, message, true, [acc, weight](int64_t i, float v) { acc[i] += weight * v; });
}

struct SparseStreamInspector::State {
    State(const SparseLayout& layout, const float* reference)
        : cursor(layout, true)
        , reference(reference)
    { }
    sparse::MessageCursor cursor;
    const float* reference;
    bool referenceDropped = false;
    double sumSquares = 0.0;
    double maxAbs = 0.0;
    double dot = 0.0;
    std::vector<int64_t> position; // one chunk's entries, for onEntries
    std::vector<float> value;
};

SparseStreamInspector::SparseStreamInspector(const SparseLayout& layout, const float* reference)
    : m_state(std::make_unique<State>(layout, reference))
{ }

SparseStreamInspector::~SparseStreamInspector() = default;
SparseStreamInspector::SparseStreamInspector(SparseStreamInspector&&) noexcept = default;
SparseStreamInspector& SparseStreamInspector::operator=(SparseStreamInspector&&) noexcept = default;

Status SparseStreamInspector::feed(std::string_view bytes, const OnEntries& onEntries)
{
    State& s = *m_state;
    return s.cursor.feed(bytes, [&](const MessageChunk& c) {
        if (onEntries) {
            s.position.resize(size_t(c.count));
            s.value.resize(size_t(c.count));
        }
        for (int64_t i = 0; i < c.count; ++i) {
            const float v = c.table[c.code[i]];
            s.sumSquares += double(v) * double(v);
            s.maxAbs = std::max(s.maxAbs, double(std::fabs(v)));
            if (s.reference)
                s.dot += double(v) * double(s.reference[c.first + c.index[i]]);
            if (onEntries) {
                s.position[size_t(i)] = c.first + c.index[i];
                s.value[size_t(i)] = v;
            }
        }
        if (onEntries)
            onEntries(s.position.data(), s.value.data(), c.count);
    });
}

Result<PayloadStats> SparseStreamInspector::finish() const
{
    if (Status ok = m_state->cursor.finish(); !ok)
        return ok.error();
    PayloadStats stats;
    stats.l2Norm = std::sqrt(m_state->sumSquares);
    stats.maxAbs = m_state->maxAbs;
    stats.dot = m_state->dot;
    return stats;
}

void SparseStreamInspector::dropReference()
{
    m_state->reference = nullptr;
    m_state->referenceDropped = true;
}

bool SparseStreamInspector::referenceDropped() const
{
    return m_state->referenceDropped;
}

Result<PayloadStats> inspectSparse(
    const SparseLayout& layout, std::string_view message, const float* reference, SparseEntries* entries)
{
    if (Status ok = checkSize(layout, message); !ok)
        return ok.error();
    SparseStreamInspector inspector(layout, reference);
    SparseStreamInspector::OnEntries collect;
    if (entries) {
        entries->position.clear();
        entries->value.clear();
        entries->position.reserve(size_t(layout.messageValues()));
        entries->value.reserve(size_t(layout.messageValues()));
        collect = [entries](const int64_t* position, const float* value, int64_t count) {
            entries->position.insert(entries->position.end(), position, position + count);
            entries->value.insert(entries->value.end(), value, value + count);
        };
    }
    // One walk: the statistics are thrown away if a check fails on the way.
    if (Status ok = inspector.feed(message, collect); !ok)
        return ok.error();
    return inspector.finish();
}

Status applySparseUpdate(const SparseLayout& layout, std::string_view update, float* params)
{
    if (Status ok = needOutput(layout, params); !ok)
        return ok;
    return forEachUpdateValue(layout, update, [params](int64_t i, float x) { params[i] = params[i] + x; });
}

Status decodeSparseUpdate(const SparseLayout& layout, std::string_view update, float* out)
{
    if (Status ok = needOutput(layout, out); !ok)
        return ok;
    if (Status ok = sparse::walkUpdate(layout, update, true, [](const UpdateChunk&) {}); !ok)
        return ok;
    std::fill(out, out + layout.elements(), 0.0f);
    return sparse::walkUpdate(layout, update, false, [out](const UpdateChunk& c) {
        for (int64_t i = 0; i < c.count; ++i)
            out[c.first + c.index[i]] = float(c.q[i]) * c.scale;
    });
}

Result<int64_t> sparseUpdateEntries(const SparseLayout& layout, std::string_view update)
{
    int64_t entries = 0;
    Status ok = sparse::walkUpdate(layout, update, true, [&](const UpdateChunk& c) { entries += c.count; });
    if (!ok)
        return ok.error();
    return entries;
}

} // namespace crowdtrain::diloco
