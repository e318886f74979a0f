#include "net/core_link/windows_file.h"

#include "core/file_io.h"
#include "net/wire/error_codes.h"

#include <cstring>

namespace crowdtrain::corelink {
namespace {

constexpr char kMagic[8] = {'C', 'T', 'W', 'I', 'N', 'D', 'O', 'W'};
constexpr uint32_t kFormat = 1;
constexpr std::size_t kHeaderBytes = 32;

void putLe(std::string& out, uint64_t value, int bytes)
{
    for (int i = 0; i < bytes; ++i)
        out.push_back(char((value >> (8 * i)) & 0xff));
}

uint64_t getLe(const char* p, int bytes)
{
    uint64_t value = 0;
    for (int i = bytes - 1; i >= 0; --i)
        value = value << 8 | uint64_t(static_cast<unsigned char>(p[i]));
    return value;
}

} // namespace

Status writeWindowsFile(const std::filesystem::path& file, engine::BatchSource& source, int64_t batch, uint64_t windows)
{
    if (batch <= 0 || windows % uint64_t(batch) != 0)
        return Error::make(net::errc::kBadSize, "windows must be whole batches");
    const int64_t block = source.blockSize();
    std::string header(kMagic, sizeof kMagic);
    putLe(header, kFormat, 4);
    putLe(header, uint64_t(block), 4);
    putLe(header, windows, 8);
    putLe(header, 0, 8);
    auto out = core::AtomicFile::create(file);
    if (!out)
        return out.error();
    if (Status wrote = out->write(header); !wrote)
        return wrote;
    std::vector<int64_t> x(std::size_t(batch * block)), y(std::size_t(batch * block));
    std::vector<uint16_t> rows(std::size_t(batch * (block + 1)));
    for (uint64_t drawn = 0; drawn < windows; drawn += uint64_t(batch)) {
        source.next(batch, x.data(), y.data());
        for (int64_t r = 0; r < batch; ++r) {
            uint16_t* row = rows.data() + r * (block + 1);
            for (int64_t t = 0; t <= block; ++t) {
                const int64_t token = t < block ? x[std::size_t(r * block + t)] : y[std::size_t(r * block + block - 1)];
                if (token < 0 || token > 0xffff)
                    return Error::make(
                        net::errc::kBadSize, "a token of " + std::to_string(token) + " does not fit 16 bits");
                row[t] = uint16_t(token);
            }
        }
        if (Status wrote = out->write(rows.data(), rows.size() * sizeof(uint16_t)); !wrote)
            return wrote;
    }
    // A scratch file: its durability does not matter, but commit() also
    // makes it visible under its name in one step.
    return out->commit();
}

Result<std::unique_ptr<WindowsFileSource>> WindowsFileSource::open(
    const std::filesystem::path& file, int64_t blockSize, int64_t vocabSize)
{
    auto bytes = core::readFile(file, std::size_t(16) << 30);
    if (!bytes)
        return bytes.error();
    const std::string& b = *bytes;
    if (b.size() < kHeaderBytes || std::memcmp(b.data(), kMagic, sizeof kMagic) != 0)
        return Error::make(net::errc::kMalformed, file.string() + " is not a windows file");
    if (getLe(b.data() + 8, 4) != kFormat)
        return Error::make(net::errc::kMalformed, file.string() + ": unknown windows file format");
    const int64_t block = int64_t(getLe(b.data() + 12, 4));
    const uint64_t windows = getLe(b.data() + 16, 8);
    if (block != blockSize)
        return Error::make(net::errc::kBadSize,
            file.string() + " holds windows of block size " + std::to_string(block) + ", the model's is "
                + std::to_string(blockSize));
    if (windows == 0 || (b.size() - kHeaderBytes) / 2 / uint64_t(block + 1) != windows
        || (b.size() - kHeaderBytes) != windows * uint64_t(block + 1) * 2)
        return Error::make(net::errc::kMalformed, file.string() + ": its size does not match its window count");
    std::unique_ptr<WindowsFileSource> source(new WindowsFileSource());
    source->m_tokens.resize((b.size() - kHeaderBytes) / 2);
    std::memcpy(source->m_tokens.data(), b.data() + kHeaderBytes, source->m_tokens.size() * 2);
    for (uint16_t token : source->m_tokens)
        if (int64_t(token) >= vocabSize)
            return Error::make(net::errc::kBadSize,
                file.string() + " holds token " + std::to_string(token) + ", outside the vocabulary of "
                    + std::to_string(vocabSize));
    source->m_blockSize = block;
    source->m_windows = windows;
    return source;
}

void WindowsFileSource::next(int64_t batch, int64_t* x, int64_t* y)
{
    for (int64_t r = 0; r < batch; ++r) {
        const uint16_t* row = m_tokens.data() + (m_nextWindow % m_windows) * uint64_t(m_blockSize + 1);
        for (int64_t t = 0; t < m_blockSize; ++t) {
            x[r * m_blockSize + t] = row[t];
            y[r * m_blockSize + t] = row[t + 1];
        }
        ++m_nextWindow;
    }
}

} // namespace crowdtrain::corelink
