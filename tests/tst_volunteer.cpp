// The volunteer agent's pieces, without a coordinator: the task's window walk,
// the data folder and its float files, server keys, update application with
// its SHA-256 check, the reconnect schedule, the inner trainer, and the byte
// counts of a connection (against a stand-in server on 127.0.0.1).
#include "core/file_io.h"
#include "engine/diloco/flat_params.h"
#include "engine/token_shard.h"
#include "net/core_service/inner_trainer.h"
#include "net/transfer/sha256.h"
#include "net/transport/curve_keys.h"
#include "net/transport/curve_socket.h"
#include "net/transport/zap_authenticator.h"
#include "net/volunteer/agent.h"
#include "net/volunteer/backoff.h"
#include "net/volunteer/connection.h"
#include "net/volunteer/local_store.h"
#include "net/volunteer/range_source.h"
#include "net/volunteer/theta_update.h"
#include "net/wire/messages.h"

#include <QTemporaryDir>
#include <QTest>

#include <algorithm>

#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <thread>
#include <unistd.h>

using namespace crowdtrain;
using namespace crowdtrain::volunteer;

namespace {

std::filesystem::path dirOf(const QTemporaryDir& dir)
{
    return dir.path().toStdString();
}

// Token k is k % modulus, so a window's first token tells where it starts.
void writeCountingShard(const std::filesystem::path& file, std::size_t count, uint16_t modulus = 60000)
{
    std::vector<uint16_t> tokens(count);
    for (std::size_t k = 0; k < count; ++k)
        tokens[k] = uint16_t(k % modulus);
    if (Status written = engine::writeTokenShard(file, tokens); !written)
        qFatal("%s", written.error().message.c_str());
}

net::CurveKeyPair freshKeys()
{
    auto keys = net::generateKeyPair();
    if (!keys)
        qFatal("%s", keys.error().message.c_str());
    return *keys;
}

// Answers heartbeats; records the exact request and reply frames' sizes.
class HeartbeatServer {
public:
    HeartbeatServer(zmq::context_t& context, const net::CurveKeyPair& keys)
    {
        auto socket = net::makeCurveServerSocket(context, zmq::socket_type::router, keys, "tcp://127.0.0.1:*");
        if (!socket)
            qFatal("%s", socket.error().message.c_str());
        m_socket = std::move(*socket);
        endpoint = net::lastEndpoint(m_socket);
        m_thread = std::thread([this] { run(); });
    }
    ~HeartbeatServer()
    {
        m_stop = true;
        m_thread.join();
    }
    std::string endpoint;
    std::atomic<uint64_t> requestBytes{0};
    std::atomic<uint64_t> replyBytes{0};

private:
    void run()
    {
        while (!m_stop) {
            zmq::pollitem_t item{m_socket.handle(), 0, ZMQ_POLLIN, 0};
            if (zmq::poll(&item, 1, std::chrono::milliseconds(20)) == 0)
                continue;
            auto request = net::receiveRequest(m_socket);
            if (!request)
                continue;
            auto envelope = net::decodeEnvelope(request->payload, net::EnvelopeKind::Request);
            const std::string reply = envelope
                ? net::encodeReply(net::HeartbeatReply{7, 8, std::string(net::kStateTrain)}, envelope->id)
                : net::encodeErrorReply(net::bestEffortRequestId(request->payload), envelope.error());
            requestBytes += request->payload.size();
            replyBytes += reply.size();
            (void)net::sendReply(m_socket, request->route, reply);
        }
    }
    zmq::socket_t m_socket;
    std::atomic<bool> m_stop{false};
    std::thread m_thread;
};

} // namespace

class TestVolunteer : public QObject {
    Q_OBJECT

private slots:
    void windowsOfARange_data()
    {
        QTest::addColumn<qulonglong>("tokens");
        QTest::addColumn<qlonglong>("block");
        QTest::addColumn<qulonglong>("windows");
        QTest::newRow("exact task") << 2ull * 3 * 8 + 1 << 8ll << 6ull;
        QTest::newRow("one short") << 2ull * 3 * 8 << 8ll << 5ull;
        QTest::newRow("one window") << 9ull << 8ll << 1ull;
        QTest::newRow("too short") << 8ull << 8ll << 0ull;
        QTest::newRow("empty") << 0ull << 8ll << 0ull;
    }
    void windowsOfARange()
    {
        QFETCH(qulonglong, tokens);
        QFETCH(qlonglong, block);
        QFETCH(qulonglong, windows);
        QCOMPARE(windowsIn(tokens, block), uint64_t(windows));
    }

    // Every window of the task exactly once, in a shuffled order that the
    // same ranges always reproduce; y is x shifted by one.
    void rangeWalkCoversEachWindowOnce()
    {
        QTemporaryDir dir;
        writeCountingShard(dirOf(dir) / "data_train_000000.bin", 1000);
        ShardLibrary library(dirOf(dir));
        const int64_t t = 8, b = 3, h = 4;
        const uint64_t begin = 100, end = begin + uint64_t(h * b * t) + 1;
        auto make = [&] {
            return RangeBatchSource::create(
                library, {{"data_train_000000.bin", begin, end}}, t, 60000, b, uint64_t(h * b));
        };
        auto source = make();
        QVERIFY2(source, source ? "" : source.error().message.c_str());
        QCOMPARE((*source)->windowCount(), uint64_t(h * b));
        std::vector<int64_t> x(std::size_t(b * t)), y(x.size());
        std::vector<int64_t> starts, firstStep;
        for (int64_t step = 0; step < h; ++step) {
            (*source)->next(b, x.data(), y.data());
            if (step == 1)
                firstStep = x;
            for (int64_t row = 0; row < b; ++row) {
                const int64_t first = x[std::size_t(row * t)];
                QCOMPARE((first - int64_t(begin)) % t, int64_t(0));
                starts.push_back(first);
                for (int64_t i = 0; i < t; ++i) {
                    QCOMPARE(x[std::size_t(row * t + i)], first + i);
                    QCOMPARE(y[std::size_t(row * t + i)], first + i + 1);
                }
            }
        }
        std::vector<int64_t> sorted = starts;
        std::sort(sorted.begin(), sorted.end());
        for (int64_t w = 0; w < h * b; ++w)
            QCOMPARE(sorted[std::size_t(w)], int64_t(begin) + w * t);
        QVERIFY(sorted != starts); // shuffled, not swept front to back
        QCOMPARE((*source)->position(), uint64_t(h));
        // setPosition replays a step exactly, and so does a new source.
        (*source)->setPosition(1);
        std::vector<int64_t> again(x.size()), againY(x.size());
        (*source)->next(b, again.data(), againY.data());
        QCOMPARE(again, firstStep);
        auto twin = make();
        (*twin)->setPosition(1);
        (*twin)->next(b, again.data(), againY.data());
        QCOMPARE(again, firstStep);
    }

    void rangesAreWalkedTogether()
    {
        QTemporaryDir dir;
        writeCountingShard(dirOf(dir) / "a_train.bin", 100);
        writeCountingShard(dirOf(dir) / "b_train.bin", 200);
        ShardLibrary library(dirOf(dir));
        // 2 windows of 4+1 in the first range, 1 in the second.
        auto source
            = RangeBatchSource::create(library, {{"a_train.bin", 10, 19}, {"b_train.bin", 150, 155}}, 4, 60000, 3, 3);
        QVERIFY2(source, source ? "" : source.error().message.c_str());
        std::vector<int64_t> x(12), y(12);
        (*source)->next(3, x.data(), y.data());
        std::vector<int64_t> starts{x[0], x[4], x[8]};
        std::sort(starts.begin(), starts.end());
        QCOMPARE(starts, (std::vector<int64_t>{10, 14, 150}));
        for (int row = 0; row < 3; ++row)
            QCOMPARE(y[std::size_t(row * 4 + 3)], x[std::size_t(row * 4)] + 4);
        QCOMPARE((*source)->windowStart(2).first->shard, std::string("b_train.bin"));
    }

    void badRangesAreClearErrors()
    {
        QTemporaryDir dir;
        writeCountingShard(dirOf(dir) / "data_train.bin", 100, 50);
        ShardLibrary library(dirOf(dir));
        auto codeOf = [&](std::vector<net::ShardRange> ranges, int64_t vocab, uint64_t needed) {
            auto source = RangeBatchSource::create(library, ranges, 4, vocab, 2, needed);
            return source ? std::string("ok") : source.error().code;
        };
        QCOMPARE(codeOf({{"data_train.bin", 0, 9}}, 50, 2), std::string("ok"));
        QCOMPARE(codeOf({{"missing_train.bin", 0, 9}}, 50, 2), std::string("missing_shard"));
        QCOMPARE(codeOf({{"../data_train.bin", 0, 9}}, 50, 2), std::string("bad_shard_name"));
        QCOMPARE(codeOf({{"sub/data_train.bin", 0, 9}}, 50, 2), std::string("bad_shard_name"));
        QCOMPARE(codeOf({{"..", 0, 9}}, 50, 2), std::string("bad_shard_name"));
        QCOMPARE(codeOf({{"", 0, 9}}, 50, 2), std::string("bad_shard_name"));
        QCOMPARE(codeOf({{"data_train.bin", 95, 105}}, 50, 2), std::string("shard_mismatch"));
        QCOMPARE(codeOf({{"data_train.bin", 9, 9}}, 50, 2), std::string("shard_mismatch"));
        // Tokens 0..49 repeat: a vocabulary of 40 cannot hold them.
        QCOMPARE(codeOf({{"data_train.bin", 0, 60}}, 40, 2), std::string("shard_mismatch"));
        QCOMPARE(codeOf({{"data_train.bin", 0, 9}}, 50, 3), std::string("bad_range"));
        // A file that is not a shard.
        std::ofstream(dirOf(dir) / "junk_train.bin") << "not a shard";
        const std::string junk = codeOf({{"junk_train.bin", 0, 9}}, 50, 2);
        QVERIFY(junk != "ok" && junk != "missing_shard");
    }

    void dataDirFollowsXdg()
    {
        QCOMPARE(*defaultDataDir("/x/data", "/home/v"), std::filesystem::path("/x/data/crowdtrain"));
        QCOMPARE(*defaultDataDir("", "/home/v"), std::filesystem::path("/home/v/.local/share/crowdtrain"));
        QCOMPARE(*defaultDataDir(nullptr, "/home/v"), std::filesystem::path("/home/v/.local/share/crowdtrain"));
        // XDG says relative paths are invalid and must be ignored.
        QCOMPARE(*defaultDataDir("relative", "/home/v"), std::filesystem::path("/home/v/.local/share/crowdtrain"));
        QCOMPARE(defaultDataDir(nullptr, nullptr).error().code, std::string("no_data_dir"));
    }

    void identityPersists()
    {
        QTemporaryDir dir;
        auto first = net::loadOrCreateKeyPair(identityKeyFile(dirOf(dir)));
        QVERIFY(first);
        auto second = net::loadOrCreateKeyPair(identityKeyFile(dirOf(dir)));
        QVERIFY(second);
        QCOMPARE(first->publicKey, second->publicKey);
        QCOMPARE(identityKeyFile(dirOf(dir)).filename().string(), std::string("identity.key"));
    }

    void projectFolder()
    {
        QTemporaryDir dir;
        QCOMPARE(ProjectFolder::open(dirOf(dir), "Bad Name").error().code, std::string("bad_project"));
        QCOMPARE(ProjectFolder::open(dirOf(dir), "../x").error().code, std::string("bad_project"));
        auto folder = ProjectFolder::open(dirOf(dir), "tiny-shakespeare");
        QVERIFY(folder);
        QVERIFY(std::filesystem::is_directory(dirOf(dir) / "projects" / "tiny-shakespeare" / "downloads"));
        QCOMPARE(folder->downloadTarget("checkpoint/40/model.safetensors").parent_path(), folder->downloadsDir());
        QCOMPARE(folder->downloadTarget("../evil").parent_path(), folder->downloadsDir());
        // Pruning keeps the named resource and its partial files only.
        for (const char* name : {"state-v3.part", "state-v3.part.progress", "state-v2.part", "update-v1"})
            std::ofstream(folder->downloadsDir() / name) << "x";
        folder->pruneDownloads("state-v3");
        QVERIFY(std::filesystem::exists(folder->downloadsDir() / "state-v3.part"));
        QVERIFY(std::filesystem::exists(folder->downloadsDir() / "state-v3.part.progress"));
        QVERIFY(!std::filesystem::exists(folder->downloadsDir() / "state-v2.part"));
        QVERIFY(!std::filesystem::exists(folder->downloadsDir() / "update-v1"));
    }

    void floatFilesRoundTripAndDetectDamage()
    {
        QTemporaryDir dir;
        const auto file = dirOf(dir) / "theta.f32";
        auto absent = loadFloats(file);
        QVERIFY(absent && !*absent);
        const std::vector<float> values{1.5f, -2.0f, 0.0f, 3.25f};
        QVERIFY(saveFloats(file, 12, "abc", values));
        auto loaded = loadFloats(file);
        QVERIFY(loaded && *loaded);
        QCOMPARE((*loaded)->version, uint64_t(12));
        QCOMPARE((*loaded)->manifestSha256, std::string("abc"));
        QCOMPARE((*loaded)->values, values);
        QCOMPARE((*loaded)->sha256, floatsSha256(values));
        {
            std::fstream out(file, std::ios::in | std::ios::out | std::ios::binary);
            out.seekp(4);
            out.put('\x7f');
        }
        QCOMPARE(loadFloats(file).error().code, std::string("checksum_mismatch"));
        std::ofstream(file.string() + ".meta") << "garbage\n";
        QCOMPARE(loadFloats(file).error().code, std::string("malformed"));
        removeFloats(file);
        QVERIFY(!*loadFloats(file));
        QCOMPARE(floatsFromBytes(std::string(7, '\0'), 2).error().code, std::string("bad_size"));
        QCOMPARE(floatsFromBytes(std::string(8, '\0'), 2)->size(), std::size_t(2));
    }

    // The core's local weights and a downloaded state are read straight into
    // floats, whole or a range at a time; a file of the wrong size, a short
    // one or one with a NaN is named.
    void floatFilesAreReadInRanges()
    {
        QTemporaryDir dir;
        const auto file = dirOf(dir) / "local.f32";
        std::vector<float> values(3000);
        for (std::size_t i = 0; i < values.size(); ++i)
            values[i] = float(i) * 0.25f - 7.0f;
        std::ofstream(file, std::ios::binary)
            .write(reinterpret_cast<const char*>(values.data()), std::streamsize(values.size() * sizeof(float)));
        QCOMPARE(*readFloatFile(file, values.size()), values);
        auto reader = FloatFileReader::open(file, values.size());
        QVERIFY(reader);
        std::vector<float> ranges(values.size());
        QVERIFY(reader->read(ranges.data(), 1024));
        QVERIFY(reader->read(ranges.data() + 1024, 1976));
        QCOMPARE(ranges, values);
        QCOMPARE(reader->read(ranges.data(), 1).error().code, std::string("io_error")); // past the end
        QVERIFY(checkFloatFileFinite(file, values.size()));
        QCOMPARE(FloatFileReader::open(file, values.size() + 1).error().code, std::string("bad_size"));
        QCOMPARE(readFloatFile(dirOf(dir) / "absent.f32", 4).error().code, std::string("not_found"));
        values[2500] = std::numeric_limits<float>::quiet_NaN();
        std::ofstream(file, std::ios::binary)
            .write(reinterpret_cast<const char*>(values.data()), std::streamsize(values.size() * sizeof(float)));
        QCOMPARE(checkFloatFileFinite(file, values.size()).error().code, std::string("non_finite"));
    }

    // A kill between any two steps of a save leaves a pair that loads: the
    // old values, or the new ones.
    void floatFilesSurviveASaveCutShort()
    {
        QTemporaryDir dir;
        const auto file = dirOf(dir) / "theta.f32";
        const auto next = dirOf(dir) / "next.f32";
        const std::vector<float> before{1.0f, 2.0f, 3.0f};
        const std::vector<float> after{4.0f, 5.0f, 6.0f, 7.0f};
        QVERIFY(saveFloats(next, 13, "abc", after)); // the bytes and description a save of `after` writes
        const auto pending = file.string() + ".meta.next";
        auto copy = [](const std::filesystem::path& from, const std::filesystem::path& to) {
            std::filesystem::copy_file(from, to, std::filesystem::copy_options::overwrite_existing);
        };

        // Killed after the new description, before the bytes: the old pair.
        QVERIFY(saveFloats(file, 12, "abc", before));
        copy(next.string() + ".meta", pending);
        auto loaded = loadFloats(file);
        QVERIFY(loaded && *loaded);
        QCOMPARE((*loaded)->version, uint64_t(12));
        QCOMPARE((*loaded)->values, before);
        QVERIFY(!std::filesystem::exists(pending));

        // Killed after the bytes, before the description's rename: the new pair.
        copy(next.string() + ".meta", pending);
        copy(next, file);
        loaded = loadFloats(file);
        QVERIFY(loaded && *loaded);
        QCOMPARE((*loaded)->version, uint64_t(13));
        QCOMPARE((*loaded)->values, after);
        QVERIFY(!std::filesystem::exists(pending));
        QVERIFY(loadFloats(file) && *loadFloats(file)); // the finished pair loads again

        // The first save killed before its rename: no .meta yet, the new pair.
        removeFloats(file);
        copy(next.string() + ".meta", pending);
        copy(next, file);
        loaded = loadFloats(file);
        QVERIFY(loaded && *loaded);
        QCOMPARE((*loaded)->values, after);

        // Bytes that match neither description are still refused.
        copy(next.string() + ".meta", pending);
        {
            std::fstream out(file, std::ios::in | std::ios::out | std::ios::binary);
            out.seekp(0);
            out.put('\x7f');
        }
        QCOMPARE(loadFloats(file).error().code, std::string("checksum_mismatch"));
        // A truncated file is refused by its size, before its bytes are read.
        std::filesystem::resize_file(file, 6);
        const auto truncated = loadFloats(file);
        QCOMPARE(truncated.error().code, std::string("checksum_mismatch"));
        QVERIFY2(
            truncated.error().message.find("holds 6 bytes") != std::string::npos, truncated.error().message.c_str());
    }

    void serverKeyFromTextOrFile()
    {
        QTemporaryDir dir;
        const net::CurveKeyPair keys = freshKeys();
        QCOMPARE(*resolveServerKey(keys.publicKey), keys.publicKey);
        const auto pairFile = dirOf(dir) / "server.key";
        std::ofstream(pairFile) << net::formatKeyPairFile(keys);
        QCOMPARE(*resolveServerKey("@" + pairFile.string()), keys.publicKey);
        QCOMPARE(*resolveServerKey(pairFile.string()), keys.publicKey);
        const auto publicFile = dirOf(dir) / "server.pub";
        std::ofstream(publicFile) << keys.publicKey << "\n";
        QCOMPARE(*resolveServerKey("@" + publicFile.string()), keys.publicKey);
        QCOMPARE(resolveServerKey("short").error().code, std::string("bad_server_key"));
        QCOMPARE(resolveServerKey("@" + (dirOf(dir) / "none").string()).error().code, std::string("bad_server_key"));
        std::ofstream(dirOf(dir) / "empty.key") << "nothing here\n";
        QCOMPARE(resolveServerKey((dirOf(dir) / "empty.key").string()).error().code, std::string("bad_server_key"));
    }

    void updateIsAppliedAndChecked()
    {
        const int64_t n = 1000;
        std::vector<float> theta(static_cast<std::size_t>(n)), update(static_cast<std::size_t>(n));
        for (int64_t i = 0; i < n; ++i) {
            theta[std::size_t(i)] = float(i % 17) * 0.01f - 0.05f;
            update[std::size_t(i)] = float((i * 7) % 13) * 1e-3f - 6e-3f;
        }
        const std::string payload = diloco::encode(diloco::Codec::Int8, update.data(), n);
        std::vector<float> expected = theta;
        QVERIFY(diloco::applyUpdate(diloco::Codec::Int8, payload, n, expected.data()));
        const std::string sha = floatsSha256(expected);

        auto next = applyPublishedUpdate(theta, diloco::Codec::Int8, payload, sha);
        QVERIFY(next);
        QCOMPARE(*next, expected);
        QVERIFY(*next != theta);
        // Another base (a volunteer whose copy drifted) fails the check.
        std::vector<float> drifted = theta;
        drifted[5] += 1e-6f;
        QCOMPARE(applyPublishedUpdate(drifted, diloco::Codec::Int8, payload, sha).error().code,
            std::string("checksum_mismatch"));
        // A damaged payload: wrong size, or one byte changed.
        QCOMPARE(applyPublishedUpdate(theta, diloco::Codec::Int8, payload.substr(1), sha).error().code,
            std::string("bad_size"));
        std::string flipped = payload;
        flipped[10] = char(flipped[10] ^ 0x01);
        QCOMPARE(applyPublishedUpdate(theta, diloco::Codec::Int8, flipped, sha).error().code,
            std::string("checksum_mismatch"));

        // In place (theta_v held by no task): the same bits, no copy; a
        // damaged payload leaves theta untouched.
        std::vector<float> inPlace = theta;
        QCOMPARE(applyPublishedUpdateInPlace(inPlace, diloco::Codec::Int8, payload.substr(1), sha).error().code,
            std::string("bad_size"));
        QCOMPARE(inPlace, theta);
        const float* storage = inPlace.data();
        QVERIFY(applyPublishedUpdateInPlace(inPlace, diloco::Codec::Int8, payload, sha));
        QCOMPARE(inPlace, expected);
        QCOMPARE(inPlace.data(), storage);
        QCOMPARE(applyPublishedUpdateInPlace(drifted, diloco::Codec::Int8, payload, sha).error().code,
            std::string("checksum_mismatch"));
    }

    // A sparse project: the layout comes from the join reply's manifest and
    // settings; its update is applied to the bit and checked by SHA-256.
    void publishedSparseUpdateIsAppliedExactly()
    {
        net::JoinReply join;
        join.codec = "sparse";
        join.manifest = {{"a", {3, 100}}, {"b", {70}}};
        QCOMPARE(sparseLayoutOf(join).error().code, std::string("bad_codec"));
        join.sparse = net::SparseSettings{64, 4, 0.9};
        auto layout = sparseLayoutOf(join);
        QVERIFY(layout);
        QCOMPARE(layout->elements(), int64_t(370));
        QCOMPARE(layout->chunks(), int64_t(5 + 2));

        std::vector<float> theta(370, 0.5f);
        std::vector<float> u(370, 0.0f);
        for (std::size_t i = 0; i < u.size(); i += 7)
            u[i] = 1e-3f * float(i % 13) - 5e-3f;
        const std::string payload = diloco::encodeSparseUpdate(*layout, u.data());
        std::vector<float> expected = theta;
        QVERIFY(diloco::applySparseUpdate(*layout, payload, expected.data()));
        const std::string sha = floatsSha256(expected);
        auto next = applyPublishedUpdate(theta, diloco::Codec::Sparse, payload, sha, &*layout);
        QVERIFY(next);
        QCOMPARE(*next, expected);
        QVERIFY(*next != theta);
        QCOMPARE(
            applyPublishedUpdate(theta, diloco::Codec::Sparse, payload, sha).error().code, std::string("bad_codec"));
        QCOMPARE(
            applyPublishedUpdate(theta, diloco::Codec::Sparse, payload.substr(0, payload.size() - 1), sha, &*layout)
                .error()
                .code,
            std::string("bad_size"));
    }

    void backoffDoublesAndResets()
    {
        ReconnectBackoff backoff;
        std::vector<uint64_t> delays;
        for (int i = 0; i < 8; ++i)
            delays.push_back(backoff.nextDelayMs());
        QCOMPARE(delays, (std::vector<uint64_t>{1000, 2000, 4000, 8000, 16000, 32000, 32000, 32000}));
        QCOMPARE(backoff.attempts(), uint64_t(8));
        backoff.reset();
        QCOMPARE(backoff.nextDelayMs(), net::kReconnectInitialMs);

        Liveness liveness(3);
        QVERIFY(!liveness.missed());
        QVERIFY(!liveness.missed());
        liveness.answered();
        QVERIFY(!liveness.missed());
        QVERIFY(!liveness.missed());
        QVERIFY(liveness.missed());
    }

    void innerTrainerRunsTasksAndKeepsItsOptimizer()
    {
        QTemporaryDir dir;
        writeCountingShard(dirOf(dir) / "d_train.bin", 4000, 16);
        ShardLibrary library(dirOf(dir));
        engine::GptConfig model{1, 2, 16, 8, 16, 0.0};
        net::InnerSettings inner{3, 2, 8, 1e-2, 1e-3, 2, 0, 0.9, 0.95, 0.1, 1.0};
        const auto manifest = coreservice::InnerTrainer::wireManifestOf(model);
        QVERIFY(!manifest.empty());
        QVERIFY(manifest.front().name.find("wte") != std::string::npos);
        QCOMPARE(manifest.front().shape, (std::vector<uint64_t>{16, 16}));

        coreservice::InnerTrainer trainer(model, inner, "cpu", 1);
        QVERIFY(trainer.sameSettings(model, inner));
        torch::manual_seed(1);
        engine::Gpt reference(model);
        std::vector<float> theta = diloco::flatten(reference);
        QCOMPARE(uint64_t(theta.size()), net::manifestElements(manifest));
        std::atomic<bool> abort{false};
        const std::atomic<bool> noWrapUp{false};
        int reports = 0;
        auto source = RangeBatchSource::create(library, {{"d_train.bin", 0, 3 * 2 * 8 + 1}}, 8, 16, 2, 6);
        QVERIFY(source);
        auto outcome = trainer.run(
            theta, std::move(*source), 3, 0, abort, noWrapUp, [&](const engine::StepReport&) { ++reports; });
        QVERIFY2(outcome, outcome ? "" : outcome.error().message.c_str());
        QCOMPARE(reports, 3);
        QCOMPARE(outcome->steps, uint64_t(3));
        QCOMPARE(outcome->tokens, uint64_t(3 * 2 * 8));
        QCOMPARE(outcome->local.size(), theta.size());
        QVERIFY(outcome->local != theta);
        QVERIFY(std::isfinite(outcome->meanLoss) && outcome->meanLoss > 0);
        QVERIFY(outcome->computeMs > 0);

        // The next task starts from theta again, with the same optimizer.
        source = RangeBatchSource::create(library, {{"d_train.bin", 48, 48 + 3 * 2 * 8 + 1}}, 8, 16, 2, 6);
        auto second = trainer.run(theta, std::move(*source), 3, 0, abort, noWrapUp, {});
        QVERIFY(second);
        QCOMPARE(trainer.innerStepsTaken(), int64_t(6));

        // The round wrapping up: one step is always trained, then the task ends.
        const std::atomic<bool> wrapUp{true};
        source = RangeBatchSource::create(library, {{"d_train.bin", 0, 49}}, 8, 16, 2, 6);
        auto cut = trainer.run(theta, std::move(*source), 3, 0, abort, wrapUp, {});
        QVERIFY(cut);
        QCOMPARE(cut->steps, uint64_t(1));
        QCOMPARE(cut->tokens, uint64_t(2 * 8));
        QVERIFY(cut->local != theta);

        abort = true;
        source = RangeBatchSource::create(library, {{"d_train.bin", 0, 49}}, 8, 16, 2, 6);
        QCOMPARE(
            trainer.run(theta, std::move(*source), 3, 0, abort, noWrapUp, {}).error().code, std::string("cancelled"));
        QCOMPARE(trainer.run(theta, nullptr, 3, 0, abort, noWrapUp, {}).error().code, std::string("bad_options"));
        abort = false;
        source = RangeBatchSource::create(library, {{"d_train.bin", 0, 49}}, 8, 16, 2, 6);
        QCOMPARE(trainer.run(std::vector<float>(3), std::move(*source), 3, 0, abort, noWrapUp, {}).error().code,
            std::string("bad_size"));
    }

    void innerRateFollowsTheProjectSchedule()
    {
        net::InnerSettings inner;
        inner.steps = 100;
        inner.learningRate = 1e-3;
        inner.minLr = 1e-4;
        inner.warmupIters = 10;
        // No horizon: warmup over this volunteer's own steps, then constant,
        // however old the project is.
        QCOMPARE(coreservice::InnerTrainer::learningRate(inner, 0, 5000), 1e-3 / 11);
        QCOMPARE(coreservice::InnerTrainer::learningRate(inner, 9, 0), 1e-3 * 10 / 11);
        QCOMPARE(coreservice::InnerTrainer::learningRate(inner, 10, 0), 1e-3);
        QCOMPARE(coreservice::InnerTrainer::learningRate(inner, 500, 1'000'000), 1e-3);
        // A horizon: the cosine of the global step (version * H + i), the
        // same for every volunteer in a round; the warmup still caps it.
        inner.lrDecayIters = 2000;
        QCOMPARE(coreservice::InnerTrainer::learningRate(inner, 500, 0), 1e-3);
        QVERIFY(qAbs(coreservice::InnerTrainer::learningRate(inner, 500, 1000) - 5.5e-4) < 1e-12);
        QCOMPARE(coreservice::InnerTrainer::learningRate(inner, 500, 2000), 1e-4);
        QCOMPARE(coreservice::InnerTrainer::learningRate(inner, 500, 9000), 1e-4);
        QCOMPARE(
            coreservice::InnerTrainer::learningRate(inner, 0, 1990), 1e-3 / 11); // a new volunteer late in the project
        QVERIFY(coreservice::InnerTrainer::learningRate(inner, 5, 1990) > 1e-4); // the floor, not the ramp
    }

    void connectionCountsBytes()
    {
        zmq::context_t context(1);
        auto zap = net::ZapAuthenticator::start(context);
        QVERIFY(zap);
        const net::CurveKeyPair serverKeys = freshKeys();
        HeartbeatServer server(context, serverKeys);
        Traffic traffic;
        net::ClientOptions options{server.endpoint, serverKeys.publicKey, freshKeys()};
        auto connection = Connection::open(context, options, traffic, nullptr);
        QVERIFY(connection);
        for (int i = 0; i < 3; ++i) {
            auto reply = (*connection)
                             ->call<net::HeartbeatReply>(
                                 net::HeartbeatRequest{"tiny", "session-" + std::to_string(i), uint64_t(i)}, 5000);
            QVERIFY2(reply, reply ? "" : reply.error().message.c_str());
            QCOMPARE(reply->version, uint64_t(7));
        }
        QCOMPARE(traffic.requests, uint64_t(3));
        QCOMPARE(traffic.bytesSent, server.requestBytes.load());
        QCOMPARE(traffic.bytesReceived, server.replyBytes.load());
        QVERIFY(traffic.bytesSent > 0 && traffic.bytesReceived > 0);
        connection->reset();
    }

    void connectionErrorsAreClassified()
    {
        QVERIFY(isConnectionError(Error::make("timeout", "")));
        QVERIFY(isConnectionError(Error::make("zmq_error", "")));
        QVERIFY(!isConnectionError(Error::make("stale_version", "")));
        QVERIFY(!isConnectionError(Error::make("not_joined", "")));
    }

    void summaryJson()
    {
        AgentSummary summary;
        summary.tasks = 3;
        summary.accepted = 2;
        summary.rejected = 1;
        summary.tokens = 4096;
        summary.computeMs = 1500;
        summary.wallMs = 3000;
        summary.bytesSent = 10;
        summary.bytesReceived = 20;
        summary.version = 4;
        summary.unconfirmed = 1;
        summary.memoryPlan = "8-bit AdamW moments (10 B a parameter): the fp32 state does not fit";
        const auto json = nlohmann::json::parse(summary.toJson());
        QCOMPARE(json["memory_plan"].get<std::string>(), summary.memoryPlan);
        for (const char* key : {"tasks", "accepted", "rejected", "dropped", "unconfirmed", "tokens", "compute_s",
                 "wall_s", "bytes_sent", "bytes_received", "version"})
            QVERIFY2(json.contains(key), key);
        QCOMPARE(json["unconfirmed"].get<int>(), 1);
        QCOMPARE(json["tasks"].get<int>(), 3);
        QCOMPARE(json["compute_s"].get<double>(), 1.5);
        QCOMPARE(json["wall_s"].get<double>(), 3.0);
        QCOMPARE(summary.utilisation(), 0.5);
    }

    void agentStopsOnBadSetUp()
    {
        QTemporaryDir dir;
        AgentOptions options;
        options.endpoint = "tcp://127.0.0.1:1";
        options.serverKey = "not-a-key";
        options.project = "tiny";
        options.dataDir = dirOf(dir) / "state";
        options.preparedDataDir = dirOf(dir);
        VolunteerAgent agent(options);
        const Status ran = agent.run();
        QVERIFY(!ran);
        QCOMPARE(ran.error().code, std::string("bad_server_key"));
        // The identity was created on the way.
        QVERIFY(std::filesystem::exists(dirOf(dir) / "state" / "identity.key"));

        options.serverKey = freshKeys().publicKey;
        options.preparedDataDir = dirOf(dir) / "no-such-folder";
        VolunteerAgent second(options);
        QCOMPARE(second.run().error().code, std::string("missing_shard"));
    }

    void agentRetriesAnAbsentServerUntilStopped()
    {
        QTemporaryDir dir;
        AgentOptions options;
        options.endpoint = "tcp://127.0.0.1:9"; // nothing listens
        options.serverKey = freshKeys().publicKey;
        options.project = "tiny";
        options.dataDir = dirOf(dir);
        options.preparedDataDir = dirOf(dir);
        std::vector<std::string> lines;
        std::mutex linesMutex;
        options.log = [&](const std::string& line) {
            std::lock_guard lock(linesMutex);
            lines.push_back(line);
        };
        VolunteerAgent agent(options);
        Status ran = Status::success();
        std::thread runner([&] { ran = agent.run(); });
        // Until a join has failed and the agent says it will try again.
        const auto retried = [&] {
            std::lock_guard lock(linesMutex);
            return std::any_of(lines.begin(), lines.end(),
                [](const std::string& line) { return line.find("retrying") != std::string::npos; });
        };
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        while (!retried() && std::chrono::steady_clock::now() < until)
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        // A second agent on the same project folder (a `join` beside the
        // service) is refused while the first runs, and leaves it as it was.
        VolunteerAgent second(options);
        const Status refused = second.run();
        const std::filesystem::path folder = dirOf(dir) / "projects" / "tiny";
        QVERIFY(!refused);
        QCOMPARE(refused.error().code, std::string("folder_in_use"));
        QVERIFY2(refused.error().message.find("pid " + std::to_string(::getpid())) != std::string::npos,
            refused.error().message.c_str());
        QVERIFY(!core::FolderLock::acquire(folder));
        agent.stop();
        runner.join();
        QVERIFY2(retried(), "no join failed and was retried within 60 s");
        QVERIFY(ran);
        // The log names the volunteer as the leaderboard does, never by its
        // raw Z85 key (which means nothing to a person).
        auto identity = net::loadOrCreateKeyPair(identityKeyFile(dirOf(dir)));
        QVERIFY(identity);
        const std::string named = "joining as anonymous volunteer " + net::anonymousTag(identity->publicKey);
        for (const std::string& line : lines)
            QVERIFY2(line.find(identity->publicKey) == std::string::npos, line.c_str());
        QVERIFY(std::any_of(lines.begin(), lines.end(),
            [&](const std::string& line) { return line.find(named) != std::string::npos; }));
        QCOMPARE(volunteerWords("Ada", identity->publicKey), std::string("Ada"));
        QVERIFY(core::FolderLock::acquire(folder)); // released with the agent
        const AgentSummary summary = agent.summary();
        QCOMPARE(summary.tasks, uint64_t(0));
        QVERIFY(summary.bytesSent > 0); // join requests went out
        QCOMPARE(summary.bytesReceived, uint64_t(0));
    }
};

QTEST_GUILESS_MAIN(TestVolunteer)
#include "tst_volunteer.moc"
