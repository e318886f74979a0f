// The daemon's edges (issue 24), against a real crowdtrain-worker run
// process, a real coordinator on loopback and the control API: names and
// types checked at the edge, with decoy folders outside the data folder
// that must survive every path-like name; folders and state files on disk
// the daemon did not write (skipped, or set aside with a notice); replies
// out of order while a hub call is slow; "busy" told from "no daemon" and
// the command line's mistakes; a download that names the demo hub resumes
// against the hub as it is now. And status answered while a part of the
// daemon is stuck (in-process: a /proc scan that hangs, a swarm session
// that takes its time to start).

// libtorch's headers before Qt's: Qt's `slots` macro breaks them.
#include "net/daemon/checkpoint_swarm.h"
#include "net/daemon/checkpoints.h"
#include "net/daemon/daemon.h"
#include "net/daemon/hub_link.h"

#include "daemon_process.h"

#include "core/clock.h"
#include "net/control/control_envelope.h"
#include "net/control/control_paths.h"
#include "net/control/event_subscriber.h"
#include "net/transport/curve_keys.h"

#include <QScopeGuard>
#include <QTemporaryDir>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.hpp>

#include <future>
#include <mutex>

using namespace crowdtrain;
using namespace crowdtrain::testing;
using control::Value;

namespace {

Value bodyWith(const std::string& key, Value value)
{
    Value body = Value::map();
    body.set(key, std::move(value));
    return body;
}

// A file that must still be there, unchanged, at the end.
struct Decoy {
    std::filesystem::path folder; // .../round-20
    void plant() const
    {
        std::filesystem::create_directories(folder);
        std::ofstream(folder / "model.safetensors") << "decoy";
    }
    bool intact() const
    {
        std::ifstream file(folder / "model.safetensors");
        std::string text;
        std::getline(file, text);
        return text == "decoy";
    }
};

// A TCP listener that never accepts: a hub that never answers.
class SilentHub {
public:
    SilentHub()
    {
        m_fd = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in address{};
        address.sin_family = AF_INET;
        address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t length = sizeof address;
        if (m_fd < 0 || ::bind(m_fd, reinterpret_cast<sockaddr*>(&address), length) != 0 || ::listen(m_fd, 64) != 0
            || ::getsockname(m_fd, reinterpret_cast<sockaddr*>(&address), &length) != 0)
            qFatal("cannot listen on loopback");
        auto keys = net::generateKeyPair();
        if (!keys)
            qFatal("%s", keys.error().message.c_str());
        daemon::HubLink hub;
        hub.host = "127.0.0.1";
        hub.port = ntohs(address.sin_port);
        hub.publicKey = keys->publicKey;
        link = daemon::formatHubLink(hub);
    }
    ~SilentHub() { ::close(m_fd); }
    std::string link;

private:
    int m_fd = -1;
};

struct CliResult {
    int exitCode = -1;
    QByteArray err;
};

CliResult worker(const Home& h, QStringList arguments)
{
    arguments << QStringLiteral("--control-dir") << QString::fromStdString(h.control().string());
    QProcess cli;
    cli.start(QString::fromStdString(binary("crowdtrain-worker").string()), arguments);
    if (!cli.waitForFinished(60000))
        qFatal("crowdtrain-worker did not finish");
    return {cli.exitStatus() == QProcess::NormalExit ? cli.exitCode() : -1, cli.readAllStandardError()};
}

// Closes a file descriptor when the test ends, however it ends.
struct FdCloser {
    int fd = -1;
    ~FdCloser()
    {
        if (fd >= 0)
            ::close(fd);
    }
};

bool anyNotice(const Value& status, const std::string& text)
{
    for (const Value& n : status["notices"].items())
        if (n.toString().find(text) != std::string::npos)
            return true;
    return false;
}

} // namespace

class TestDaemonEdges : public QObject {
    Q_OBJECT

    QTemporaryDir m_dir;
    ServerProcess m_server;
    std::string m_link;

    std::filesystem::path root() const { return m_dir.path().toStdString(); }
    Home home(const std::string& name) const { return Home{root() / name}; }

private slots:
    void initTestCase()
    {
        QVERIFY(m_dir.isValid());
        const auto data = preparedText(root());
        const auto spec = writeSpec(root() / "hub", data, SpecOptions{.tasksPerRound = 1, .checkpointEvery = 1});
        QVERIFY(m_server.start(spec, root() / "hub/state", 1000));
        daemon::HubLink hub;
        hub.host = "127.0.0.1";
        hub.port = uint16_t(std::stoi(m_server.endpoint.substr(m_server.endpoint.rfind(':') + 1)));
        hub.publicKey = m_server.publicKey;
        m_link = daemon::formatHubLink(hub);
    }

    // Every request that takes a name refuses path-like ones before doing
    // anything, and nothing outside the data folder is touched.
    void pathLikeNamesAreRefused()
    {
        const Home h = home("names");
        const std::vector<Decoy> decoys = {{root() / "decoy" / "round-20"}, {h.data() / "round-20"},
            {h.root / "round-20"}, {h.data() / "checkpoints" / "round-20"}};
        for (const Decoy& d : decoys)
            d.plant();
        // A project folder that is a link to the decoy's folder: a valid
        // name whose path resolves outside the data folder.
        std::filesystem::create_directories(h.data() / "checkpoints");
        std::filesystem::create_directory_symlink(root() / "decoy", h.data() / "checkpoints" / "linked");
        DaemonProcess d;
        d.start(h);
        auto c = connectTo(h, d);
        for (const char* type : {"checkpoint_delete", "download_cancel", "generate"}) {
            Value body = Value::map();
            body.set("project", "linked").set("round", 20).set("prompt", "x");
            const Error e = refusal(*c, type, body);
            QVERIFY2(e.code == "io_error" || e.code == "not_found", (std::string(type) + ": " + e.code).c_str());
        }
        const std::vector<std::string> names
            = {"..", "../..", (root() / "decoy").string(), "/", "", ".", std::string("tiny\0x", 6), "%2e%2e", "..%2f..",
                "a\u2215b", "\u2215", "\uff0f..", "tiny/../..", "Tiny", std::string(65, 'a'), " tiny"};
        for (const std::string& name : names) {
            const std::string shown = control::Value(name).toJson();
            for (const char* type : {"checkpoints", "download", "download_pause", "download_resume", "download_cancel",
                     "checkpoint_delete", "generate"}) {
                Value body = Value::map();
                body.set("project", name).set("round", 20).set("prompt", "x");
                const Error e = refusal(*c, type, body);
                QVERIFY2(e.code == "bad_request", (std::string(type) + " " + shown + ": " + e.code).c_str());
            }
            Value join = Value::map();
            join.set("hub", m_link).set("project", name);
            QCOMPARE(refusal(*c, "join", join).code, std::string("bad_request"));
            join.set("hub", "demo");
            QCOMPARE(refusal(*c, "join", join).code, std::string("bad_request"));
        }
        // Names of the wrong type are errors too, never "the joined project".
        for (const Value& wrong : {Value(5), Value(true), Value(Value::array()), Value(1.5)}) {
            QCOMPARE(refusal(*c, "checkpoints", bodyWith("project", wrong)).code, std::string("bad_request"));
            Value body = bodyWith("project", wrong);
            body.set("round", 20);
            QCOMPARE(refusal(*c, "checkpoint_delete", body).code, std::string("bad_request"));
        }
        // The command line: `join demo /tmp/victim` then `delete 20`.
        const CliResult joined = worker(
            h, {QStringLiteral("join"), QStringLiteral("demo"), QString::fromStdString((root() / "decoy").string())});
        QCOMPARE(joined.exitCode, 2);
        QVERIFY2(joined.err.contains("not a project name"), joined.err.constData());
        const CliResult deleted = worker(h, {QStringLiteral("delete"), QStringLiteral("20")});
        QVERIFY(deleted.exitCode != 0);
        const Value s = call(*c, "status");
        QCOMPARE(s["project"].toString(), std::string());
        for (const Decoy& decoy : decoys)
            QVERIFY2(decoy.intact(), decoy.folder.c_str());
        d.terminate();
    }

    // A field of the wrong type is refused, never read as its default.
    void wronglyTypedFieldsAreRefused()
    {
        const Home h = home("types");
        DaemonProcess d;
        d.start(h);
        auto c = connectTo(h, d);
        struct Case {
            const char* type;
            Value body;
        };
        Value generate = Value::map();
        generate.set("project", "tiny").set("round", 1).set("prompt", "x");
        const std::vector<Case> cases = {
            {"catalog", bodyWith("refresh", "yes")},
            {"catalog", bodyWith("refresh", 1)},
            {"metrics", bodyWith("since_round", -1)},
            {"metrics", bodyWith("since_round", "3")},
            {"snooze", bodyWith("seconds", "60")},
            {"snooze", bodyWith("seconds", 1.5)},
            {"snooze", bodyWith("seconds", 0)},
            {"download", bodyWith("round", "3")},
            {"download", bodyWith("round", -3)},
            {"checkpoint_delete", bodyWith("round", 2.0)},
            {"generate", Value(generate).set("temperature", "hot")},
            {"generate", Value(generate).set("top_k", 1.5)},
            {"generate", Value(generate).set("max_tokens", true)},
            {"generate", Value(generate).set("max_tokens", 5000)},
            {"generate", Value(generate).set("prompt", 5)},
            {"join", Value::map().set("hub", 5).set("project", "tiny")},
            {"follow", bodyWith("link", 7)},
            {"settings_set", Value::map().set("key", 3).set("value", 1)},
        };
        for (const Case& k : cases) {
            const Error e = refusal(*c, k.type, k.body);
            QVERIFY2(e.code == "bad_request", (std::string(k.type) + " " + k.body.toJson() + ": " + e.code).c_str());
        }
        // A GPU number past any machine's.
        Value devices = Value::map();
        devices.set("key", "gpu_devices").set("value", "99999999999999999999");
        QCOMPARE(refusal(*c, "settings_set", devices).code, std::string("bad_value"));
        devices.set("value", "0,1");
        call(*c, "settings_set", devices);
        d.terminate();
    }

    // Folders with names the daemon never writes, and its own files with
    // the wrong types, truncated or garbage: skipped or set aside with a
    // notice, and the daemon runs (joined, polling the hub's checkpoints).
    void unexpectedFilesAreSkippedOrSetAside()
    {
        const Home h = home("files");
        const auto tiny = h.data() / "checkpoints" / "tiny";
        for (const std::string name : {"round-best", "round-", "round-123456789012345678901234", "round-007"}) {
            std::filesystem::create_directories(tiny / name);
            std::ofstream(tiny / name / "model.safetensors") << "not ours";
        }
        std::filesystem::create_directories(h.data() / "checkpoints" / "Not A Project" / "round-1");
        std::filesystem::create_directories(tiny / ".round-5.part");
        std::ofstream(tiny / ".round-5.part" / "job.json") << R"({"hub": 5, "project": "tiny", "round": "5"})";
        std::ofstream(h.data() / "daemon.json")
            << R"({"version": 1, "hubs": [], "joined_hub": 5, "joined_project": "tiny", "paused": "yes", "snooze_until_ms": 0})";
        std::ofstream(h.data() / "data_usage.json") << R"({"month": "2026-11", "bytes": "lots"})";
        DaemonProcess d;
        d.start(h);
        auto c = connectTo(h, d);
        // Listing what is here skips what the daemon did not write.
        const Value listed = call(*c, "checkpoints");
        QCOMPARE(listed["local"].size(), std::size_t(0));
        const Value s = call(*c, "status");
        QCOMPARE(s["project"].toString(), std::string()); // daemon.json was set aside
        QVERIFY2(anyNotice(s, "daemon.json could not be used"), s.toJson().c_str());
        QVERIFY2(anyNotice(s, "data_usage.json could not be used"), s.toJson().c_str());
        QVERIFY2(anyNotice(s, "job.json could not be used"), s.toJson().c_str());
        QVERIFY2(anyNotice(s, "round-best"), s.toJson().c_str());
        for (const std::string name : {"daemon.json", "data_usage.json"}) {
            // (The daemon may have written a good one since.)
            bool aside = false;
            for (const auto& entry : std::filesystem::directory_iterator(h.data()))
                aside = aside || entry.path().filename().string().starts_with(name + ".bad-");
            QVERIFY2(aside, name.c_str());
        }
        // Joined, the poller compares the hub's checkpoints with these
        // folders every refresh: the daemon keeps running through several.
        Value join = Value::map();
        join.set("hub", m_link).set("project", "tiny");
        call(*c, "join", join);
        QVERIFY2(waitUntil(
                     [&] {
                         const Value list = call(*c, "checkpoints")["checkpoints"];
                         return list.size() > 0;
                     },
                     180000),
            d.log().constData());
        // The auto-download of the newest one comes after that comparison.
        QVERIFY2(waitUntil(
                     [&] {
                         const Value listed = call(*c, "checkpoints");
                         for (const Value& cp : listed["local"].items())
                             if (cp["project"].toString() == "tiny")
                                 return true;
                         return false;
                     },
                     120000),
            d.log().constData());
        QVERIFY(d.running());
        for (const std::string name : {"round-best", "round-", "round-123456789012345678901234"})
            QVERIFY(std::filesystem::exists(tiny / name / "model.safetensors"));
        d.terminate();
        QVERIFY2(d.exitedNormally(), d.log().right(4000).constData()); // CI once saw it not exit normally
        QCOMPARE(d.exitCode(), 0);
    }

    // While a hub call is slow (six hubs that never answer: a refresh takes
    // 12 s), status is answered, before the slow request's reply, and the
    // replies carry their requests' ids.
    void statusIsAnsweredWhileHubsAreSilent()
    {
        const Home h = home("silent");
        std::vector<std::unique_ptr<SilentHub>> hubs;
        DaemonProcess d;
        d.start(h);
        auto c = connectTo(h, d);
        for (int i = 0; i < 6; ++i) {
            hubs.push_back(std::make_unique<SilentHub>());
            call(*c, "follow", bodyWith("link", hubs.back()->link));
        }
        auto events = control::EventSubscriber::connect(h.control(), {"progress"});
        QVERIFY(events);
        QVERIFY(waitUntil([&] { return (*events)->next(0).has_value(); }, 10000)); // subscribed
        zmq::context_t context;
        zmq::socket_t dealer(context, zmq::socket_type::dealer);
        dealer.set(zmq::sockopt::linger, 0);
        dealer.connect(control::controlEndpoint(h.control()));
        const auto sentMs = uint64_t(core::unixNowMs());
        const std::string refresh = control::encodeRequest("catalog", 1, bodyWith("refresh", true));
        const std::string status = control::encodeRequest("status", 2, Value::map());
        dealer.send(zmq::buffer(refresh));
        dealer.send(zmq::buffer(status));
        std::vector<uint64_t> order;
        for (int i = 0; i < 2; ++i) {
            zmq::message_t frame;
            std::array<zmq::pollitem_t, 1> items{{{dealer.handle(), 0, ZMQ_POLLIN, 0}}};
            QVERIFY(zmq::poll(items, std::chrono::milliseconds(60000)) > 0);
            QVERIFY(dealer.recv(frame));
            auto reply = control::decodeReply(frame.to_string_view());
            QVERIFY(reply);
            QVERIFY2(reply->ok, reply->error.message.c_str());
            order.push_back(reply->id);
        }
        QCOMPARE(order, (std::vector<uint64_t>{2, 1}));
        // Status events went on while the hubs were asked (every 500 ms).
        const auto repliedMs = uint64_t(core::unixNowMs());
        int during = 0;
        while (auto event = (*events)->next(0))
            during += event->timeMs >= sentMs && event->timeMs <= repliedMs ? 1 : 0;
        QVERIFY2(during >= 5, std::to_string(during).c_str());
        // The command line says so too while the daemon is slow elsewhere.
        dealer.send(zmq::buffer(refresh));
        const CliResult s = worker(h, {QStringLiteral("status")});
        QCOMPARE(s.exitCode, 0);
        d.terminate();
    }

    // The limits' reading of the machine hangs (a /proc/<pid>/comm that is
    // a FIFO nobody has written: the poller's scan waits in it); status is
    // answered meanwhile, from what the last reading published, and the
    // reading's outcome shows once it ends.
    void statusIsAnsweredWhileTheMachineReadingHangs()
    {
        const Home h = home("hung-proc");
        const std::filesystem::path proc = h.root / "proc";
        std::filesystem::create_directories(proc);
        std::filesystem::create_directories(h.config());
        std::filesystem::create_directories(h.root / "run");
        std::ofstream(h.config() / "settings.json") << R"({"settings": {"pause_programs": "blender"}})";
        daemon::DaemonOptions options;
        options.dataDir = h.data();
        options.configDir = h.config();
        options.controlDir = h.control();
        options.pollMs = 100;
        options.probes.proc = proc;
        options.probes.nvmlLibrary = "libcrowdtrain-no-such-nvml.so";
        auto opened = daemon::Daemon::open(options);
        QVERIFY2(opened, opened ? "" : opened.error().message.c_str());
        std::unique_ptr<daemon::Daemon> d = std::move(*opened);
        const std::filesystem::path comm = proc / "4242" / "comm";
        std::filesystem::create_directories(comm.parent_path());
        QCOMPARE(::mkfifo(comm.c_str(), 0600), 0);
        // A writer can open the FIFO once the scan (every 2 s) has it open
        // to read; the scan then waits for a line, the poller's beat with it.
        FdCloser writer; // declared after d: closed first, so the scan ends before the daemon stops
        QVERIFY(waitUntil(
            [&] {
                writer.fd = ::open(comm.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
                return writer.fd >= 0;
            },
            30000));
        auto status = std::async(std::launch::async, [&] { return d->status(); });
        // The wait is only a backstop: today's answer comes at once.
        const bool answeredWhileHung = status.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
        const Value during = answeredWhileHung ? status.get() : Value();
        QCOMPARE(::write(writer.fd, "blender\n", 8), ssize_t(8));
        ::close(writer.fd);
        writer.fd = -1;
        QVERIFY2(answeredWhileHung, "status waited for the /proc scan");
        QCOMPARE(during["limit_code"].toString(), std::string()); // no program found yet
        // The scan ended: the program it found pauses training.
        QVERIFY(waitUntil([&] { return d->status()["limit"].toString() == "blender is running"; }, 30000));
        if (status.valid())
            (void)status.get();
    }

    // A change the volunteer makes shows at once: each request that
    // changes something (here `pause`) makes the poller beat now, so the
    // `progress` (and `state`) events follow it instead of the next beat,
    // which this daemon has an hour away.
    void aChangeIsPublishedWithoutWaitingForTheBeat()
    {
        const Home h = home("beat-now");
        std::filesystem::create_directories(h.root / "run");
        daemon::DaemonOptions options;
        options.dataDir = h.data();
        options.configDir = h.config();
        options.controlDir = h.control();
        options.pollMs = 3'600'000;
        options.probes.nvmlLibrary = "libcrowdtrain-no-such-nvml.so";
        auto opened = daemon::Daemon::open(options);
        QVERIFY2(opened, opened ? "" : opened.error().message.c_str());
        std::unique_ptr<daemon::Daemon> d = std::move(*opened);
        auto served = std::async(std::launch::async, [&] { return d->run(); });
        const auto stopFirst = qScopeGuard([&] { d->stop(); }); // on a failure too, before `served` waits
        auto client = control::ControlClient::connect(h.control());
        QVERIFY(client);
        auto events = control::EventSubscriber::connect(h.control(), {"progress"});
        QVERIFY(events);
        // Asked again until the subscription is connected (the first
        // events may go before it is): every `pause` is a beat.
        std::optional<control::Event> event;
        QVERIFY(waitUntil(
            [&] {
                auto paused = (*client)->call("pause");
                if (!paused)
                    qFatal("pause: %s", paused.error().message.c_str());
                event = (*events)->next(500);
                return event.has_value();
            },
            30000));
        QCOMPARE(event->type, std::string("progress"));
        QVERIFY(event->body["paused"].toBool());
        d->stop();
        QVERIFY(served.get());
    }

    // The swarm's session starting (seconds, up to five tries) holds the
    // swarm's lock; its status is answered from the view it publishes.
    void swarmStatusIsAnsweredWhileItsSessionStarts()
    {
        zmq::context_t context;
        auto keys = net::generateKeyPair();
        QVERIFY(keys);
        daemon::HubDirectory hubs(context, *keys);
        std::atomic<int> asked{0};
        std::promise<void> release;
        std::shared_future<void> released = release.get_future().share();
        daemon::CheckpointSwarmOptions options;
        options.listenPort = [&] {
            ++asked;
            released.wait(); // the start waits here, as a slow listen would
            return uint16_t(0);
        };
        daemon::CheckpointSwarm swarm(hubs, std::move(options));
        auto starting = std::async(std::launch::async, [&] { return swarm.sharedSession() != nullptr; });
        const bool entered = waitUntil([&] { return asked.load() > 0; }, 30000);
        auto status = std::async(std::launch::async, [&] { return swarm.status(); });
        // The wait is only a backstop: today's answer comes at once.
        const bool answered = status.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
        const bool stillStarting = starting.wait_for(std::chrono::seconds(0)) != std::future_status::ready;
        release.set_value();
        QVERIFY(entered);
        QVERIFY2(answered, "status waited for the session's start");
        QVERIFY(stillStarting);
        QVERIFY(!status.get()["listening"].toBool());
        QVERIFY(starting.get());
        QVERIFY(waitUntil([&] { return swarm.status()["listening"].toBool(); }, 30000));
    }

    // The command line: mistakes are exit status 2 with a message; a daemon
    // that holds the folder but does not answer is "busy" (4), not "no
    // daemon" (3).
    void commandLineErrors()
    {
        const Home h = home("cli");
        for (const QStringList& args : {QStringList{QStringLiteral("snooze"), QStringLiteral("x")},
                 QStringList{QStringLiteral("download"), QStringLiteral("abc")},
                 QStringList{QStringLiteral("delete"), QStringLiteral("-1")},
                 QStringList{QStringLiteral("cancel"), QStringLiteral("99999999999999999999999")},
                 QStringList{QStringLiteral("generate"), QStringLiteral("x"), QStringLiteral("prompt")},
                 QStringList{QStringLiteral("generate"), QStringLiteral("1"), QStringLiteral("p"),
                     QStringLiteral("--top-k"), QStringLiteral("many")},
                 QStringList{QStringLiteral("nonsense")}}) {
            const CliResult r = worker(h, args);
            QVERIFY2(r.exitCode == 2, qPrintable(args.join(u' ') + QStringLiteral(": ") + QString::number(r.exitCode)));
            QVERIFY(r.err.startsWith("crowdtrain-worker: "));
        }
        // Nobody there.
        std::filesystem::create_directories(h.root / "run");
        CliResult r = worker(h, {QStringLiteral("status")});
        QCOMPARE(r.exitCode, 3);
        // A control socket held by a live process (this test) that never answers.
        QVERIFY(control::preparePrivateDir(h.control()));
        zmq::context_t context;
        zmq::socket_t mute(context, zmq::socket_type::router);
        mute.set(zmq::sockopt::linger, 0);
        mute.bind(control::controlEndpoint(h.control()));
        std::ofstream(h.control() / "daemon.lock") << ::getpid();
        r = worker(h, {QStringLiteral("status")});
        QCOMPARE(r.exitCode, 4);
        QVERIFY2(r.err.contains("busy"), r.err.constData());
        // The same socket with no live daemon behind the lock: no daemon.
        std::ofstream(h.control() / "daemon.lock") << "";
        r = worker(h, {QStringLiteral("status")});
        QCOMPARE(r.exitCode, 3);
    }

    // A download recorded against "demo" (whose port changes at each
    // start) resolves the hub at each attempt: here the "demo" is the test's
    // coordinator, known only once the download starts.
    void demoDownloadResumesAgainstTheHubAsItIsNow()
    {
        // A checkpoint to fetch: a daemon trains until one is published.
        const Home h = home("demo-resume");
        uint64_t round = 0;
        {
            DaemonProcess d;
            d.start(h);
            auto c = connectTo(h, d);
            call(*c, "settings_set", Value::map().set("key", "auto_download").set("value", false));
            Value join = Value::map();
            join.set("hub", m_link).set("project", "tiny");
            call(*c, "join", join);
            QVERIFY(waitUntil(
                [&] {
                    const Value list = call(*c, "checkpoints")["checkpoints"];
                    if (list.size() == 0)
                        return false;
                    round = list.at(0)["round"].toUInt();
                    return true;
                },
                180000));
            d.terminate();
        }
        const std::filesystem::path store = root() / "demo-resume-store";
        const auto part = store / "tiny" / (".round-" + std::to_string(round) + ".part");
        std::filesystem::create_directories(part);
        std::ofstream(part / "job.json") << nlohmann::json{{"hub", "demo"}, {"project", "tiny"},
            {"round", round}}.dump();
        zmq::context_t context;
        auto identity = net::generateKeyPair();
        QVERIFY(identity);
        daemon::HubDirectory hubs(context, *identity);
        std::vector<std::string> resolved;
        std::mutex resolvedMutex;
        daemon::CheckpointsOptions options;
        options.root = store;
        options.publish = [](std::string_view, const Value&) {};
        options.resolve = [&](const std::string& hub) -> Result<daemon::HubLink> {
            std::lock_guard lock(resolvedMutex);
            resolved.push_back(hub);
            return daemon::parseHubLink(hub == "demo" ? m_link : hub);
        };
        daemon::Checkpoints checkpoints(hubs, options);
        const auto folder = store / "tiny" / ("round-" + std::to_string(round));
        QVERIFY(waitUntil([&] { return std::filesystem::exists(folder / "model.safetensors"); }, 60000));
        std::lock_guard lock(resolvedMutex);
        QVERIFY(!resolved.empty());
        QCOMPARE(resolved.front(), std::string("demo"));
    }
};

QTEST_GUILESS_MAIN(TestDaemonEdges)
#include "tst_daemon_edges.moc"
