// The control API's folder (net/control/control_paths.h) and the socket
// files a ControlServer makes in it, on real ipc:// sockets in a temporary
// folder: where it is, that it is private (0700, ours, not a link), that a
// crashed daemon's files are replaced and a second daemon does not take
// them over. Requests and events are tst_control_api's.
#include "control_server_fixtures.h"
#include "net/control/control_client.h"
#include "net/control/control_paths.h"
#include "net/control/control_server.h"
#include "net/control/event_subscriber.h"

#include <QTemporaryDir>
#include <QTest>

#include <fstream>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

using namespace crowdtrain;
using namespace crowdtrain::control;
using crowdtrain::testing::connectClient;
using crowdtrain::testing::demoHandler;
using crowdtrain::testing::ServerThread;
namespace fs = std::filesystem;

namespace {

mode_t modeOf(const fs::path& path)
{
    struct stat info { };
    if (::lstat(path.c_str(), &info) != 0)
        return 0;
    return info.st_mode & 07777;
}

// A socket file with nothing listening: what a crashed daemon leaves.
void makeStaleSocket(const fs::path& path)
{
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::snprintf(address.sun_path, sizeof address.sun_path, "%s", path.c_str());
    if (fd < 0 || ::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0)
        qFatal("cannot make a stale socket at %s", path.c_str());
    ::close(fd);
}

} // namespace

class TestControlDir : public QObject {
    Q_OBJECT

private:
    crowdtrain::testing::FreshDirs m_dirs; // a fresh control folder path for each test

private slots:
    void initTestCase() { QVERIFY(m_dirs.valid()); }

    // ---- The control folder -----------------------------------------------

    void defaultDir()
    {
        const QByteArray saved = qgetenv("XDG_RUNTIME_DIR");
        const bool wasSet = qEnvironmentVariableIsSet("XDG_RUNTIME_DIR");
        qputenv("XDG_RUNTIME_DIR", "/run/user/4242");
        QCOMPARE(defaultControlDir()->string(), std::string("/run/user/4242/crowdtrain"));
        qputenv("XDG_RUNTIME_DIR", "relative/dir");
        QCOMPARE(defaultControlDir().error().code, std::string("no_runtime_dir"));
        qunsetenv("XDG_RUNTIME_DIR");
        QCOMPARE(defaultControlDir()->string(), "/tmp/crowdtrain-" + std::to_string(geteuid()));
        if (wasSet)
            qputenv("XDG_RUNTIME_DIR", saved);
        const fs::path dir = "/some/dir";
        QCOMPARE(controlEndpoint(dir), std::string("ipc:///some/dir/control"));
        QCOMPARE(eventsEndpoint(dir), std::string("ipc:///some/dir/events"));
    }

    void prepareCreatesPrivateDir()
    {
        const fs::path dir = m_dirs.next();
        const mode_t oldMask = ::umask(0); // even a permissive umask gives 0700
        const Status prepared = preparePrivateDir(dir);
        ::umask(oldMask);
        QVERIFY2(prepared.ok(), prepared.ok() ? "" : prepared.error().message.c_str());
        QCOMPARE(int(modeOf(dir)), 0700);
        QVERIFY(preparePrivateDir(dir).ok()); // an existing private folder is fine
        // The parent must exist.
        QCOMPARE(preparePrivateDir(dir / "a" / "b").error().code, std::string("io_error"));
    }

    void prepareRefusesInsecureDirs()
    {
        // Group/other bits: refused, and left as they are.
        const fs::path open = m_dirs.next();
        QCOMPARE(::mkdir(open.c_str(), 0700), 0);
        QCOMPARE(::chmod(open.c_str(), 0755), 0);
        Status status = preparePrivateDir(open);
        QCOMPARE(status.error().code, std::string("insecure_control_dir"));
        QVERIFY(status.error().message.find(open.string()) != std::string::npos);
        QVERIFY(status.error().message.find("0755") != std::string::npos);
        QCOMPARE(int(modeOf(open)), 0755);
        QCOMPARE(checkPrivateDir(open).error().code, std::string("insecure_control_dir"));

        // A symbolic link, even to a private folder.
        const fs::path target = m_dirs.next();
        QVERIFY(preparePrivateDir(target).ok());
        const fs::path link = m_dirs.next();
        fs::create_directory_symlink(target, link);
        status = preparePrivateDir(link);
        QCOMPARE(status.error().code, std::string("insecure_control_dir"));
        QVERIFY(status.error().message.find("symbolic link") != std::string::npos);
        QCOMPARE(checkPrivateDir(link).error().code, std::string("insecure_control_dir"));

        // Not a folder.
        const fs::path file = m_dirs.next();
        std::ofstream(file) << "x";
        QCOMPARE(preparePrivateDir(file).error().code, std::string("insecure_control_dir"));
    }

    void prepareRefusesAnotherUsersDir()
    {
        if (geteuid() != 0)
            QSKIP("only root can give a folder to another user");
        const fs::path dir = m_dirs.next();
        QCOMPARE(::mkdir(dir.c_str(), 0700), 0);
        QCOMPARE(::chown(dir.c_str(), 65534, 65534), 0); // nobody
        const Status status = preparePrivateDir(dir);
        QCOMPARE(status.error().code, std::string("insecure_control_dir"));
        QVERIFY(status.error().message.find("uid 65534") != std::string::npos);
        QCOMPARE(checkPrivateDir(dir).error().code, std::string("insecure_control_dir"));
    }

    void checkReportsNoDaemon()
    {
        const fs::path dir = m_dirs.next();
        QCOMPARE(checkPrivateDir(dir).error().code, std::string("no_daemon"));
        QCOMPARE(ControlClient::connect(dir).error().code, std::string("no_daemon"));
        QCOMPARE(EventSubscriber::connect(dir).error().code, std::string("no_daemon"));
        QVERIFY(preparePrivateDir(dir).ok());
        QCOMPARE(checkPrivateDir(dir).error().code, std::string("no_daemon")); // no socket file
        {
            ServerThread server(dir);
            QVERIFY(checkPrivateDir(dir).ok());
        }
        QCOMPARE(checkPrivateDir(dir).error().code, std::string("no_daemon")); // removed on exit
    }

    // ---- The server ---------------------------------------------------------

    void serverSocketFiles()
    {
        const fs::path dir = m_dirs.next();
        {
            auto server = ControlServer::open(dir, demoHandler);
            QVERIFY(server.ok());
            QCOMPARE((*server)->dir(), dir);
            QCOMPARE(int(modeOf(dir)), 0700);
            QCOMPARE(int(modeOf(dir / "control")), 0600);
            QCOMPARE(int(modeOf(dir / "events")), 0600);
            // A second server on the same folder does not take it over.
            auto second = ControlServer::open(dir, demoHandler);
            QVERIFY(!second.ok());
            QCOMPARE(second.error().code, std::string("bind_failed"));
            QVERIFY(fs::exists(dir / "control"));
        }
        QVERIFY(!fs::exists(dir / "control"));
        QVERIFY(!fs::exists(dir / "events"));

        // Files left by a daemon that crashed are replaced.
        makeStaleSocket(dir / "control");
        makeStaleSocket(dir / "events");
        ServerThread server(dir);
        auto client = connectClient(dir);
        QVERIFY(client->call("echo").ok());

        // An insecure folder is refused before anything is bound.
        const fs::path open = m_dirs.next();
        QCOMPARE(::mkdir(open.c_str(), 0777), 0);
        QCOMPARE(::chmod(open.c_str(), 0777), 0);
        QCOMPARE(ControlServer::open(open, demoHandler).error().code, std::string("insecure_control_dir"));
        QVERIFY(!fs::exists(open / "control"));
    }
};

QTEST_GUILESS_MAIN(TestControlDir)
#include "tst_control_dir.moc"
