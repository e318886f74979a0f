#include "net/coordinator/payload_sketch.h"

#include "net/wire/error_codes.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

namespace crowdtrain::coordinator {
namespace {

uint64_t mix(uint64_t x)
{
    // splitmix64's finaliser: positions and buckets spread evenly.
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

bool readAt(int fd, uint64_t offset, void* out, std::size_t bytes)
{
    return ::pread(fd, out, bytes, off_t(offset)) == ssize_t(bytes);
}

} // namespace

std::vector<int64_t> PayloadSketch::positions(int64_t elements, uint64_t seed)
{
    std::vector<int64_t> out;
    if (elements <= 0)
        return out;
    for (std::size_t i = 0; i < kSize; ++i)
        out.push_back(int64_t(mix(seed * kSize + i) % uint64_t(elements)));
    std::sort(out.begin(), out.end());
    return out;
}

Result<PayloadSketch> PayloadSketch::ofDense(
    diloco::Codec codec, const std::filesystem::path& file, const std::vector<int64_t>& positions)
{
    PayloadSketch sketch;
    if (codec != diloco::Codec::Int8 && codec != diloco::Codec::Fp32)
        return sketch;
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return Error::make(net::errc::kIoError, "cannot open " + file.string());
    sketch.m_values.reserve(positions.size());
    bool ok = true;
    for (int64_t j : positions) {
        float value = 0;
        if (codec == diloco::Codec::Fp32) {
            ok = readAt(fd, uint64_t(j) * 4, &value, 4);
        } else {
            // Blocks of 256: a float32 scale, then one int8 per element.
            const uint64_t block = uint64_t(j / diloco::kInt8BlockElements);
            const uint64_t start = block * uint64_t(4 + diloco::kInt8BlockElements);
            float scale = 0;
            int8_t q = 0;
            ok = readAt(fd, start, &scale, 4)
                && readAt(fd, start + 4 + uint64_t(j % diloco::kInt8BlockElements), &q, 1);
            value = scale * float(q);
        }
        if (!ok)
            break;
        sketch.m_values.push_back(std::isfinite(value) ? value : 0.0f);
    }
    ::close(fd);
    if (!ok)
        return Error::make(net::errc::kIoError, "cannot read " + file.string());
    return sketch;
}

PayloadSketch PayloadSketch::ofSparse(const diloco::SparseEntries& entries)
{
    PayloadSketch sketch = sparseZero();
    sketch.addSparse(entries.position.data(), entries.value.data(), int64_t(entries.position.size()));
    return sketch;
}

PayloadSketch PayloadSketch::sparseZero()
{
    PayloadSketch sketch;
    sketch.m_values.assign(kSize, 0.0f);
    return sketch;
}

void PayloadSketch::addSparse(const int64_t* position, const float* value, int64_t count)
{
    for (int64_t i = 0; i < count; ++i) {
        const uint64_t h = mix(uint64_t(position[i]));
        const float sign = (h >> 63) ? -1.0f : 1.0f;
        m_values[h % kSize] += sign * value[i];
    }
}

double PayloadSketch::cosine(const PayloadSketch& other) const
{
    if (m_values.size() != other.m_values.size() || m_values.empty())
        return 0.0;
    double dot = 0, a = 0, b = 0;
    for (std::size_t i = 0; i < m_values.size(); ++i) {
        dot += double(m_values[i]) * double(other.m_values[i]);
        a += double(m_values[i]) * double(m_values[i]);
        b += double(other.m_values[i]) * double(other.m_values[i]);
    }
    return a > 0 && b > 0 ? dot / std::sqrt(a * b) : 0.0;
}

} // namespace crowdtrain::coordinator
