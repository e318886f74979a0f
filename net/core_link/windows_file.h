#pragma once

// The token windows of one task, in the order its steps use them, as the
// daemon hands them to the training core (docs/protocol.md, §13.3): a
// 32-byte header (magic "CTWINDOW", format 1, block size B, window count N,
// each little-endian: u32 format, u32 B, u64 N, u64 0) then N windows of
// B + 1 uint16 tokens. A window's first B tokens are a row of x, its last B
// are the same row of y. The core reads them in order, so a task trains on
// exactly what the daemon's RangeBatchSource drew, whichever process runs it.
//
// writeWindowsFile is used by the daemon, WindowsFileSource by the core.
// Neither is thread-safe.

#include "core/result.h"
#include "engine/batch_source.h"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <vector>

namespace crowdtrain::corelink {

// Draws `windows` windows from `source` (rows of `batch` at a time, as the
// task's steps would) and writes them to `file` (replacing it). Error
// "bad_size" when a token does not fit uint16 or windows is not a multiple
// of batch; "io_error".
Status writeWindowsFile(
    const std::filesystem::path& file, engine::BatchSource& source, int64_t batch, uint64_t windows);

class WindowsFileSource : public engine::BatchSource {
public:
    // Reads the whole file. Errors: "malformed" (bad magic, format, sizes),
    // "bad_size" (a token >= vocabSize, or block size not `blockSize`), "io_error".
    static Result<std::unique_ptr<WindowsFileSource>> open(
        const std::filesystem::path& file, int64_t blockSize, int64_t vocabSize);

    // The next `batch` windows in order (past the last, from the first again).
    void next(int64_t batch, int64_t* x, int64_t* y) override;
    uint64_t position() const override { return m_nextWindow; }
    void setPosition(uint64_t windowsDrawn) override { m_nextWindow = windowsDrawn; }
    int64_t blockSize() const override { return m_blockSize; }
    uint64_t windowCount() const { return m_windows; }

private:
    WindowsFileSource() = default;
    std::vector<uint16_t> m_tokens;
    int64_t m_blockSize = 0;
    uint64_t m_windows = 0;
    uint64_t m_nextWindow = 0;
};

} // namespace crowdtrain::corelink
