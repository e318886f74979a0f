// The sparse codec (docs/protocol.md §7 "sparse"): layout and sizes, the
// documented example's bytes, top-k per chunk, the 2-bit table, error
// feedback, chunk and tensor edges, malformed payloads, the sparse update's
// bit-exact application, median-norm aggregation, and an independent Python
// decoder written from the protocol text.
#include "engine/diloco/flat_params.h"
#include "engine/diloco/sparse_aggregator.h"
#include "engine/diloco/sparse_bits.h"
#include "engine/diloco/sparse_codec.h"
#include "engine/gpt_config.h"

#include <QProcess>
#include <QTemporaryDir>
#include <QTest>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <set>

using namespace crowdtrain;
using namespace crowdtrain::diloco;

namespace {

std::vector<float> randomVector(int64_t n, float sigma, uint32_t seed)
{
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, sigma);
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x)
        v = normal(rng);
    return x;
}

SparseLayout layoutOf(std::vector<int64_t> sizes, int64_t chunk, int64_t k, double decay = 0.95, int updateBits = 8)
{
    auto layout = SparseLayout::make(std::move(sizes), SparseOptions{chunk, k, decay, updateBits});
    if (!layout)
        qFatal("layout: %s", layout.error().message.c_str());
    return *layout;
}

std::vector<float> decodedMessage(const SparseLayout& layout, const std::string& message)
{
    std::vector<float> out(static_cast<size_t>(layout.elements()));
    const Status ok = decodeSparse(layout, message, out.data());
    if (!ok)
        qFatal("decodeSparse: %s", ok.error().message.c_str());
    return out;
}

bool sameBits(const std::vector<float>& a, const std::vector<float>& b)
{
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::string hex(const std::string& bytes)
{
    static const char* digits = "0123456789abcdef";
    std::string out;
    for (const unsigned char c : bytes) {
        if (!out.empty())
            out += ' ';
        out += digits[c >> 4];
        out += digits[c & 15];
    }
    return out;
}

// GPT-2 small's parameters in flat-vector order (124,439,808 elements).
std::vector<int64_t> gpt2SmallSizes()
{
    const int64_t d = 768;
    std::vector<int64_t> sizes{50257 * d, 1024 * d};
    for (int layer = 0; layer < 12; ++layer)
        for (const int64_t n : {d, d, d * 3 * d, 3 * d, d * d, d, d, d, d * 4 * d, 4 * d, 4 * d * d, d})
            sizes.push_back(n);
    sizes.push_back(d);
    sizes.push_back(d);
    return sizes;
}

void writeFile(const QString& path, const void* data, size_t size)
{
    std::ofstream out(path.toStdString(), std::ios::binary);
    out.write(static_cast<const char*>(data), std::streamsize(size));
}

std::vector<float> readFloats(const QString& path)
{
    std::ifstream in(path.toStdString(), std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<float> out(bytes.size() / 4);
    std::memcpy(out.data(), bytes.data(), out.size() * 4);
    return out;
}

} // namespace

class TestDilocoSparse : public QObject {
    Q_OBJECT

private slots:
    void optionsAreChecked()
    {
        for (const SparseOptions& bad : {SparseOptions{100, 4, 0.9}, SparseOptions{65536, 4, 0.9},
                 SparseOptions{32, 4, 0.9}, SparseOptions{4096, 0, 0.9}, SparseOptions{4096, 4097, 0.9},
                 SparseOptions{4096, 64, 1.5}, SparseOptions{4096, 64, std::nan("")}, SparseOptions{4096, 64, 0.8, 2},
                 SparseOptions{4096, 64, 0.8, 16}}) {
            const auto layout = SparseLayout::make({10}, bad);
            QVERIFY(!layout);
            QCOMPARE(layout.error().code, std::string("bad_options"));
        }
        QVERIFY(SparseLayout::make({10}, SparseOptions{}).ok());
    }

    // Bit fields of every width the codec uses, any length: what BitWriter
    // writes, readField reads back (its word-at-a-time part and its tail).
    void bitFieldsRoundTrip()
    {
        std::mt19937 rng(3);
        for (int bits = 0; bits <= 15; ++bits) {
            for (const int64_t count : {1, 2, 3, 7, 8, 9, 31, 64, 65, 1000}) {
                std::vector<uint16_t> values(static_cast<size_t>(count));
                for (uint16_t& v : values)
                    v = uint16_t(rng() & ((1u << bits) - 1u));
                std::vector<unsigned char> field(static_cast<size_t>(packedBytes(count, bits)) + 1, 0xee);
                sparse::BitWriter writer(field.data());
                for (const uint16_t v : values)
                    writer.put(v, bits);
                QCOMPARE(writer.finish() - field.data(), packedBytes(count, bits));
                QCOMPARE(field.back(), static_cast<unsigned char>(0xee)); // nothing written past the field
                std::vector<uint16_t> read(values.size(), 0xffff);
                sparse::readField(field.data(), count, bits, read.data());
                QCOMPARE(read, values);
            }
        }
    }

    void layoutSizes()
    {
        // Two full chunks, a full one plus 100, a 64-element tensor, a scalar.
        const SparseLayout layout = layoutOf({2 * 4096, 4096 + 100, 64, 1}, 4096, 64);
        QCOMPARE(layout.chunks(), int64_t(6));
        QCOMPARE(layout.keptIn(4096), int64_t(64));
        QCOMPARE(layout.keptIn(100), int64_t(2));
        QCOMPARE(layout.keptIn(64), int64_t(1));
        QCOMPARE(layout.keptIn(1), int64_t(1));
        QCOMPARE(layout.messageValues(), int64_t(3 * 64 + 2 + 1 + 1));
        // Index fields (Elias-Fano): a full chunk 64 x 6 low bits + 64 + 63
        // high bits = 64 bytes, codes 16; 2 of 100: 2 x 5 + (2 + 3) bits; 1 of
        // 64: 6 + 1 bits; 1 of 1: 0 + 1 bit; codes one byte each.
        QCOMPARE(sparseIndexLowBits(64, 4096), 6);
        QCOMPARE(sparseIndexBytes(64, 4096), int64_t(48 + 16));
        QCOMPARE(sparseIndexLowBits(2, 100), 5);
        QCOMPARE(sparseIndexLowBits(1, 1), 0);
        QCOMPARE(sparseIndexLowBits(4096, 4096), 0);
        QCOMPARE(sparseIndexBytes(4096, 4096), int64_t(1024)); // 4096 + 4095 high bits
        QCOMPARE(layout.messageBytes(), int64_t(64 + 3 * 80 + 4 + 3 + 2));
    }

    void bytesPerElementOfGpt2Small()
    {
        const SparseLayout layout = layoutOf(gpt2SmallSizes(), 4096, 64);
        QCOMPARE(layout.elements(), int64_t(124439808));
        const double perElement = double(layout.messageBytes()) / double(layout.elements());
        qInfo("sparse message of GPT-2 small (k 64 of 4096): %lld bytes, %.5f bytes per element (int8: %.5f, fp32 4), "
              "%lld values",
            static_cast<long long>(layout.messageBytes()), perElement, (4.0 / 256.0 + 1.0),
            static_cast<long long>(layout.messageValues()));
        // 80 bytes per full chunk of 4096, plus partial chunks and tables.
        QVERIFY(perElement > 80.0 / 4096.0);
        QVERIFY(perElement < 1.01 * 80.0 / 4096.0);
    }

    // The example of docs/protocol.md §7, byte for byte.
    void documentedExample()
    {
        const SparseLayout layout = layoutOf({6, 3}, 64, 32);
        const std::vector<float> delta{0.5f, -2.0f, 0.1f, 1.0f, -0.25f, 3.0f, 0.0f, -1.5f, 0.75f};
        std::vector<float> e(9, 0.0f);
        const std::string message = encodeSparse(layout, delta.data(), e.data());
        QCOMPARE(int64_t(message.size()), layout.messageBytes());
        QCOMPARE(hex(message),
            std::string("00 00 20 c0 00 00 80 bf 00 00 80 3f 00 00 20 40 07 15 38 "
                        "00 00 c0 bf 00 00 40 bf 00 00 40 3f 00 00 c0 3f 0a 08"));
        QCOMPARE(decodedMessage(layout, message),
            (std::vector<float>{0.0f, -2.5f, 0.0f, 1.0f, 0.0f, 2.5f, 0.0f, -1.5f, 0.75f}));
        QCOMPARE(e, (std::vector<float>{0.5f, 0.5f, 0.1f, 0.0f, -0.25f, 0.5f, 0.0f, 0.0f, 0.0f}));

        const std::vector<float> u{0.0f, -0.5f, 0.0f, 0.25f, 0.0f, 0.75f, 0.0f, 0.3f, 0.0f};
        const std::string update = encodeSparseUpdate(layout, u.data());
        QCOMPARE(hex(update), std::string("03 00 06 83 c1 3b 07 15 ab 2a 7f 01 00 38 cf 1a 3b 01 01 7f"));
        std::vector<float> theta(9, 1.0f);
        QVERIFY(applySparseUpdate(layout, update, theta.data()).ok());
        QCOMPARE(std::bit_cast<uint32_t>(theta[1]), 0x3efefdfcu);
        QCOMPARE(theta[5], 1.75f);
        QCOMPARE(theta[7], 1.3f);
        QCOMPARE(theta[0], 1.0f);

        // The same update with update_bits 4: s = max / 7, two values a byte.
        const SparseLayout narrow = *SparseLayout::make({6, 3}, SparseOptions{64, 32, 0.95, 4});
        const std::string update4 = encodeSparseUpdate(narrow, u.data());
        QCOMPARE(hex(update4), std::string("03 00 b7 6d db 3d 07 15 2b 07 01 00 f9 8a 2f 3d 01 01 07"));
        std::vector<float> theta4(9, 1.0f);
        QVERIFY(applySparseUpdate(narrow, update4, theta4.data()).ok());
        QCOMPARE(std::bit_cast<uint32_t>(theta4[1]), 0x3eedb6dcu); // 1 - 5 s
        QCOMPARE(std::bit_cast<uint32_t>(theta4[3]), 0x3f9b6db7u); // 1 + 2 s
        QCOMPARE(theta4[5], 1.75f);
        QCOMPARE(theta4[7], 1.3f);
        // Bytes of one width do not decode as the other, and change nothing.
        const std::vector<float> before = theta4;
        QVERIFY(!applySparseUpdate(narrow, update, theta4.data()));
        QVERIFY(!applySparseUpdate(layout, update4, theta4.data()));
        QCOMPARE(theta4, before);
    }

    // With update_bits 4 the union is sent from the coordinator's residual:
    // what rounding to 15 levels leaves out stays there, exactly, and goes
    // out in a later round that touches the element again.
    void int4UnionKeepsWhatRoundingLeavesOut()
    {
        const SparseLayout layout = *SparseLayout::make({3 * 512 + 77, 200}, SparseOptions{512, 16, 0.95, 4});
        const int64_t n = layout.elements();
        std::vector<float> u(static_cast<size_t>(n), 0.0f);
        const std::vector<float> values = randomVector(n, 1.0f, 5);
        for (int64_t i = 0; i < n; i += 7)
            u[size_t(i)] = values[size_t(i)];
        std::vector<float> residual = u;
        const std::string update = encodeSparseUpdateOnSupport(layout, u.data(), residual.data());
        std::vector<float> x(static_cast<size_t>(n));
        QVERIFY(decodeSparseUpdate(layout, update, x.data()).ok());
        double err = 0, norm = 0;
        for (int64_t i = 0; i < n; ++i) {
            if (u[size_t(i)] == 0.0f) {
                QCOMPARE(x[size_t(i)], 0.0f); // the support is u's
                continue;
            }
            QCOMPARE(residual[size_t(i)], u[size_t(i)] - x[size_t(i)]);
            err += double(residual[size_t(i)]) * residual[size_t(i)];
            norm += double(u[size_t(i)]) * u[size_t(i)];
        }
        // 15 levels under the chunk's max: each error at most s / 2.
        QVERIFY2(err < 0.02 * norm, qPrintable(QString::number(err / norm)));
        QVERIFY(err > 0);
        // The next round on the same support sends the leftovers too.
        std::vector<float> zeroStep(static_cast<size_t>(n), 0.0f);
        for (int64_t i = 0; i < n; i += 7)
            zeroStep[size_t(i)] = 1e-30f; // nonzero: the element is in the union
        const std::vector<float> left = residual;
        const std::string next = encodeSparseUpdateOnSupport(layout, zeroStep.data(), residual.data());
        std::vector<float> y(static_cast<size_t>(n));
        QVERIFY(decodeSparseUpdate(layout, next, y.data()).ok());
        double after = 0;
        for (int64_t i = 0; i < n; i += 7)
            after += double(left[size_t(i)] - y[size_t(i)]) * (left[size_t(i)] - y[size_t(i)]);
        QVERIFY(after < 0.1 * err);
    }

    void topKPerChunkAndTable()
    {
        const SparseLayout layout = layoutOf({3 * 512 + 77, 200}, 512, 16);
        const std::vector<float> delta = randomVector(layout.elements(), 1.0f, 1);
        std::vector<float> e(delta.size(), 0.0f);
        const std::string message = encodeSparse(layout, delta.data(), e.data());
        const std::vector<float> x = decodedMessage(layout, message);
        for (size_t t = 0; t < 2; ++t) {
            const int64_t offset = layout.tensorOffsets()[t];
            const int64_t n = layout.tensorElements()[t];
            std::vector<float> keptMagnitudes;
            for (int64_t first = 0; first < n; first += 512) {
                const int64_t length = std::min<int64_t>(512, n - first);
                std::vector<int64_t> order(static_cast<size_t>(length));
                for (int64_t i = 0; i < length; ++i)
                    order[size_t(i)] = i;
                std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
                    return std::fabs(delta[size_t(offset + first + a)]) > std::fabs(delta[size_t(offset + first + b)]);
                });
                const int64_t kept = layout.keptIn(length);
                std::set<int64_t> top(order.begin(), order.begin() + kept);
                for (int64_t i = 0; i < length; ++i) {
                    const float v = x[size_t(offset + first + i)];
                    const float d = delta[size_t(offset + first + i)];
                    QCOMPARE(v != 0.0f, top.count(i) == 1);
                    if (v != 0.0f) {
                        QCOMPARE(v < 0.0f, d < 0.0f);
                        keptMagnitudes.push_back(std::fabs(d));
                    }
                }
            }
            // The table: means of the lower and upper halves of the magnitudes.
            std::sort(keptMagnitudes.begin(), keptMagnitudes.end());
            const size_t half = keptMagnitudes.size() / 2;
            double lo = 0.0;
            double hi = 0.0;
            for (size_t i = 0; i < keptMagnitudes.size(); ++i)
                (i < half ? lo : hi) += keptMagnitudes[i];
            lo /= double(half);
            hi /= double(keptMagnitudes.size() - half);
            std::set<float> levels;
            for (int64_t i = 0; i < n; ++i)
                if (x[size_t(offset + i)] != 0.0f)
                    levels.insert(std::fabs(x[size_t(offset + i)]));
            QCOMPARE(levels, (std::set<float>{float(lo), float(hi)}));
            // Each kept value took the nearer level.
            for (int64_t i = 0; i < n; ++i) {
                const float v = x[size_t(offset + i)];
                if (v == 0.0f)
                    continue;
                const float d = std::fabs(delta[size_t(offset + i)]);
                QCOMPARE(std::fabs(v) == float(hi), d >= (float(lo) + float(hi)) * 0.5f);
            }
        }
    }

    void errorFeedbackInvariant()
    {
        const SparseLayout layout = layoutOf({5000, 4096, 33}, 4096, 64, 0.95);
        std::vector<float> e = randomVector(layout.elements(), 0.3f, 2);
        for (int round = 0; round < 3; ++round) {
            const std::vector<float> delta = randomVector(layout.elements(), 1.0f, 10 + uint32_t(round));
            const std::vector<float> before = e;
            const std::string message = encodeSparse(layout, delta.data(), e.data());
            const std::vector<float> x = decodedMessage(layout, message);
            const float beta = 0.95f;
            for (size_t i = 0; i < e.size(); ++i) {
                const float accumulated = beta * before[i] + delta[i];
                QCOMPARE(std::bit_cast<uint32_t>(e[i]), std::bit_cast<uint32_t>(accumulated - x[i]));
            }
        }
        // decay 0: e <- Delta - decoded.
        const SparseLayout noMemory = layoutOf({300}, 64, 4, 0.0);
        std::vector<float> e0 = randomVector(300, 5.0f, 3);
        const std::vector<float> delta = randomVector(300, 1.0f, 4);
        const std::vector<float> x = decodedMessage(noMemory, encodeSparse(noMemory, delta.data(), e0.data()));
        for (size_t i = 0; i < delta.size(); ++i)
            QCOMPARE(e0[i], delta[i] - x[i]);
    }

    void chunkAndTensorEdges()
    {
        // Sizes around the chunk, a scalar, an all-zero tensor.
        const SparseLayout layout = layoutOf({1, 63, 64, 65, 127, 129, 64 * 3, 10}, 64, 5);
        std::vector<float> delta = randomVector(layout.elements(), 1.0f, 5);
        const int64_t zeroTensor = layout.tensorOffsets()[7];
        std::fill(delta.begin() + zeroTensor, delta.end(), 0.0f);
        std::vector<float> e(delta.size(), 0.0f);
        const std::string message = encodeSparse(layout, delta.data(), e.data());
        QCOMPARE(int64_t(message.size()), layout.messageBytes());
        const std::vector<float> x = decodedMessage(layout, message);
        for (size_t t = 0; t < layout.tensorElements().size(); ++t) {
            const int64_t n = layout.tensorElements()[t];
            for (int64_t first = 0; first < n; first += 64) {
                const int64_t length = std::min<int64_t>(64, n - first);
                int64_t nonzero = 0;
                for (int64_t i = 0; i < length; ++i)
                    nonzero += x[size_t(layout.tensorOffsets()[t] + first + i)] != 0.0f;
                if (t == 7)
                    QCOMPARE(nonzero, int64_t(0)); // zeros kept decode to a zero table
                else
                    QCOMPARE(nonzero, layout.keptIn(length));
            }
        }
        // Deterministic: the same input gives the same bytes.
        std::vector<float> e2(delta.size(), 0.0f);
        QCOMPARE(encodeSparse(layout, delta.data(), e2.data()), message);
        QVERIFY(sameBits(e, e2));
    }

    void malformedMessagesAreRefused()
    {
        // One tensor of 100 elements, chunk 64, k 8: chunks of 64 (8 kept:
        // 3 low bits, 15 high bits) and 36 (5 kept: 2 low bits, 13 high).
        const SparseLayout layout = layoutOf({100}, 64, 8);
        const std::vector<float> delta = randomVector(100, 1.0f, 6);
        std::vector<float> e(100, 0.0f);
        const std::string good = encodeSparse(layout, delta.data(), e.data());
        QCOMPARE(int64_t(good.size()), 16 + (3 + 2 + 2) + (2 + 2 + 2));
        auto refused = [&](const std::string& bytes, const std::string& code) {
            std::vector<float> out(100, 7.0f);
            const Status decoded = decodeSparse(layout, bytes, out.data());
            if (decoded || decoded.error().code != code)
                return false;
            std::vector<float> acc(100, 7.0f);
            const Status added = accumulateSparse(layout, bytes, 1.0f, acc.data());
            const auto inspected = inspectSparse(layout, bytes);
            // Fed in pieces (an upload's chunks), the same refusal.
            for (const std::size_t piece : {std::size_t(1), std::size_t(5)}) {
                SparseStreamInspector streamed(layout);
                for (std::size_t at = 0; at < bytes.size(); at += piece)
                    (void)streamed.feed(std::string_view(bytes).substr(at, piece));
                const auto finished = streamed.finish();
                if (finished || finished.error().code != code)
                    return false;
            }
            return !added && added.error().code == code && !inspected && inspected.error().code == code
                && std::all_of(out.begin(), out.end(), [](float v) { return v == 7.0f; })
                && std::all_of(acc.begin(), acc.end(), [](float v) { return v == 7.0f; });
        };
        QVERIFY(refused(good.substr(0, good.size() - 1), "bad_size"));
        QVERIFY(refused(good + '\0', "bad_size"));
        QVERIFY(refused(std::string(), "bad_size"));
        // The second chunk's index field at byte 16 + 7 = 23: 5 x 2 low bits
        // (2 bytes), then 13 high bits (2 bytes), written by the rule of
        // docs/protocol.md whatever the indices (so bad ones can be made).
        auto withIndices = [&](std::vector<uint32_t> indices, uint32_t extraHighBits = 0) {
            std::string bytes = good;
            uint32_t low = 0;
            uint32_t high = extraHighBits;
            for (size_t i = 0; i < indices.size(); ++i) {
                low |= (indices[i] & 3u) << (2 * i);
                high |= 1u << ((indices[i] >> 2) + i);
            }
            bytes[23] = char(low & 0xff);
            bytes[24] = char(low >> 8);
            bytes[25] = char(high & 0xff);
            bytes[26] = char(high >> 8);
            return bytes;
        };
        QVERIFY(!refused(withIndices({0, 1, 2, 3, 35}), "bad_index")); // still well formed
        QVERIFY(decodeSparse(layout, withIndices({0, 1, 2, 3, 35}), std::vector<float>(100).data()).ok());
        QVERIFY(refused(withIndices({0, 1, 2, 3, 36}), "bad_index")); // past the 36-element chunk
        QVERIFY(refused(withIndices({0, 1, 2, 2, 9}), "bad_index")); // duplicate
        QVERIFY(refused(withIndices({0, 5, 2, 3, 9}), "bad_index")); // out of order (a high bit lands twice)
        QVERIFY(refused(withIndices({0, 1, 2, 3, 9}, 1u << 12), "bad_index")); // a bit after the last index
        QVERIFY(refused(withIndices({0, 1, 2, 3, 9}, 1u << 15), "bad_index")); // one in the padding
        std::string missing = withIndices({0, 1, 2, 3, 9});
        missing[26] = 0; // the fifth high bit (index 9: bit 2 + 4) cleared
        missing[25] = char(missing[25] & 0x3f);
        QVERIFY(refused(missing, "bad_index"));
        for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
            std::string bytes = good;
            std::memcpy(bytes.data() + 8, &bad, 4);
            QVERIFY(refused(bytes, "non_finite"));
        }
        // A NaN in the error buffer poisons the table: decoders refuse it.
        std::vector<float> poisoned = delta;
        poisoned[70] = std::numeric_limits<float>::quiet_NaN();
        std::vector<float> e3(100, 0.0f);
        QVERIFY(refused(encodeSparse(layout, poisoned.data(), e3.data()), "non_finite"));
    }

    // The coordinator inspects a sparse upload chunk by chunk as it arrives
    // (SparseStreamInspector): pieces of any size, cutting tables and
    // chunks anywhere, give inspectSparse's statistics and entries bit for
    // bit, also across an empty tensor and with a reference.
    void streamedInspectionEqualsWhole()
    {
        const SparseLayout layout = layoutOf({300, 0, 1000, 77}, 64, 8);
        const std::vector<float> delta = randomVector(layout.elements(), 1.0f, 11);
        const std::vector<float> reference = randomVector(layout.elements(), 1.0f, 12);
        std::vector<float> e(size_t(layout.elements()), 0.0f);
        const std::string message = encodeSparse(layout, delta.data(), e.data());
        SparseEntries whole;
        const auto expected = inspectSparse(layout, message, reference.data(), &whole);
        QVERIFY(expected);
        for (const std::size_t piece :
            {std::size_t(1), std::size_t(7), std::size_t(16), std::size_t(100), message.size()}) {
            SparseStreamInspector streamed(layout, reference.data());
            SparseEntries entries;
            for (std::size_t at = 0; at < message.size(); at += piece) {
                QVERIFY(!streamed.finish()); // short until the last piece
                QVERIFY(streamed.feed(std::string_view(message).substr(at, piece),
                    [&](const int64_t* position, const float* value, int64_t count) {
                        entries.position.insert(entries.position.end(), position, position + count);
                        entries.value.insert(entries.value.end(), value, value + count);
                    }));
            }
            const auto stats = streamed.finish();
            QVERIFY(stats);
            QCOMPARE(stats->l2Norm, expected->l2Norm);
            QCOMPARE(stats->maxAbs, expected->maxAbs);
            QCOMPARE(stats->dot, expected->dot);
            QVERIFY(entries.position == whole.position);
            QVERIFY(entries.value == whole.value);
            QVERIFY(!streamed.feed(std::string_view("x"))); // one byte more: bad_size
            QCOMPARE(streamed.finish().error().code, std::string("bad_size"));
        }
        SparseStreamInspector dropped(layout, reference.data());
        dropped.dropReference();
        QVERIFY(dropped.feed(message));
        QVERIFY(dropped.referenceDropped());
        QCOMPARE(dropped.finish()->dot, 0.0);
    }

    void updateIsAppliedBitExactly()
    {
        const SparseLayout layout = layoutOf({4096 * 3 + 5, 700}, 4096, 64);
        // The union of three messages, averaged.
        std::vector<float> sum(size_t(layout.elements()), 0.0f);
        for (uint32_t v = 0; v < 3; ++v) {
            const std::vector<float> delta = randomVector(layout.elements(), 1e-3f, 20 + v);
            std::vector<float> e(delta.size(), 0.0f);
            QVERIFY(
                accumulateSparse(layout, encodeSparse(layout, delta.data(), e.data()), 1.0f / 3.0f, sum.data()).ok());
        }
        const std::string update = encodeSparseUpdate(layout, sum.data());
        std::vector<float> u(sum.size());
        QVERIFY(decodeSparseUpdate(layout, update, u.data()).ok());
        int64_t support = 0;
        double error = 0.0;
        double norm = 0.0;
        for (size_t i = 0; i < u.size(); ++i) {
            QVERIFY(sum[i] != 0.0f || u[i] == 0.0f); // within the union
            support += u[i] != 0.0f;
            error += (double(u[i]) - sum[i]) * (double(u[i]) - sum[i]);
            norm += double(sum[i]) * sum[i];
        }
        QCOMPARE(*sparseUpdateEntries(layout, update), support);
        QVERIFY(support > 2 * layout.messageValues());
        qInfo("update of 3 messages: %lld entries, %zu bytes (%.2f bytes per entry), relative L2 error %.4f",
            static_cast<long long>(support), update.size(), double(update.size()) / double(support),
            std::sqrt(error / norm));
        QVERIFY(std::sqrt(error / norm) < 0.01);

        std::vector<float> theta = randomVector(layout.elements(), 0.02f, 30);
        std::vector<float> expected = theta;
        for (size_t i = 0; i < expected.size(); ++i)
            expected[i] = expected[i] + u[i];
        QVERIFY(applySparseUpdate(layout, update, theta.data()).ok());
        QVERIFY(sameBits(theta, expected));
    }

    // The coordinator's re-sparsified update: at most ceil(down_k L / C)
    // entries per chunk, the largest of its residual, whatever the number of
    // messages; what it sends leaves the residual exactly, the rest stays.
    void topKUpdateKeepsTheRestInTheResidual()
    {
        const SparseLayout layout = layoutOf({4096 * 2 + 100, 300}, 4096, 64);
        const int64_t downK = 32;
        std::vector<float> sum(size_t(layout.elements()), 0.0f);
        for (uint32_t v = 0; v < 16; ++v) { // a union of 16 messages: ~16 x 64 per chunk
            const std::vector<float> delta = randomVector(layout.elements(), 1e-3f, 40 + v);
            std::vector<float> e(delta.size(), 0.0f);
            QVERIFY(
                accumulateSparse(layout, encodeSparse(layout, delta.data(), e.data()), 1.0f / 16.0f, sum.data()).ok());
        }
        const std::vector<float> before = sum;
        std::vector<float> residual = sum;
        const std::string update = encodeSparseUpdateTopK(layout, downK, residual.data());
        std::vector<float> u(sum.size());
        QVERIFY(decodeSparseUpdate(layout, update, u.data()).ok());
        const int64_t entries = *sparseUpdateEntries(layout, update);
        QVERIFY(entries > 0);
        QVERIFY(entries <= 32 * 2 + 1 + 3); // chunks of 4096, 4096, 100 and 300 elements
        QVERIFY(entries < *sparseUpdateEntries(layout, encodeSparseUpdate(layout, sum.data())) / 8);
        const auto& sizes = layout.tensorElements();
        const auto& offsets = layout.tensorOffsets();
        for (size_t t = 0; t < sizes.size(); ++t) {
            for (int64_t first = 0; first < sizes[t]; first += 4096) {
                const int64_t from = offsets[t] + first;
                const int64_t length = std::min<int64_t>(4096, sizes[t] - first);
                float smallestSent = INFINITY;
                float largestKept = 0.0f;
                for (int64_t i = from; i < from + length; ++i) {
                    if (u[size_t(i)] != 0.0f) {
                        smallestSent = std::min(smallestSent, std::fabs(before[size_t(i)]));
                        QCOMPARE(residual[size_t(i)], before[size_t(i)] - u[size_t(i)]);
                    } else {
                        largestKept = std::max(largestKept, std::fabs(before[size_t(i)]));
                        QCOMPARE(residual[size_t(i)], before[size_t(i)]);
                    }
                }
                // Entries that round to q = 0 are left out, so only the
                // sent ones are known to be the chunk's largest.
                const int64_t sent
                    = std::count_if(u.begin() + from, u.begin() + from + length, [](float x) { return x != 0.0f; });
                QVERIFY(sent <= (downK * length + 4095) / 4096);
                if (sent == (downK * length + 4095) / 4096)
                    QVERIFY(smallestSent >= largestKept);
            }
        }
        // A second round sends what the first left behind.
        std::vector<float> again = residual;
        const std::string next = encodeSparseUpdateTopK(layout, downK, again.data());
        std::vector<float> u2(sum.size());
        QVERIFY(decodeSparseUpdate(layout, next, u2.data()).ok());
        for (size_t i = 0; i < u2.size(); ++i)
            QVERIFY(u2[i] == 0.0f || u[i] == 0.0f || residual[i] != 0.0f);
    }

    void malformedUpdatesAreRefused()
    {
        const SparseLayout layout = layoutOf({100}, 64, 8);
        std::vector<float> u(100, 0.0f);
        u[3] = 0.5f;
        u[10] = -0.25f;
        u[80] = 1.0f;
        const std::string good = encodeSparseUpdate(layout, u.data());
        // count 2, scale, indices (2 x 5 low bits, 3 high bits), 2 values;
        // count 1, scale, indices (5 low bits, 2 high bits), 1 value.
        QCOMPARE(good.size(), size_t(2 + 4 + (2 + 1) + 2 + 2 + 4 + (1 + 1) + 1));
        auto refused = [&](const std::string& bytes, const std::string& code) {
            std::vector<float> theta(100, 7.0f);
            const Status applied = applySparseUpdate(layout, bytes, theta.data());
            return !applied && applied.error().code == code
                && std::all_of(theta.begin(), theta.end(), [](float v) { return v == 7.0f; });
        };
        QVERIFY(refused(good.substr(0, good.size() - 1), "bad_size"));
        QVERIFY(refused(good + '\0', "bad_size"));
        QVERIFY(refused(std::string(1, '\0'), "bad_size"));
        std::string tooMany = good;
        tooMany[11] = 37; // the second chunk holds 36 elements
        QVERIFY(refused(tooMany, "bad_index"));
        std::string duplicate = good;
        duplicate[6] = char(3 | (3 << 5)); // low parts 3, 3 (high parts 0, 0): indices 3, 3
        duplicate[7] = 0;
        QVERIFY(refused(duplicate, "bad_index"));
        std::string outside = good;
        outside[17] = 4; // low part 4, high part 1: index 36
        outside[18] = 0x02;
        QVERIFY(refused(outside, "bad_index"));
        std::string extraBit = good;
        extraBit[8] = 0x07; // a third high bit for a count of 2
        QVERIFY(refused(extraBit, "bad_index"));
        const float nan = std::numeric_limits<float>::quiet_NaN();
        std::string nanScale = good;
        std::memcpy(nanScale.data() + 2, &nan, 4);
        QVERIFY(refused(nanScale, "non_finite"));
        const float huge = 3e38f;
        std::string overflow = good;
        std::memcpy(overflow.data() + 2, &huge, 4);
        QVERIFY(refused(overflow, "non_finite"));
        // All chunks empty: two zero counts, a valid update that moves nothing.
        std::vector<float> theta(100, 1.0f);
        QVERIFY(applySparseUpdate(layout, std::string(4, '\0'), theta.data()).ok());
        QCOMPARE(theta, std::vector<float>(100, 1.0f));

        // int4 values, two a byte: every nibble is accepted, 8 (-8) too, as
        // int8's -128 is; a value field cut short is bad_size.
        const SparseLayout narrow = *SparseLayout::make({100}, SparseOptions{64, 8, 0.95, 4});
        const std::string good4 = encodeSparseUpdate(narrow, u.data());
        QCOMPARE(good4.size(), size_t(2 + 4 + (2 + 1) + 1 + 2 + 4 + (1 + 1) + 1));
        QCOMPARE(uint8_t(good4[9]), uint8_t(0xd7)); // 7, -3 (-0.25 / float32(0.5 / 7) = -3.4999998)
        std::string minus8 = good4;
        minus8[9] = char(0x88);
        std::vector<float> theta4(100, 7.0f);
        QVERIFY(applySparseUpdate(narrow, minus8, theta4.data()).ok());
        float s;
        std::memcpy(&s, good4.data() + 2, 4);
        QCOMPARE(theta4[3], 7.0f + -8.0f * s);
        QCOMPARE(theta4[10], 7.0f + -8.0f * s);
        std::vector<float> untouched(100, 7.0f);
        const Status cut = applySparseUpdate(narrow, good4.substr(0, good4.size() - 1), untouched.data());
        QCOMPARE(cut.error().code, std::string("bad_size"));
        QCOMPARE(untouched, std::vector<float>(100, 7.0f));
    }

    void aggregatorScalesToMedianNorm()
    {
        const SparseLayout layout = layoutOf({1000, 300}, 64, 8);
        std::vector<std::string> messages;
        std::vector<double> norms;
        for (uint32_t v = 0; v < 3; ++v) {
            // The third one is 1000 times larger (a hostile volunteer, say).
            const std::vector<float> delta = randomVector(layout.elements(), v == 2 ? 1.0f : 1e-3f, 40 + v);
            std::vector<float> e(delta.size(), 0.0f);
            messages.push_back(encodeSparse(layout, delta.data(), e.data()));
            norms.push_back(inspectSparse(layout, messages.back())->l2Norm);
        }
        SparseAggregator aggregator(layout);
        QCOMPARE(aggregator.average().error().code, std::string("empty"));
        const double weights[3] = {1000.0, 3000.0, 2000.0};
        for (size_t i = 0; i < 3; ++i)
            QVERIFY(aggregator.add(messages[i], weights[i]).ok());
        QCOMPARE(aggregator.add(messages[0], 0.0).error().code, std::string("bad_weight"));
        QCOMPARE(aggregator.add(messages[0].substr(1), 1.0).error().code, std::string("bad_size"));
        QCOMPARE(aggregator.submissions(), int64_t(3));
        std::vector<double> sorted = norms;
        std::sort(sorted.begin(), sorted.end());
        QCOMPARE(aggregator.medianNorm(), sorted[1]);
        const std::vector<float> avg = *aggregator.average();
        // The same as scaling each decoded message to the median, then the
        // weighted mean (up to float rounding of the accumulator).
        std::vector<double> expected(avg.size(), 0.0);
        for (size_t m = 0; m < 3; ++m) {
            const std::vector<float> x = decodedMessage(layout, messages[m]);
            for (size_t i = 0; i < x.size(); ++i)
                expected[i] += weights[m] * (sorted[1] / norms[m]) * x[i] / 6000.0;
        }
        double avgNorm = 0.0;
        for (size_t i = 0; i < avg.size(); ++i) {
            QVERIFY(std::fabs(avg[i] - expected[i]) <= 1e-5 * std::fabs(expected[i]) + 1e-12);
            avgNorm += double(avg[i]) * avg[i];
        }
        // The large message no longer dominates: the average is no larger
        // than the median norm.
        QVERIFY(std::sqrt(avgNorm) <= sorted[1] * 1.0001);

        const std::string update = *aggregator.closeRound(0.7);
        std::vector<float> u(avg.size());
        QVERIFY(decodeSparseUpdate(layout, update, u.data()).ok());
        // u = -0.7 avg to within half an int8 step of its chunk's scale.
        float largest = 0.0f;
        for (const float v : avg)
            largest = std::max(largest, 0.7f * std::fabs(v));
        for (size_t i = 0; i < u.size(); ++i) {
            const float exact = float(-0.7) * avg[i];
            QVERIFY(std::fabs(u[i] - exact) <= 1.0001f * largest / 254.0f);
            if (avg[i] == 0.0f)
                QCOMPARE(u[i], 0.0f);
        }
        // In place (the coordinator's close): the same values over the
        // accumulator, which is then spent until reset().
        const std::span<float> inPlace = *aggregator.averageInPlace();
        QVERIFY(std::equal(inPlace.begin(), inPlace.end(), avg.begin(), avg.end()));
        QCOMPARE(aggregator.add(messages[0], 1.0).error().code, std::string("aggregator_failed"));
        QCOMPARE(aggregator.average().error().code, std::string("aggregator_failed"));
        aggregator.reset();
        QCOMPARE(aggregator.submissions(), int64_t(0));
        QVERIFY(aggregator.add(messages[0], 1.0).ok());
    }

    // An independent decoder (tests/sparse_reference.py, numpy, written from
    // docs/protocol.md §7) reproduces the C++ decode of a message and the
    // application of an update, bit for bit, on the tiny GPT's real tensors.
    void pythonReferenceDecoder_data()
    {
        QTest::addColumn<int>("updateBits");
        QTest::newRow("int8 update") << 8;
        QTest::newRow("int4 update") << 4;
    }

    void pythonReferenceDecoder()
    {
        QFETCH(int, updateBits);
        torch::manual_seed(1);
        engine::Gpt model(*engine::gptConfigByName("tiny"));
        const Manifest manifest = manifestOf(model);
        const std::vector<float> theta = flatten(model);
        torch::manual_seed(2);
        engine::Gpt other(*engine::gptConfigByName("tiny"));
        const std::vector<float> theta2 = flatten(other);
        std::vector<float> delta = pseudoGradient(theta.data(), theta2.data(), int64_t(theta.size()));
        for (float& v : delta)
            v *= 0.01f;
        const SparseLayout layout = *SparseLayout::make(manifest, SparseOptions{256, 16, 0.95, updateBits});
        std::vector<float> e(delta.size(), 0.0f);
        std::string message = encodeSparse(layout, delta.data(), e.data());
        message = encodeSparse(layout, delta.data(), e.data()); // a second round, with feedback
        SparseAggregator aggregator(layout);
        QVERIFY(aggregator.add(message, 1000.0).ok());
        std::vector<float> e2(delta.size(), 0.0f);
        const std::vector<float> delta2 = randomVector(layout.elements(), 1e-3f, 7);
        QVERIFY(aggregator.add(encodeSparse(layout, delta2.data(), e2.data()), 500.0).ok());
        const std::string update = *aggregator.closeRound(1.0);

        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        std::string sizes
            = "{\"chunk\": 256, \"k\": 16, \"update_bits\": " + std::to_string(updateBits) + ", \"tensor_elements\": [";
        for (size_t t = 0; t < manifest.entries.size(); ++t)
            sizes += (t ? ", " : "") + std::to_string(manifest.entries[t].numel);
        sizes += "]}";
        writeFile(dir.filePath(QStringLiteral("layout.json")), sizes.data(), sizes.size());
        writeFile(dir.filePath(QStringLiteral("message.bin")), message.data(), message.size());
        writeFile(dir.filePath(QStringLiteral("update.bin")), update.data(), update.size());
        writeFile(dir.filePath(QStringLiteral("theta.f32")), theta.data(), theta.size() * 4);
        QProcess python;
        python.start(QStringLiteral("/usr/bin/python3"),
            {QStringLiteral(CROWDTRAIN_SOURCE_DIR "/tests/sparse_reference.py"),
                dir.filePath(QStringLiteral("layout.json")), dir.filePath(QStringLiteral("message.bin")),
                dir.filePath(QStringLiteral("update.bin")), dir.filePath(QStringLiteral("theta.f32")),
                dir.filePath(QStringLiteral("message.f32")), dir.filePath(QStringLiteral("theta_next.f32"))});
        QVERIFY(python.waitForFinished(120000));
        QVERIFY2(python.exitCode() == 0, python.readAllStandardError().constData());

        QVERIFY(sameBits(readFloats(dir.filePath(QStringLiteral("message.f32"))), decodedMessage(layout, message)));
        std::vector<float> next = theta;
        QVERIFY(applySparseUpdate(layout, update, next.data()).ok());
        QVERIFY(!sameBits(next, theta));
        QVERIFY(sameBits(readFloats(dir.filePath(QStringLiteral("theta_next.f32"))), next));
    }
};

QTEST_GUILESS_MAIN(TestDilocoSparse)
#include "tst_diloco_sparse.moc"
