// Chunked, resumable, verified downloads: over real Curve sockets on
// 127.0.0.1, after a SIGKILL mid-download, with corrupted chunks and with a
// wrong whole-file hash.
#include "core/file_io.h"
#include "net/transfer/download.h"
#include "net/transfer/resource_table.h"
#include "net/transfer/sha256.h"
#include "net/transfer/socket_source.h"
#include "net/transport/zap_authenticator.h"
#include "transfer_server.h"

#include <QTemporaryDir>
#include <QTest>

#include <csignal>
#include <fcntl.h>
#include <fstream>
#include <mutex>
#include <random>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace crowdtrain;
using namespace crowdtrain::net;
using crowdtrain::testing::TransferServer;

namespace {

constexpr uint64_t kChunk = 64 * 1024;
const std::string kProject = "tiny";

std::string randomBytes(std::size_t size, uint64_t seed)
{
    std::mt19937_64 random(seed);
    std::string bytes(size, '\0');
    for (char& c : bytes)
        c = static_cast<char>(random());
    return bytes;
}

std::string readAll(const std::filesystem::path& file)
{
    std::ifstream in(file, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

CurveKeyPair freshKeys()
{
    auto keys = generateKeyPair();
    if (!keys)
        qFatal("%s", keys.error().message.c_str());
    return *keys;
}

// Reads straight from a table, with hooks to break things.
class TableSource : public ResourceSource {
public:
    explicit TableSource(const ResourceTable& table)
        : m_table(table)
    { }
    Result<ResourceDescription> describe(const std::string& resource) override
    {
        auto description = m_table.describe(resource);
        if (description && editDescription)
            editDescription(*description);
        return description;
    }
    Result<std::string> fetch(const std::string& resource, uint64_t index) override
    {
        ++fetches;
        if (failFrom && index >= *failFrom)
            return Error::make("not_found", "gone");
        if (beforeFetch)
            beforeFetch(index);
        auto chunk = m_table.chunk(resource, index);
        if (!chunk)
            return chunk.error();
        if (corrupt && corrupt(index))
            chunk->data[chunk->data.size() / 2] ^= 0x40;
        return std::move(chunk->data);
    }

    std::function<void(ResourceDescription&)> editDescription;
    std::function<void(uint64_t index)> beforeFetch;
    std::function<bool(uint64_t index)> corrupt;
    std::optional<uint64_t> failFrom; // "not_found" from this chunk on: an interruption
    int fetches = 0;

private:
    const ResourceTable& m_table;
};

// Wraps another source and corrupts chosen chunks as they pass.
class CorruptingSource : public ResourceSource {
public:
    CorruptingSource(ResourceSource& inner, std::function<bool(uint64_t)> corrupt)
        : m_inner(inner)
        , m_corrupt(std::move(corrupt))
    { }
    Result<ResourceDescription> describe(const std::string& resource) override { return m_inner.describe(resource); }
    Result<std::string> fetch(const std::string& resource, uint64_t index) override
    {
        auto data = m_inner.fetch(resource, index);
        if (data && m_corrupt(index))
            (*data)[0] ^= 0x01;
        return data;
    }

private:
    ResourceSource& m_inner;
    std::function<bool(uint64_t)> m_corrupt;
};

struct Fixture {
    QTemporaryDir dir;
    std::filesystem::path root{dir.path().toStdString()};
    std::string content = randomBytes(5 * kChunk + 1234, 7); // 6 chunks, the last one short
    ResourceTable table;

    Fixture()
    {
        std::ofstream(root / "state.bin", std::ios::binary) << content;
        if (Status added = table.addFile("state/3", root / "state.bin", kChunk); !added)
            qFatal("%s", added.error().message.c_str());
    }
    std::filesystem::path target() const { return root / "download" / "state.bin"; }
};

} // namespace

class TestTransfer : public QObject {
    Q_OBJECT

private slots:
    void sha256()
    {
        QCOMPARE(sha256Hex("abc"), std::string("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
        QCOMPARE(sha256Hex(""), std::string("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
        Sha256 hasher;
        hasher.update("a");
        hasher.update("bc");
        QCOMPARE(hasher.finishHex(), sha256Hex("abc"));
        QCOMPARE(hasher.finishHex(), sha256Hex("")); // starts over
    }

    // The read and write loops every layer shares (core/file_io.h): whole
    // writes at an offset, reads that come up short only where the file
    // ends, a file walked in slices, and the lock a daemon takes on a file.
    void fileHelpersAtOffsets()
    {
        QTemporaryDir dir;
        const std::filesystem::path folder = dir.path().toStdString();
        const std::filesystem::path file = folder / "part";
        const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        QVERIFY(fd >= 0);
        const std::string bytes = randomBytes(3 * kChunk + 5, 7);
        const std::string_view view(bytes);
        QVERIFY(core::writeAt(fd, kChunk, view.substr(kChunk), file));
        QVERIFY(core::writeAt(fd, 0, view.substr(0, kChunk), file));
        auto middle = core::readAt(fd, kChunk, kChunk, file);
        QVERIFY(middle);
        QVERIFY(*middle == view.substr(kChunk, kChunk));
        auto tail = core::readAt(fd, 3 * kChunk, kChunk, file); // 5 bytes left
        QVERIFY(tail);
        QVERIFY(*tail == view.substr(3 * kChunk));
        ::close(fd);
        auto unopened = core::readAt(-1, 0, 1, file);
        QVERIFY(!unopened);
        QCOMPARE(unopened.error().code, std::string("io_error"));
        QVERIFY2(unopened.error().message.find(file.string()) != std::string::npos, unopened.error().message.c_str());
        QCOMPARE(core::writeAt(-1, 0, "x", file).error().code, std::string("io_error"));

        std::string walked;
        int slices = 0;
        const auto collect = [&](std::string_view slice) {
            walked.append(slice);
            ++slices;
            return Status::success();
        };
        QVERIFY(core::forEachSlice(file, collect, kChunk));
        QVERIFY(walked == bytes);
        QCOMPARE(slices, 4);
        const Status stopped = core::forEachSlice(
            file, [](std::string_view) -> Status { return Error::make("stop", "enough"); }, kChunk);
        QCOMPARE(stopped.error().code, std::string("stop"));
        QCOMPARE(core::forEachSlice(folder, collect).error().code, std::string("io_error")); // a folder
        QCOMPARE(core::forEachSlice(folder / "absent", collect).error().code, std::string("not_found"));

        // One holder at a time; the second is told who holds it.
        const std::filesystem::path lockFile = folder / "daemon.lock";
        auto lock = core::FolderLock::acquireFile(lockFile, 0600);
        QVERIFY(lock);
        QCOMPARE(int(std::filesystem::status(lockFile).permissions() & std::filesystem::perms::group_all), 0);
        auto second = core::FolderLock::acquireFile(lockFile, 0600);
        QVERIFY(!second);
        QCOMPARE(second.error().code, std::string("folder_in_use"));
        QCOMPARE(core::FolderLock::holderOf(lockFile), std::to_string(::getpid()));
        QCOMPARE(core::FolderLock::holderOf(folder / "no-lock"), std::string("?"));
        lock = Error::make("released", "");
        QVERIFY(core::FolderLock::acquireFile(lockFile, 0600));
    }

    void resourceTable()
    {
        Fixture f;
        auto description = f.table.describe("state/3");
        QVERIFY(description.ok());
        QCOMPARE(description->bytes, uint64_t(f.content.size()));
        QCOMPARE(description->chunkCount, uint64_t(6));
        QCOMPARE(description->sha256, sha256Hex(f.content));
        QCOMPARE(description->chunkSha256[5], sha256Hex(f.content.substr(5 * kChunk)));
        auto last = f.table.chunk("state/3", 5);
        QVERIFY(last.ok());
        QCOMPARE(last->data, f.content.substr(5 * kChunk));
        QCOMPARE(f.table.chunk("state/3", 6).error().code, std::string("bad_index"));
        QCOMPARE(f.table.chunk("state/4", 0).error().code, std::string("not_found"));
        QCOMPARE(f.table.addBlob("state/3", "x").error().code, std::string("exists"));
        QCOMPARE(f.table.addBlob("big", "x", kMaxChunkBytes + 1).error().code, std::string("invalid_argument"));
        QVERIFY(f.table.addBlob("empty", "").ok());
        QCOMPARE(f.table.describe("empty")->chunkCount, uint64_t(0));
        // A published file that changes on disk is not served as the old one.
        std::string changed = f.content;
        changed[10] ^= 1;
        std::ofstream(f.root / "state.bin", std::ios::binary) << changed;
        QCOMPARE(f.table.chunk("state/3", 0).error().code, std::string("io_error"));
        QVERIFY(f.table.chunk("state/3", 1).ok());
    }

    void downloadOverCurveSockets()
    {
        Fixture f;
        zmq::context_t context;
        auto zap = ZapAuthenticator::start(context);
        QVERIFY(zap.ok());
        const CurveKeyPair server = freshKeys();
        TransferServer transfer(context, server, f.table);
        auto client = Client::connect(context, {transfer.endpoint, server.publicKey, freshKeys()});
        QVERIFY(client.ok());
        std::filesystem::create_directories(f.target().parent_path());
        std::vector<uint64_t> progress;
        DownloadOptions options;
        options.progress = [&](uint64_t done, uint64_t) { progress.push_back(done); };
        auto report = downloadResource(**client, kProject, "state/3", f.target(), options);
        if (!report)
            QFAIL(report.error().message.c_str());
        QCOMPARE(readAll(f.target()), f.content);
        QCOMPARE(report->fetchedChunks, uint64_t(6));
        QCOMPARE(transfer.fetched(), (std::vector<uint64_t>{0, 1, 2, 3, 4, 5}));
        QCOMPARE(progress.back(), uint64_t(f.content.size()));
        QVERIFY(!std::filesystem::exists(Download::partPath(f.target())));
        QVERIFY(!std::filesystem::exists(Download::progressPath(f.target())));
        // Already there: nothing is fetched again.
        auto again = downloadResource(**client, kProject, "state/3", f.target());
        QVERIFY(again.ok());
        QVERIFY(again->alreadyComplete);
        QCOMPARE(transfer.fetched().size(), std::size_t(6));
        // An unknown resource is the server's "not_found".
        auto missing = downloadResource(**client, kProject, "state/99", f.root / "download" / "x");
        QCOMPARE(missing.error().code, std::string("not_found"));
    }

    void resumesAfterKill()
    {
        Fixture f;
        std::filesystem::create_directories(f.target().parent_path());
        // A child process downloads and is killed (SIGKILL) when it asks for
        // chunk 3: chunks 0..2 are verified and on disk, nothing else is.
        const pid_t child = ::fork();
        QVERIFY(child >= 0);
        if (child == 0) {
            TableSource source(f.table);
            source.beforeFetch = [](uint64_t index) {
                if (index == 3)
                    ::kill(::getpid(), SIGKILL);
            };
            (void)Download(source, "state/3", f.target()).run();
            ::_exit(0);
        }
        int status = 0;
        QCOMPARE(::waitpid(child, &status, 0), child);
        QVERIFY(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        QVERIFY(std::filesystem::exists(Download::partPath(f.target())));
        QVERIFY(!std::filesystem::exists(f.target()));

        zmq::context_t context;
        auto zap = ZapAuthenticator::start(context);
        QVERIFY(zap.ok());
        const CurveKeyPair server = freshKeys();
        TransferServer transfer(context, server, f.table);
        auto client = Client::connect(context, {transfer.endpoint, server.publicKey, freshKeys()});
        QVERIFY(client.ok());
        auto report = downloadResource(**client, kProject, "state/3", f.target());
        if (!report)
            QFAIL(report.error().message.c_str());
        QCOMPARE(report->resumedChunks, uint64_t(3));
        QCOMPARE(transfer.fetched(), (std::vector<uint64_t>{3, 4, 5}));
        QCOMPARE(readAll(f.target()), f.content);
    }

    void damagedPartFileIsRefetchedFromTheDamage()
    {
        Fixture f;
        std::filesystem::create_directories(f.target().parent_path());
        TableSource interrupted(f.table);
        interrupted.failFrom = 4;
        QVERIFY(!Download(interrupted, "state/3", f.target()).run().ok());
        // Chunk 1 of the .part file rots on disk.
        {
            std::fstream part(Download::partPath(f.target()), std::ios::in | std::ios::out | std::ios::binary);
            part.seekp(kChunk + 5);
            part.put('\x55');
        }
        TableSource source(f.table);
        std::vector<uint64_t> asked;
        source.beforeFetch = [&](uint64_t index) { asked.push_back(index); };
        auto report = Download(source, "state/3", f.target()).run();
        QVERIFY(report.ok());
        QCOMPARE(report->resumedChunks, uint64_t(1));
        QCOMPARE(asked, (std::vector<uint64_t>{1, 2, 3, 4, 5}));
        QCOMPARE(readAll(f.target()), f.content);
    }

    void corruptedChunkIsRefetched()
    {
        Fixture f;
        zmq::context_t context;
        auto zap = ZapAuthenticator::start(context);
        QVERIFY(zap.ok());
        const CurveKeyPair server = freshKeys();
        TransferServer transfer(context, server, f.table);
        auto client = Client::connect(context, {transfer.endpoint, server.publicKey, freshKeys()});
        QVERIFY(client.ok());
        std::filesystem::create_directories(f.target().parent_path());
        SocketSource wire(**client, kProject);
        int corrupted = 0;
        CorruptingSource source(wire, [&](uint64_t index) { return index == 2 && corrupted++ == 0; });
        auto report = Download(source, "state/3", f.target()).run();
        if (!report)
            QFAIL(report.error().message.c_str());
        QCOMPARE(report->rejectedChunks, uint64_t(1));
        QCOMPARE(transfer.fetched(), (std::vector<uint64_t>{0, 1, 2, 2, 3, 4, 5}));
        QCOMPARE(readAll(f.target()), f.content);
    }

    void chunkThatStaysCorruptIsAnError()
    {
        Fixture f;
        std::filesystem::create_directories(f.target().parent_path());
        TableSource source(f.table);
        source.corrupt = [](uint64_t index) { return index == 2; };
        DownloadOptions options;
        options.attemptsPerChunk = 3;
        auto report = Download(source, "state/3", f.target(), options).run();
        QVERIFY(!report.ok());
        QCOMPARE(report.error().code, std::string("checksum_mismatch"));
        QVERIFY2(QString::fromStdString(report.error().message).contains(QStringLiteral("chunk 2 of state/3")),
            report.error().message.c_str());
        QCOMPARE(source.fetches, 2 + 3);
        QVERIFY(!std::filesystem::exists(f.target()));
        // The bad bytes were never written: the .part file holds chunks 0 and 1 only.
        QCOMPARE(readAll(Download::partPath(f.target())), f.content.substr(0, 2 * kChunk));
    }

    void wholeHashMismatchSavesNothing()
    {
        Fixture f;
        std::filesystem::create_directories(f.target().parent_path());
        TableSource source(f.table);
        source.editDescription = [](ResourceDescription& d) { d.sha256 = sha256Hex("something else"); };
        auto report = Download(source, "state/3", f.target()).run();
        QVERIFY(!report.ok());
        QCOMPARE(report.error().code, std::string("checksum_mismatch"));
        QVERIFY(!std::filesystem::exists(f.target()));
        QVERIFY(!std::filesystem::exists(Download::partPath(f.target())));
        QVERIFY(!std::filesystem::exists(Download::progressPath(f.target())));
    }

    void changedResourceStartsOver()
    {
        Fixture f;
        std::filesystem::create_directories(f.target().parent_path());
        TableSource first(f.table);
        first.failFrom = 2;
        QVERIFY(!Download(first, "state/3", f.target()).run().ok());
        // Another resource now lands on the same target: nothing of the old
        // .part may be reused.
        ResourceTable other;
        const std::string content = randomBytes(3 * kChunk, 8);
        QVERIFY(other.addBlob("state/3", content, kChunk).ok());
        TableSource second(other);
        auto report = Download(second, "state/3", f.target()).run();
        QVERIFY(report.ok());
        QCOMPARE(report->resumedChunks, uint64_t(0));
        QCOMPARE(readAll(f.target()), content);
    }

    void cancel()
    {
        Fixture f;
        std::filesystem::create_directories(f.target().parent_path());
        TableSource source(f.table);
        std::atomic<bool> cancelled{false};
        source.beforeFetch = [&](uint64_t index) { cancelled = index == 1; };
        DownloadOptions options;
        options.cancel = &cancelled;
        auto report = Download(source, "state/3", f.target(), options).run();
        QCOMPARE(report.error().code, std::string("cancelled"));
        QCOMPARE(source.fetches, 2);
    }
};

QTEST_GUILESS_MAIN(TestTransfer)
#include "tst_transfer.moc"
