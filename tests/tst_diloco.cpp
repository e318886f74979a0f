// DiLoCo numerics: flat parameters, payload codecs (byte layouts, rounding,
// error feedback, bad input, streaming), outer Nesterov vs PyTorch's SGD,
// weighted aggregation and the norm gate.
#include "engine/diloco/aggregator.h"
#include "engine/diloco/codec.h"
#include "engine/diloco/flat_params.h"
#include "engine/diloco/outer_optimizer.h"
#include "engine/diloco/sparse_codec.h"
#include "engine/diloco/submission_encoder.h"
#include "engine/model_io.h"

#include <QTest>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

using namespace crowdtrain;
using namespace crowdtrain::diloco;

Q_DECLARE_METATYPE(crowdtrain::diloco::Codec)

namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

engine::Gpt tinyModel(uint64_t seed)
{
    torch::manual_seed(seed);
    return engine::Gpt(*engine::gptConfigByName("tiny"));
}

std::vector<float> randomVector(int64_t n, float sigma, uint32_t seed)
{
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, sigma);
    std::vector<float> x(static_cast<std::size_t>(n));
    for (float& v : x)
        v = normal(rng);
    return x;
}

std::vector<float> decoded(Codec codec, const std::string& payload, int64_t n)
{
    std::vector<float> out(static_cast<std::size_t>(n));
    const Status status = decode(codec, payload, n, out.data());
    if (!status)
        qFatal("decode: %s", status.error().message.c_str());
    return out;
}

float int8Scale(const std::string& payload, int64_t element)
{
    float s;
    std::memcpy(&s, payload.data() + (element / 256) * 260, 4);
    return s;
}

bool sameBits(const std::vector<float>& a, const std::vector<float>& b)
{
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

uint16_t halfBits(float value)
{
    const std::string payload = encode(Codec::Fp16, &value, 1);
    uint16_t h;
    std::memcpy(&h, payload.data(), 2);
    return h;
}

void addCodecRows()
{
    QTest::addColumn<Codec>("codec");
    QTest::newRow("fp32") << Codec::Fp32;
    QTest::newRow("fp16") << Codec::Fp16;
    QTest::newRow("int8") << Codec::Int8;
}

} // namespace

class TestDiloco : public QObject {
    Q_OBJECT

private slots:
    void manifestMatchesModel()
    {
        auto model = tinyModel(1);
        const Manifest manifest = manifestOf(model);
        const auto params = engine::namedParameters(model);
        QCOMPARE(manifest.entries.size(), params.size());
        int64_t offset = 0;
        for (std::size_t i = 0; i < params.size(); ++i) {
            QCOMPARE(manifest.entries[i].name, params[i].first);
            QCOMPARE(manifest.entries[i].shape, params[i].second.sizes().vec());
            QCOMPARE(manifest.entries[i].offset, offset);
            offset += manifest.entries[i].numel;
        }
        QCOMPARE(manifest.totalElements, model->parameterCount());
        QCOMPARE(manifest.totalElements, engine::parameterCount(model->config()));

        auto twin = tinyModel(2);
        QVERIFY(sameLayout(manifest, manifestOf(twin)));
        const std::string fingerprint = manifestFingerprint(manifest);
        QCOMPARE(fingerprint.size(), std::size_t(16));
        QCOMPARE(fingerprint, manifestFingerprint(manifestOf(twin)));

        engine::GptConfig deeper = *engine::gptConfigByName("tiny");
        deeper.nLayer += 1;
        engine::Gpt other(deeper);
        QVERIFY(!sameLayout(manifest, manifestOf(other)));
        QVERIFY(fingerprint != manifestFingerprint(manifestOf(other)));
    }

    void flattenAssignRoundTrip()
    {
        auto source = tinyModel(1);
        auto target = tinyModel(2);
        const std::vector<float> flat = flatten(source);
        QCOMPARE(int64_t(flat.size()), source->parameterCount());
        QVERIFY(!sameBits(flat, flatten(target)));
        // Row-major at the manifest's offset.
        const Manifest manifest = manifestOf(source);
        const auto params = source->named_parameters();
        for (const ManifestEntry& entry : manifest.entries) {
            const torch::Tensor t = params[entry.name].flatten();
            QCOMPARE(flat[std::size_t(entry.offset + entry.numel - 1)], t[entry.numel - 1].item<float>());
        }

        QVERIFY(assign(target, flat.data(), int64_t(flat.size())).ok());
        QVERIFY(sameBits(flatten(target), flat));
        // The model computes with the new values.
        const auto idx = torch::randint(65, {1, 8}, torch::kLong);
        QVERIFY(torch::equal(source->forward(idx), target->forward(idx)));

        auto third = tinyModel(3);
        const std::vector<float> before = flatten(third);
        const Status wrong = assign(third, flat.data(), int64_t(flat.size()) - 1);
        QVERIFY(!wrong);
        QCOMPARE(wrong.error().code, std::string("bad_size"));
        QVERIFY(sameBits(flatten(third), before));
    }

    void pseudoGradientIsGlobalMinusLocal()
    {
        const std::vector<float> global{1.0f, 2.0f, -3.0f};
        const std::vector<float> local{0.5f, 2.0f, 1.0f};
        QCOMPARE(pseudoGradient(global.data(), local.data(), 3), (std::vector<float>{0.5f, 0.0f, -4.0f}));
    }

    void codecNames()
    {
        for (Codec codec : {Codec::Fp32, Codec::Fp16, Codec::Int8})
            QCOMPARE(*parseCodec(codecName(codec)), codec);
        QCOMPARE(parseCodec("int4").error().code, std::string("bad_codec"));
    }

    void encodedSize_data()
    {
        QTest::addColumn<Codec>("codec");
        QTest::addColumn<qint64>("n");
        QTest::addColumn<qint64>("bytes");
        QTest::newRow("fp32 0") << Codec::Fp32 << qint64(0) << qint64(0);
        QTest::newRow("fp32 1000") << Codec::Fp32 << qint64(1000) << qint64(4000);
        QTest::newRow("fp16 3") << Codec::Fp16 << qint64(3) << qint64(6);
        QTest::newRow("int8 1") << Codec::Int8 << qint64(1) << qint64(5);
        QTest::newRow("int8 256") << Codec::Int8 << qint64(256) << qint64(260);
        QTest::newRow("int8 257") << Codec::Int8 << qint64(257) << qint64(265);
        QTest::newRow("int8 1000") << Codec::Int8 << qint64(1000) << qint64(1016);
        QTest::newRow("int8 gpt2") << Codec::Int8 << qint64(124439808) << qint64(124439808 + 4 * 486093);
    }

    void encodedSize()
    {
        QFETCH(Codec, codec);
        QFETCH(qint64, n);
        QFETCH(qint64, bytes);
        QCOMPARE(encodedBytes(codec, n), bytes);
        if (n <= 1000)
            QCOMPARE(qint64(encode(codec, randomVector(n, 1.0f, 1).data(), n).size()), bytes);
    }

    void roundTrip_data() { addCodecRows(); }
    void roundTrip()
    {
        QFETCH(Codec, codec);
        const int64_t n = 1000; // three full int8 blocks and a short one
        std::vector<float> x = randomVector(n, 0.01f, 7);
        x[300] = 0.0f;
        const std::string payload = encode(codec, x.data(), n);
        const std::vector<float> y = decoded(codec, payload, n);
        if (codec == Codec::Fp32) {
            QVERIFY(sameBits(x, y));
        } else if (codec == Codec::Fp16) {
            const torch::Tensor viaTorch
                = torch::from_blob(x.data(), {n}, torch::kFloat32).to(torch::kHalf).to(torch::kFloat32).contiguous();
            QVERIFY(sameBits(y, std::vector<float>(viaTorch.data_ptr<float>(), viaTorch.data_ptr<float>() + n)));
        } else {
            for (int64_t i = 0; i < n; ++i) {
                const float s = int8Scale(payload, i);
                QVERIFY(s > 0.0f);
                QVERIFY2(std::fabs(x[std::size_t(i)] - y[std::size_t(i)]) <= s / 2 * (1 + 1e-5f),
                    qPrintable(QString::number(i)));
            }
            QCOMPARE(y[300], 0.0f);
        }
    }

    void int8Layout()
    {
        // Block 1: max 127 gives s = 1 exactly; -63.5 rounds away from zero.
        // Block 2 (two elements): max 254 gives s = 2.
        std::vector<float> x(258, 0.0f);
        const float head[] = {127.0f, -63.5f, 0.5f, -0.5f, 1.49f, 2.5f, -127.0f, 0.0f};
        std::copy(std::begin(head), std::end(head), x.begin());
        x[256] = 254.0f;
        x[257] = -127.0f;
        const std::string payload = encode(Codec::Int8, x.data(), 258);
        std::string expected("\x00\x00\x80\x3f\x7f\xc0\x01\xff\x01\x03\x81\x00", 12);
        expected += std::string(248, '\0');
        expected += std::string("\x00\x00\x00\x40\x7f\xc0", 6);
        QCOMPARE(payload.size(), expected.size());
        QVERIFY(payload == expected);
        const std::vector<float> y = decoded(Codec::Int8, payload, 258);
        QCOMPARE(y[1], -64.0f);
        QCOMPARE(y[5], 3.0f);
        QCOMPARE(y[257], -128.0f);
    }

    void fp16Rounding_data()
    {
        QTest::addColumn<float>("value");
        QTest::addColumn<int>("bits");
        QTest::newRow("one") << 1.0f << 0x3c00;
        QTest::newRow("minus two") << -2.0f << 0xc000;
        QTest::newRow("minus zero") << -0.0f << 0x8000;
        QTest::newRow("tie to even down") << 1.0f + 0x1p-11f << 0x3c00;
        QTest::newRow("tie to even up") << 1.0f + 3 * 0x1p-11f << 0x3c02;
        QTest::newRow("above tie") << 1.0f + 0x1p-11f + 0x1p-20f << 0x3c01;
        QTest::newRow("max") << 65504.0f << 0x7bff;
        QTest::newRow("below overflow") << 65519.99f << 0x7bff;
        QTest::newRow("overflow tie") << 65520.0f << 0x7c00;
        QTest::newRow("large") << 1e6f << 0x7c00;
        QTest::newRow("minus inf") << -kInf << 0xfc00;
        QTest::newRow("min subnormal") << 0x1p-24f << 0x0001;
        QTest::newRow("half min subnormal ties to 0") << 0x1p-25f << 0x0000;
        QTest::newRow("above half min subnormal") << 0x1p-25f + 0x1p-35f << 0x0001;
        QTest::newRow("subnormal tie up") << 3 * 0x1p-25f << 0x0002;
        QTest::newRow("subnormal to normal") << 0x1p-14f - 0x1p-25f << 0x0400;
        QTest::newRow("tiny") << 1e-10f << 0x0000;
    }

    void fp16Rounding()
    {
        QFETCH(float, value);
        QFETCH(int, bits);
        QCOMPARE(int(halfBits(value)), bits);
    }

    void fp16MatchesTorchOnRandomBits()
    {
        std::mt19937 rng(3);
        std::vector<float> x(200000);
        for (float& v : x) {
            do
                v = std::bit_cast<float>(uint32_t(rng()));
            while (std::isnan(v));
        }
        x.push_back(kNaN);
        const auto n = int64_t(x.size());
        const std::string payload = encode(Codec::Fp16, x.data(), n);
        const torch::Tensor half = torch::from_blob(x.data(), {n}, torch::kFloat32).to(torch::kHalf).contiguous();
        QVERIFY(std::memcmp(payload.data(), half.data_ptr(), std::size_t(2 * (n - 1))) == 0);
        uint16_t nanBits;
        std::memcpy(&nanBits, payload.data() + 2 * (n - 1), 2);
        QVERIFY((nanBits & 0x7c00) == 0x7c00 && (nanBits & 0x3ff) != 0);
    }

    void fp16DecodesEveryFiniteHalfAsTorch()
    {
        for (uint32_t sign : {0x0000u, 0x8000u}) {
            const int64_t n = 0x7c00; // every finite magnitude
            std::string payload(std::size_t(2 * n), '\0');
            for (uint32_t h = 0; h < uint32_t(n); ++h) {
                const auto bits = uint16_t(sign | h);
                std::memcpy(payload.data() + 2 * h, &bits, 2);
            }
            const torch::Tensor halves = torch::from_blob(payload.data(), {n}, torch::kHalf).to(torch::kFloat32);
            const float* expected = halves.data_ptr<float>();
            QVERIFY(sameBits(decoded(Codec::Fp16, payload, n), std::vector<float>(expected, expected + n)));
        }
    }

    void errorFeedback_data() { addCodecRows(); }
    void errorFeedback()
    {
        QFETCH(Codec, codec);
        const int64_t n = 600;
        const std::vector<float> x = randomVector(n, 1e-3f, 11);
        std::vector<float> residual(std::size_t(n), 0.0f);
        std::vector<double> withFeedback(std::size_t(n), 0.0), without(std::size_t(n), 0.0);
        std::string last;
        for (int k = 0; k < 50; ++k) {
            last = encode(codec, x.data(), n, residual.data());
            const std::vector<float> a = decoded(codec, last, n);
            const std::vector<float> b = decoded(codec, encode(codec, x.data(), n), n);
            for (std::size_t i = 0; i < a.size(); ++i) {
                withFeedback[i] += a[i];
                without[i] += b[i];
            }
        }
        double worstWithout = 0.0;
        for (int64_t i = 0; i < n; ++i) {
            const auto u = std::size_t(i);
            // One quantum: the int8 scale, or fp16's spacing near x (x + r
            // may be in the next binade; subnormal halves are 2^-24 apart).
            const double fp16Spacing = std::max(std::ldexp(1.0, std::ilogb(x[u]) + 1 - 10), 0x1p-24);
            const double quantum = codec == Codec::Int8 ? int8Scale(last, i) : codec == Codec::Fp16 ? fp16Spacing : 0.0;
            const double error = std::fabs(withFeedback[u] - 50.0 * x[u]);
            QVERIFY2(error <= quantum + 1e-9, qPrintable(QStringLiteral("element %1 error %2").arg(i).arg(error)));
            worstWithout = std::max(worstWithout, std::fabs(without[u] - 50.0 * x[u]) - quantum);
        }
        if (codec != Codec::Fp32)
            QVERIFY(worstWithout > 0.0); // without feedback the error grows
    }

    // The volunteer's submission built range by range (the local weights
    // read from the core's file chunk by chunk) is the whole-vector path's:
    // the same payload bytes and the same residual bits, round after round.
    void submissionInRangesIsTheWholeVectors_data()
    {
        addCodecRows();
        QTest::newRow("sparse") << Codec::Sparse;
    }
    void submissionInRangesIsTheWholeVectors()
    {
        QFETCH(Codec, codec);
        // Tensors that straddle the ranges; a last range that is not whole blocks.
        const std::vector<int64_t> tensors{3000, 700, 5000, 37};
        const int64_t n = 3000 + 700 + 5000 + 37;
        auto layout = SparseLayout::make(tensors, SparseOptions{256, 16, 0.8, 4});
        QVERIFY(layout);
        const SparseLayout* sparse = codec == Codec::Sparse ? &*layout : nullptr;
        const std::vector<float> global = randomVector(n, 1.0f, 5);
        std::vector<float> whole(std::size_t(n), 0.0f), ranged(std::size_t(n), 0.0f), scratch(1024);
        for (uint32_t round = 0; round < 3; ++round) {
            std::vector<float> local = global;
            const std::vector<float> step = randomVector(n, 1e-3f, 20 + round);
            for (std::size_t i = 0; i < local.size(); ++i)
                local[i] -= step[i];
            const std::vector<float> delta = pseudoGradient(global.data(), local.data(), n);
            const std::string expected = sparse ? encodeSparse(*sparse, delta.data(), whole.data())
                                                : encode(codec, delta.data(), n, whole.data());
            SubmissionEncoder encoder(codec, sparse, n, ranged.data());
            for (int64_t first = 0; first < n; first += 1024) {
                const int64_t count = std::min<int64_t>(1024, n - first);
                QVERIFY(encoder.add(global.data() + first, local.data() + first, count, scratch.data()));
            }
            auto payload = encoder.finish();
            QVERIFY(payload);
            QCOMPARE(payload->size(), expected.size());
            QVERIFY(*payload == expected);
            QVERIFY(sameBits(ranged, whole));
        }
    }

    // Ranges out of step are refused and change nothing.
    void submissionRangesOutOfStepAreRefused()
    {
        const int64_t n = 1000;
        const std::vector<float> global = randomVector(n, 1.0f, 6), local = randomVector(n, 1.0f, 7);
        std::vector<float> residual(std::size_t(n), 0.5f), scratch(std::size_t(n), 0.0f);
        SubmissionEncoder encoder(Codec::Int8, nullptr, n, residual.data());
        QCOMPARE(encoder.finish().error().code, std::string("bad_size")); // nothing added
        QCOMPARE(encoder.add(global.data(), local.data(), n + 1, scratch.data()).error().code, std::string("bad_size"));
        QVERIFY(encoder.add(global.data(), local.data(), 100, scratch.data())); // not whole blocks: must be the last
        QCOMPARE(encoder.add(global.data() + 100, local.data() + 100, 10, scratch.data()).error().code,
            std::string("bad_size"));
        QCOMPARE(encoder.next(), int64_t(100));
        for (int64_t i = 100; i < n; ++i)
            QCOMPARE(residual[std::size_t(i)], 0.5f);
    }

    void badSize_data() { addCodecRows(); }
    void badSize()
    {
        QFETCH(Codec, codec);
        const int64_t n = 300;
        const std::string payload = encode(codec, randomVector(n, 1.0f, 5).data(), n);
        for (const std::string& bad : {payload.substr(0, payload.size() - 1), payload + '\0', std::string()}) {
            std::vector<float> out(std::size_t(n), 42.0f);
            for (const Status& status : {decode(codec, bad, n, out.data()),
                     decodeAccumulate(codec, bad, n, 1.0f, out.data()), applyUpdate(codec, bad, n, out.data())}) {
                QVERIFY(!status);
                QCOMPARE(status.error().code, std::string("bad_size"));
                QVERIFY(status.error().message.find(std::to_string(payload.size())) != std::string::npos);
                QVERIFY(status.error().message.find(std::to_string(bad.size())) != std::string::npos);
            }
            QVERIFY(std::all_of(out.begin(), out.end(), [](float v) { return v == 42.0f; }));
            QCOMPARE(inspect(codec, bad, n).error().code, std::string("bad_size"));
        }
    }

    void nonFinite_data()
    {
        QTest::addColumn<Codec>("codec");
        QTest::addColumn<float>("bad");
        QTest::addColumn<int>("at");
        for (Codec codec : {Codec::Fp32, Codec::Fp16, Codec::Int8}) {
            const std::string name(codecName(codec));
            QTest::newRow((name + " nan").c_str()) << codec << kNaN << 299;
            QTest::newRow((name + " inf").c_str()) << codec << -kInf << 3;
        }
        QTest::newRow("fp16 overflow") << Codec::Fp16 << 1e6f << 100;
    }

    void nonFinite()
    {
        QFETCH(Codec, codec);
        QFETCH(float, bad);
        QFETCH(int, at);
        const int64_t n = 300;
        std::vector<float> x = randomVector(n, 1.0f, 5);
        x[std::size_t(at)] = bad;
        const std::string payload = encode(codec, x.data(), n);
        const auto stats = inspect(codec, payload, n);
        QVERIFY(stats.ok());
        QVERIFY(!stats->finite);
        std::vector<float> out(std::size_t(n), 42.0f);
        for (const Status& status : {decode(codec, payload, n, out.data()),
                 decodeAccumulate(codec, payload, n, 1.0f, out.data()), applyUpdate(codec, payload, n, out.data())}) {
            QVERIFY(!status);
            QCOMPARE(status.error().code, std::string("non_finite"));
        }
        QVERIFY(std::all_of(out.begin(), out.end(), [](float v) { return v == 42.0f; }));
        NormGate gate;
        QCOMPARE(verify(codec, payload, n, gate).reason, std::string("non_finite"));
    }

    void int8ForgedScaleOverflows()
    {
        // A finite scale whose products overflow: 127 * 3e38 is infinite.
        std::string payload(4 + 2, '\0');
        const float s = 3e38f;
        std::memcpy(payload.data(), &s, 4);
        payload[4] = 1;
        payload[5] = char(127);
        std::vector<float> out(2, 0.0f);
        QCOMPARE(decode(Codec::Int8, payload, 2, out.data()).error().code, std::string("non_finite"));
        QVERIFY(!inspect(Codec::Int8, payload, 2)->finite);
        payload[5] = 1; // 3e38 itself is fine
        QVERIFY(decode(Codec::Int8, payload, 2, out.data()).ok());
        QCOMPARE(out[1], 3e38f);

        // FLT_MAX / 127 in float32 rounds up: 127 and -128 times it both
        // overflow (the shortcut that skipped the check at this scale let
        // them through as finite); 126 times it does not.
        const float edge = std::numeric_limits<float>::max() / 127.0f;
        std::memcpy(payload.data(), &edge, 4);
        for (const int q : {127, -128}) {
            payload[5] = char(q);
            QCOMPARE(decode(Codec::Int8, payload, 2, out.data()).error().code, std::string("non_finite"));
            QVERIFY(!inspect(Codec::Int8, payload, 2)->finite);
        }
        payload[5] = char(126);
        QVERIFY(decode(Codec::Int8, payload, 2, out.data()).ok());
    }

    void streamDecoder_data() { addCodecRows(); }
    void streamDecoder()
    {
        QFETCH(Codec, codec);
        const int64_t n = 1000;
        const std::vector<float> x = randomVector(n, 0.1f, 9);
        const std::string payload = encode(codec, x.data(), n);
        const std::vector<float> whole = decoded(codec, payload, n);
        const PayloadStats wholeStats = *inspect(codec, payload, n);
        std::mt19937 rng(1);
        for (int trial = 0; trial < 40; ++trial) {
            // Trial 0 feeds one byte at a time, splitting every scale and value.
            const int maxSlice = trial == 0 ? 1 : trial % 2 ? 9 : 700;
            StreamDecoder decoder(codec, n);
            StreamInspector inspector(codec, n);
            std::vector<float> out(std::size_t(n), kNaN);
            int64_t next = 0;
            std::size_t pos = 0;
            while (pos < payload.size()) {
                const std::size_t size = std::min<std::size_t>(rng() % (maxSlice + 1), payload.size() - pos);
                const std::string_view slice(payload.data() + pos, size);
                pos += size;
                QVERIFY(decoder
                            .feed(slice,
                                [&](int64_t first, const float* values, int64_t count) {
                                    QCOMPARE(first, next);
                                    std::copy(values, values + count, out.begin() + first);
                                    next += count;
                                })
                            .ok());
                QVERIFY(inspector.feed(slice).ok());
            }
            QVERIFY(decoder.finish().ok());
            QCOMPARE(decoder.bytesFed(), int64_t(payload.size()));
            QVERIFY(sameBits(out, whole));
            const auto stats = inspector.finish();
            QVERIFY(stats.ok());
            QCOMPARE(stats->l2Norm, wholeStats.l2Norm);
            QCOMPARE(stats->maxAbs, wholeStats.maxAbs);
        }
        double sumSquares = 0.0, maxAbs = 0.0;
        for (float v : whole) {
            sumSquares += double(v) * v;
            maxAbs = std::max(maxAbs, double(std::fabs(v)));
        }
        QVERIFY(std::fabs(wholeStats.l2Norm - std::sqrt(sumSquares)) <= 1e-6 * wholeStats.l2Norm);
        QCOMPARE(wholeStats.maxAbs, maxAbs);

        StreamDecoder shortOne(codec, n);
        QVERIFY(shortOne.feed(std::string_view(payload).substr(0, payload.size() - 1), nullptr).ok());
        QCOMPARE(shortOne.finish().error().code, std::string("bad_size"));
        StreamDecoder longOne(codec, n);
        QVERIFY(longOne.feed(payload, nullptr).ok());
        QCOMPARE(longOne.feed("x", nullptr).error().code, std::string("bad_size"));
        QCOMPARE(longOne.finish().error().code, std::string("bad_size"));
    }

    void applyUpdateIsExactFloatAddition()
    {
        const int64_t n = 700;
        std::vector<float> params = randomVector(n, 0.02f, 4);
        const std::vector<float> u = randomVector(n, 1e-3f, 5);
        const std::string payload = encode(Codec::Int8, u.data(), n);
        const std::vector<float> d = decoded(Codec::Int8, payload, n);
        std::vector<float> expected = params;
        for (std::size_t i = 0; i < expected.size(); ++i)
            expected[i] += d[i];
        QVERIFY(applyUpdate(Codec::Int8, payload, n, params.data()).ok());
        QVERIFY(sameBits(params, expected));
    }

    void outerMatchesTorchSgd_data()
    {
        QTest::addColumn<bool>("nesterov");
        QTest::newRow("nesterov") << true;
        QTest::newRow("momentum") << false;
    }

    void outerMatchesTorchSgd()
    {
        QFETCH(bool, nesterov);
        const int64_t n = 257;
        torch::Tensor reference = torch::from_blob(randomVector(n, 1.0f, 2).data(), {n}).clone().requires_grad_(true);
        std::vector<float> ours(reference.data_ptr<float>(), reference.data_ptr<float>() + n);
        torch::optim::SGD sgd({reference}, torch::optim::SGDOptions(0.7).momentum(0.9).nesterov(nesterov));
        OuterNesterov outer(n, OuterOptions{.lr = 0.7, .momentum = 0.9, .nesterov = nesterov});
        for (int step = 0; step < 8; ++step) {
            std::vector<float> g = randomVector(n, 0.05f, 100 + step);
            reference.mutable_grad() = torch::from_blob(g.data(), {n}).clone();
            sgd.step();
            const std::vector<float> u = outer.step(g.data());
            for (int64_t i = 0; i < n; ++i)
                ours[std::size_t(i)] += u[std::size_t(i)];
        }
        const float* ref = reference.data_ptr<float>();
        for (int64_t i = 0; i < n; ++i)
            QVERIFY2(std::fabs(ours[std::size_t(i)] - ref[i]) <= 1e-6f, qPrintable(QString::number(i)));

        // The momentum survives a checkpoint.
        OuterNesterov restored(n, outer.options());
        QCOMPARE(restored.setMomentum(std::vector<float>(3)).error().code, std::string("bad_size"));
        QVERIFY(restored.setMomentum(outer.momentum()).ok());
        const std::vector<float> g = randomVector(n, 0.05f, 99);
        QVERIFY(sameBits(restored.step(g.data()), outer.step(g.data())));
    }

    void aggregatorWeightedAverage_data() { addCodecRows(); }
    void aggregatorWeightedAverage()
    {
        QFETCH(Codec, codec);
        // Values exact in every codec (int8: each has max 127, so s = 1).
        const std::vector<float> a{127.0f, 2.0f, -3.0f, 4.0f};
        const std::vector<float> b{127.0f, -2.0f, 1.0f, 0.0f};
        RoundAggregator whole(4);
        QCOMPARE(whole.average().error().code, std::string("empty"));
        QVERIFY(whole.add(codec, encode(codec, a.data(), 4), 1000.0).ok());
        QVERIFY(whole.add(codec, encode(codec, b.data(), 4), 3000.0).ok());
        QCOMPARE(whole.submissions(), int64_t(2));
        QCOMPARE(whole.totalWeight(), 4000.0);
        const std::vector<float> expected{127.0f, -1.0f, 0.0f, 1.0f};
        QCOMPARE(*whole.average(), expected);

        // Rejected submissions change nothing.
        const std::string good = encode(codec, a.data(), 4);
        QCOMPARE(whole.add(codec, good.substr(1), 1.0).error().code, std::string("bad_size"));
        for (double weight : {0.0, -5.0, double(kNaN)})
            QCOMPARE(whole.add(codec, good, weight).error().code, std::string("bad_weight"));
        const std::vector<float> withNaN{1.0f, kNaN, 0.0f, 0.0f};
        QCOMPARE(whole.add(codec, encode(codec, withNaN.data(), 4), 1.0).error().code, std::string("non_finite"));
        QCOMPARE(whole.submissions(), int64_t(2));
        QCOMPARE(*whole.average(), expected);

        // Streamed, in slices of 3 bytes.
        RoundAggregator streamed(4);
        for (auto [x, weight] : {std::pair{&a, 1000.0}, std::pair{&b, 3000.0}}) {
            const std::string payload = encode(codec, x->data(), 4);
            QVERIFY(streamed.begin(codec, weight).ok());
            for (std::size_t pos = 0; pos < payload.size(); pos += 3)
                QVERIFY(streamed.feed(std::string_view(payload).substr(pos, 3)).ok());
            QVERIFY(streamed.commit().ok());
        }
        QCOMPARE(*streamed.average(), expected);
        QVERIFY(streamed.begin(codec, 1.0).ok());
        QVERIFY(streamed.feed(std::string_view(good).substr(0, 2)).ok());
        QVERIFY(!streamed.commit());
        QVERIFY(streamed.failed());
        QCOMPARE(streamed.average().error().code, std::string("aggregator_failed"));
        streamed.reset();
        QVERIFY(!streamed.failed());
        QCOMPARE(streamed.submissions(), int64_t(0));
        QVERIFY(streamed.add(codec, good, 2.0).ok());
        QCOMPARE(*streamed.average(), a);
    }

    void normGate()
    {
        NormGate gate(NormGate::Options{.factor = 4.0, .absoluteMax = 1000.0});
        // No reference yet: only the ceiling.
        QVERIFY(!gate.check(999.0));
        QVERIFY(gate.check(1001.0)->starts_with("norm_too_large:"));
        QVERIFY(gate.check(std::nan(""))->starts_with("non_finite:"));

        const int64_t n = 4096;
        std::vector<std::string> normal;
        for (uint32_t seed = 0; seed < 6; ++seed) {
            // Norms spread from about 0.9 to 1.4.
            const std::vector<float> x = randomVector(n, (0.9f + 0.1f * float(seed)) / 64.0f, seed);
            normal.push_back(encode(Codec::Int8, x.data(), n));
        }
        for (const std::string& payload : normal) {
            const SubmissionVerdict verdict = verify(Codec::Int8, payload, n, gate);
            QVERIFY2(verdict.accepted, verdict.detail.c_str());
            gate.accept(verdict.stats.l2Norm);
        }
        QVERIFY(gate.reference().has_value());

        std::vector<float> scaled = randomVector(n, 1.0f / 64.0f, 3);
        for (float& v : scaled)
            v *= 100.0f;
        SubmissionVerdict verdict = verify(Codec::Int8, encode(Codec::Int8, scaled.data(), n), n, gate);
        QVERIFY(!verdict.accepted);
        QCOMPARE(verdict.reason, std::string("norm_too_large"));
        QVERIFY(verdict.stats.l2Norm > 50.0);

        std::vector<float> noise(static_cast<std::size_t>(n));
        std::mt19937 rng(8);
        std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
        for (float& v : noise)
            v = uniform(rng);
        verdict = verify(Codec::Fp16, encode(Codec::Fp16, noise.data(), n), n, gate);
        QCOMPARE(verdict.reason, std::string("norm_too_large"));

        QCOMPARE(verify(Codec::Int8, normal[0].substr(2), n, gate).reason, std::string("bad_size"));

        // The reference spans this round and the previous one only.
        gate.closeRound();
        QVERIFY(!gate.check(3.5));
        gate.accept(100.0);
        gate.accept(100.0);
        gate.accept(100.0);
        gate.accept(100.0);
        gate.accept(100.0);
        gate.accept(100.0);
        gate.accept(100.0);
        QVERIFY(!gate.check(300.0)); // median now 100
        gate.closeRound();
        gate.closeRound();
        QVERIFY(!gate.reference());
        QVERIFY(!gate.check(900.0));
    }

    void normGateOptions()
    {
        NormGate gate(NormGate::Options{.factor = 2.0, .absoluteMax = 1e9, .minReference = 3, .lowFactor = 0.1});
        gate.accept(1.0);
        gate.accept(2.0);
        QVERIFY(!gate.check(50.0)); // two norms are not yet a reference
        gate.accept(3.0);
        QCOMPARE(*gate.reference(), 2.0);
        QVERIFY(gate.check(4.5)->starts_with("norm_too_large:"));
        QVERIFY(!gate.check(4.0));
        QVERIFY(gate.check(0.1)->starts_with("norm_too_small:"));
        gate.accept(5.0);
        QCOMPARE(*gate.reference(), 2.5);

        NormGate restored(gate.options());
        restored.restore(gate.state());
        QCOMPARE(*restored.reference(), 2.5);
        QVERIFY(adamNormCeiling(124439808, 500, 6e-4) > 3000.0);
    }

    // Keys weigh what the caller says (the coordinator: their trust): many
    // light keys do not move the reference a heavy one sets; equal weights
    // give the ordinary median; the previous round's cosines can be left out.
    void normGateWeightsKeys()
    {
        NormGate gate;
        gate.accept(1.0, 0.5, "host", 20.0);
        for (int i = 0; i < 30; ++i)
            gate.accept(45.0, -0.5, "sybil" + std::to_string(i), 0.04);
        QCOMPARE(*gate.reference(), 1.0);
        QCOMPARE(*gate.directionReference(), 0.5);
        QVERIFY(gate.check(45.0)->starts_with("norm_too_large:"));
        gate.accept(2.0, std::nullopt, "zero weight", 0.0); // not recorded
        QCOMPARE(gate.state().currentRound.size(), std::size_t(31));

        NormGate even;
        even.accept(1.0, std::nullopt, "a", 2.0);
        even.accept(3.0, std::nullopt, "b", 2.0);
        QCOMPARE(*even.reference(), 2.0);
        even.closeRound();
        even.accept(1.0, 0.9, "a", 2.0);
        QCOMPARE(*even.directionReference(false), 0.9);
        even.forgetPreviousNorms();
        QCOMPARE(*even.reference(), 1.0);
    }
};

QTEST_GUILESS_MAIN(TestDiloco)
#include "tst_diloco.moc"
