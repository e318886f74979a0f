// Checkpoints through the BitTorrent swarm, end to end (issue 28): a real
// coordinator seeds its published checkpoint, eight real daemons download
// it at once from the coordinator and from each other, each verifies it,
// and the coordinator sends less than twice the file; a deleted checkpoint
// stops being seeded; with no peer reachable, the download falls back to
// the coordinator's chunks and still completes. The full model state a
// joiner downloads goes through the swarm too.

// libtorch before Qt (its headers use the name `slots`).
#include "engine/diloco/flat_params.h"
#include "engine/hf_gpt2.h"

#include "coordinator_process.h"
#include "core/file_io.h"
#include "daemon_process.h"
#include "net/daemon/hub_link.h"
#include "net/swarm/torrent_file.h"
#include "net/transfer/sha256.h"
#include "protocol_client.h"
#include "worker_process.h"

#include <QRegularExpression>
#include <QTemporaryDir>

using namespace crowdtrain;
using namespace crowdtrain::testing;
using control::Value;

namespace {

Value roundBody(uint64_t round)
{
    Value body = Value::map();
    body.set("round", round);
    return body;
}

std::string hubLinkOf(const ServerProcess& server)
{
    daemon::HubLink hub;
    hub.host = "127.0.0.1";
    hub.port = uint16_t(std::stoi(server.endpoint.substr(server.endpoint.rfind(':') + 1)));
    hub.publicKey = server.publicKey;
    return daemon::formatHubLink(hub);
}

// A checkpoint's model file must pass 1 MiB to get a torrent: 2 layers of
// 256 give ~6.4 MB, 25 pieces (with fewer pieces than peers, the hub's
// share swings between runs).
SpecOptions swarmSpec(const std::string& access = "everyone")
{
    return SpecOptions{.innerSteps = 10,
        .batchSize = 4,
        .tasksPerRound = 1,
        .checkpointEvery = 1,
        .embd = 256,
        .checkpointAccess = access};
}

// The project's starting model (2 layers of 256: a state over 1 MiB, so
// the hub seeds it as a torrent) as a Hugging Face folder: a project that
// imports it makes joiners download the state instead of building it.
bool exportStartingModel(const std::filesystem::path& dir, uint64_t seed)
{
    engine::GptConfig config;
    config.nLayer = 2;
    config.nHead = 2;
    config.nEmbd = 256;
    config.blockSize = 32;
    config.vocabSize = 65;
    const engine::Gpt model = diloco::seededModel(config, seed);
    engine::NamedTensors parameters;
    for (const auto& item : model->named_parameters())
        parameters.emplace_back(item.key(), item.value());
    return engine::exportHuggingFaceGpt2(dir, config, parameters).ok();
}

struct Volunteer {
    explicit Volunteer(std::filesystem::path root)
        : home{std::move(root)}
    { }
    Home home;
    DaemonProcess daemon;
    std::unique_ptr<control::ControlClient> client;
};

// A daemon joined to the project and paused (it downloads, it does not train).
void startVolunteer(Volunteer& v, const std::string& link, bool train)
{
    v.daemon.start(v.home);
    v.client = connectTo(v.home, v.daemon);
    call(*v.client, "settings_set", keyValue("auto_download", false));
    call(*v.client, "settings_set", keyValue("seeding", "always"));
    Value join = Value::map();
    join.set("hub", link).set("project", "tiny");
    call(*v.client, "join", join);
    if (!train)
        call(*v.client, "pause");
}

// The first checkpoint's round, once the trainer's rounds published one.
uint64_t firstCheckpoint(Volunteer& trainer)
{
    uint64_t round = 0;
    const bool published = waitUntil(
        [&] {
            const Value list = call(*trainer.client, "checkpoints")["checkpoints"];
            if (list.size() == 0)
                return false;
            round = list.at(0)["round"].toUInt();
            return list.at(0)["torrent"].toBool();
        },
        180000);
    if (!published)
        qFatal("no checkpoint with a torrent was published: %s", trainer.daemon.log().constData());
    call(*trainer.client, "pause");
    return round;
}

std::filesystem::path hubCheckpointFile(const std::filesystem::path& state, uint64_t round)
{
    for (const auto& entry : std::filesystem::recursive_directory_iterator(state))
        if (entry.path().filename() == "model.safetensors"
            && entry.path().parent_path().filename() == "round-" + std::to_string(round))
            return entry.path();
    qFatal("the hub has no round-%llu/model.safetensors", (unsigned long long)round);
}

// What the hub says on exit it sent: through the swarm, and in fetch
// replies of checkpoints and of states.
struct HubSent {
    bool said = false;
    uint64_t swarm = 0;
    uint64_t checkpointChunks = 0;
    uint64_t stateChunks = 0;
    QString text; // its stderr
};

HubSent stopAndCount(ServerProcess& server)
{
    server.terminate();
    HubSent sent;
    sent.text = QString::fromUtf8(server.stderrText());
    const auto match = QRegularExpression(
        QStringLiteral("sent (\\d+) bytes to the swarm, (\\d+) of checkpoints and (\\d+) of states in fetch replies"))
                           .match(sent.text);
    sent.said = match.hasMatch();
    sent.swarm = match.captured(1).toULongLong();
    sent.checkpointChunks = match.captured(2).toULongLong();
    sent.stateChunks = match.captured(3).toULongLong();
    return sent;
}

std::string sha256Of(const std::filesystem::path& file)
{
    auto hash = net::sha256OfFile(file);
    return hash ? *hash : std::string("unreadable");
}

std::string checkpointState(control::ControlClient& client, uint64_t round)
{
    const Value listed = call(client, "checkpoints");
    for (const Value& c : listed["checkpoints"].items())
        if (c["round"].toUInt() == round)
            return c["state"].toString();
    return "absent";
}

} // namespace

class TestCheckpointSwarm : public QObject {
    Q_OBJECT

    QTemporaryDir m_dir;
    std::filesystem::path root() const { return m_dir.path().toStdString(); }

private slots:
    void eightDaemonsShareOneCheckpoint()
    {
        const auto data = preparedText(root());
        const auto spec = writeSpec(root() / "hub", data, swarmSpec());
        ServerProcess server;
        // The host's uplink for checkpoints: 256 KiB/s (volunteers trade faster among themselves).
        QVERIFY(server.start(spec, root() / "hub/state", 500, "tcp://127.0.0.1:*",
            {QStringLiteral("--swarm-upload-limit"), QStringLiteral("262144")}));
        QVERIFY(server.swarmPort > 0);
        const std::string link = hubLinkOf(server);

        Volunteer trainer(root() / "trainer");
        startVolunteer(trainer, link, true);
        const uint64_t round = firstCheckpoint(trainer);
        const auto original = hubCheckpointFile(root() / "hub/state", round);
        const uint64_t fileBytes = std::filesystem::file_size(original);
        QVERIFY(fileBytes > (1u << 20));

        std::vector<std::unique_ptr<Volunteer>> volunteers;
        for (int i = 0; i < 8; ++i) {
            volunteers.push_back(std::make_unique<Volunteer>(root() / ("v" + std::to_string(i))));
            startVolunteer(*volunteers.back(), link, false);
        }
        for (auto& v : volunteers)
            call(*v->client, "download", roundBody(round));
        for (auto& v : volunteers)
            QVERIFY2(waitUntil([&] { return checkpointState(*v->client, round) == "ready"; }, 240000),
                v->daemon.log().constData());

        // Each has the hub's file, verified; some of it came from other volunteers.
        const std::string expected = sha256Of(original);
        uint64_t fromPeers = 0;
        const QRegularExpression swarmLine(
            QStringLiteral("from the swarm \\((\\d+) KiB from peers, (\\d+) KiB from the hub\\)"));
        for (auto& v : volunteers) {
            const auto folder = v->home.data() / "checkpoints" / "tiny" / ("round-" + std::to_string(round));
            QCOMPARE(sha256Of(folder / "model.safetensors"), expected);
            const QString log = QString::fromUtf8(v->daemon.log());
            const auto match = swarmLine.match(log);
            QVERIFY2(match.hasMatch(), qPrintable(log)); // the swarm, not the fallback
            fromPeers += match.captured(1).toULongLong() << 10;
        }
        QVERIFY(fromPeers > 0);

        // They seed it (from the next tick), and the status says so.
        Value shared;
        QVERIFY(waitUntil(
            [&] {
                shared = call(*volunteers[0]->client, "status")["swarm"];
                return shared["torrents"].size() == 1 && shared["torrents"].at(0)["active"].toBool();
            },
            30000));
        QVERIFY(shared["listening"].toBool());

        // A deleted checkpoint is no longer seeded.
        call(*volunteers[0]->client, "checkpoint_delete", roundBody(round));
        QCOMPARE(call(*volunteers[0]->client, "status")["swarm"]["torrents"].size(), std::size_t(0));
        QCOMPARE(checkpointState(*volunteers[0]->client, round), std::string("remote"));

        // The coordinator sent less than two copies in all.
        for (auto& v : volunteers)
            v->daemon.terminate();
        trainer.daemon.terminate();
        const HubSent sent = stopAndCount(server);
        QVERIFY2(sent.said, qPrintable(sent.text));
        const uint64_t hubBytes = sent.swarm + sent.checkpointChunks;
        qInfo("8 daemons, a %llu-byte checkpoint: the hub sent %.2f copies (%.2f through the swarm), the peers %.2f",
            (unsigned long long)fileBytes, double(hubBytes) / double(fileBytes), double(sent.swarm) / double(fileBytes),
            double(fromPeers) / double(fileBytes));
        QVERIFY2(hubBytes < 2 * fileBytes, qPrintable(sent.text));
    }

    // The full model state goes the same way (issue 28, item 3): a project
    // whose theta_0 is imported (no seed a joiner could build it from),
    // eight workers and a daemon join at once; each gets the state through
    // the swarm, verified, partly from each other, and seeds it; the hub
    // sends less than two copies. A tenth without a swarm gets it in chunks.
    void eightWorkersShareTheFullState()
    {
        const auto data = preparedText(root());
        SpecOptions options = swarmSpec();
        QVERIFY(exportStartingModel(root() / "imported", 11));
        options.importDir = root() / "imported";
        options.tasksPerRound = 16; // the round stays open while they download
        options.checkpointEvery = 100;
        const auto spec = writeSpec(root() / "hub4", data, options);
        ServerProcess server;
        QVERIFY(server.start(spec, root() / "hub4/state", 500, "tcp://127.0.0.1:*",
            {QStringLiteral("--swarm-upload-limit"), QStringLiteral("262144")}));
        const auto stateFile = root() / "hub4/state/tiny/state/state-v0";
        QVERIFY2(std::filesystem::exists(stateFile), stateFile.c_str());
        const uint64_t stateBytes = std::filesystem::file_size(stateFile);
        QVERIFY(stateBytes > (1u << 20));

        std::vector<std::unique_ptr<WorkerProcess>> workers;
        for (int i = 0; i < 8; ++i) {
            workers.push_back(std::make_unique<WorkerProcess>());
            workers.back()->start(server, data, root() / ("w" + std::to_string(i)), "w" + std::to_string(i), 1);
        }
        // A daemon's agent fetches it through the daemon's own session.
        Volunteer daemon(root() / "daemon4");
        startVolunteer(daemon, hubLinkOf(server), true);
        WorkerProcess chunked;
        chunked.start(
            server, data, root() / "chunked", "chunked", 1, {QStringLiteral("--swarm-port"), QStringLiteral("off")});
        const QRegularExpression swarmLine(
            QStringLiteral("version 0: the state from the swarm, (\\d+) bytes from peers and (\\d+) from the hub"));
        uint64_t fromPeers = 0;
        for (auto& w : workers) {
            QVERIFY2(
                waitUntil([&] { return w->log().contains("version 0: full state downloaded and verified"); }, 240000),
                w->log().right(3000).constData());
            const auto match = swarmLine.match(QString::fromUtf8(w->log()));
            QVERIFY2(match.hasMatch(), w->log().right(3000).constData()); // the swarm, not the chunks
            fromPeers += match.captured(1).toULongLong();
        }
        QVERIFY(fromPeers > 0);
        QVERIFY2(
            waitUntil(
                [&] { return daemon.daemon.log().contains("version 0: full state downloaded and verified"); }, 120000),
            daemon.daemon.log().constData());
        QVERIFY2(daemon.daemon.log().contains("version 0: the state from the swarm"), daemon.daemon.log().constData());
        QVERIFY2(
            waitUntil([&] { return chunked.log().contains("version 0: full state downloaded and verified"); }, 120000),
            chunked.log().constData());
        QVERIFY(!chunked.log().contains("from the swarm"));
        // Each seeds what it fetched (the file the torrent names, intact).
        const std::string expected = sha256Of(stateFile);
        for (int i = 0; i < 8; ++i)
            QCOMPARE(
                sha256Of(root() / ("w" + std::to_string(i)) / "projects" / "tiny" / "swarm" / "state-v0"), expected);

        // The version moves on (the daemon trains until round 0 closes):
        // the hub seeds the newer states, and once no one downloads
        // state-v0 (30 s after the last ask) it goes; the daemon's seed of
        // it leaves its swarm and its disk.
        const auto hubSwarm = root() / "hub4/state/tiny/state";
        QVERIFY2(waitUntil(
                     [&] {
                         bool newer = false;
                         std::error_code ec;
                         for (const auto& entry : std::filesystem::directory_iterator(hubSwarm, ec))
                             newer = newer
                                 || (entry.path().filename().string().starts_with(".state-v")
                                     && entry.path().filename() != ".state-v0.torrent");
                         return newer && !std::filesystem::exists(hubSwarm / "state-v0");
                     },
                     120000),
            daemon.daemon.log().right(3000).constData());
        const auto daemonCopy = daemon.home.data() / "projects" / "tiny" / "swarm" / "state-v0";
        QVERIFY2(waitUntil([&] { return !std::filesystem::exists(daemonCopy); }, 120000),
            daemon.daemon.log().right(3000).constData());

        for (auto& w : workers)
            w->kill();
        chunked.kill();
        daemon.daemon.terminate();
        const HubSent sent = stopAndCount(server);
        QVERIFY2(sent.said, qPrintable(sent.text));
        const uint64_t swarmBytes = sent.swarm;
        const uint64_t chunkBytes = sent.stateChunks;
        qInfo("8 workers and a daemon, a %llu-byte state: the hub sent %.2f copies through the swarm, the peers %.2f; "
              "%.2f copies in chunks (the worker without a swarm)",
            (unsigned long long)stateBytes, double(swarmBytes) / double(stateBytes),
            double(fromPeers) / double(stateBytes), double(chunkBytes) / double(stateBytes));
        QVERIFY2(swarmBytes < 2 * stateBytes, qPrintable(sent.text));
        QVERIFY(chunkBytes >= stateBytes); // the tenth's copy came in chunks
    }

    void withNoPeerTheHubsChunksStillDeliver()
    {
        const auto data = preparedText(root());
        const auto spec = writeSpec(root() / "hub2", data, swarmSpec());
        ServerProcess server;
        // The seed listens where nobody can reach it through the hub's
        // address (127.0.0.2, while the hub link names 127.0.0.1).
        QVERIFY(server.start(spec, root() / "hub2/state", 500, "tcp://127.0.0.1:*",
            {QStringLiteral("--swarm"), QStringLiteral("127.0.0.2:0")}));
        const std::string link = hubLinkOf(server);
        Volunteer trainer(root() / "trainer2");
        startVolunteer(trainer, link, true);
        const uint64_t round = firstCheckpoint(trainer);

        Volunteer v(root() / "lonely");
        startVolunteer(v, link, false);
        call(*v.client, "download", roundBody(round));
        QVERIFY2(waitUntil([&] { return checkpointState(*v.client, round) == "ready"; }, 180000),
            v.daemon.log().constData());
        const auto folder = v.home.data() / "checkpoints" / "tiny" / ("round-" + std::to_string(round));
        QCOMPARE(sha256Of(folder / "model.safetensors"), sha256Of(hubCheckpointFile(root() / "hub2/state", round)));
        QVERIFY2(v.daemon.log().contains("in chunks from the hub instead of the swarm: no peer sent a verified piece"),
            v.daemon.log().constData());
    }

    // A participants-only project tells its torrents to participants only:
    // the info-hash is what a BitTorrent peer names to be served.
    void participantsOnlyTorrentsStayWithParticipants()
    {
        const auto data = preparedText(root());
        const auto spec = writeSpec(root() / "hub3", data, swarmSpec("participants"));
        ServerProcess server;
        QVERIFY(server.start(spec, root() / "hub3/state", 500));
        Volunteer trainer(root() / "trainer3");
        startVolunteer(trainer, hubLinkOf(server), true);
        const uint64_t round = firstCheckpoint(trainer); // the trainer, a participant, sees the torrent
        const auto file = hubCheckpointFile(root() / "hub3/state", round);
        auto kept = core::readFile(file.parent_path() / ".model.safetensors.torrent");
        QVERIFY(kept.ok());
        auto torrent = swarm::readTorrent(*kept);
        QVERIFY(torrent.ok());

        zmq::context_t context;
        ProtocolVolunteer stranger = joinProject(context, server.endpoint, server.publicKey, "tiny", "stranger");
        auto listed = stranger.client->request<net::ListCheckpointsReply>(net::ListCheckpointsRequest{"tiny"}, 10000);
        QVERIFY(listed.ok());
        QVERIFY(!listed->checkpoints.empty());
        for (const net::CheckpointInfo& c : listed->checkpoints)
            for (const net::FileInfo& f : c.files)
                QVERIFY(!f.torrent.has_value());
        auto peers = stranger.client->request<net::SwarmPeersReply>(
            net::SwarmPeersRequest{"tiny", torrent->infoHash, 6881, false}, 10000);
        QVERIFY(!peers.ok());
        QCOMPARE(peers.error().code, std::string("forbidden"));
        auto described = stranger.client->request<net::ResourceDescription>(
            net::DescribeRequest{"tiny", "torrent/checkpoint/round-" + std::to_string(round) + "/model.safetensors"},
            10000);
        QVERIFY(!described.ok());
        QCOMPARE(described.error().code, std::string("forbidden"));
        // An unknown info-hash is not found.
        auto unknown = stranger.client->request<net::SwarmPeersReply>(
            net::SwarmPeersRequest{"tiny", std::string(40, '0'), 6881, false}, 10000);
        QCOMPARE(unknown.error().code, std::string("not_found"));
        trainer.daemon.terminate();
    }

    // A daemon holding the state it fetched through the swarm stops seeding
    // it when the seeding setting says never, and seeds it again (announced
    // to the hub) when it says always, while the model stays at version 0
    // (a round of many short tasks).
    void theStateSeedFollowsTheSeedingSetting()
    {
        const auto data = preparedText(root());
        SpecOptions options = swarmSpec();
        QVERIFY(exportStartingModel(root() / "imported-seeding", 13));
        options.importDir = root() / "imported-seeding";
        options.innerSteps = 2;
        options.tasksPerRound = 1000;
        options.checkpointEvery = 100;
        options.deadlineSeconds = 3600;
        const auto spec = writeSpec(root() / "hub6", data, options);
        ServerProcess server;
        QVERIFY(server.start(spec, root() / "hub6/state", 500));
        Volunteer daemon(root() / "daemon6");
        startVolunteer(daemon, hubLinkOf(server), true);
        const auto logged
            = [&](const char* line) { return waitUntil([&] { return daemon.daemon.log().contains(line); }, 120000); };
        QVERIFY2(logged("version 0: the state from the swarm"), daemon.daemon.log().right(3000).constData());
        call(*daemon.client, "settings_set", keyValue("seeding", "never"));
        QVERIFY2(logged("version 0: stopped seeding the state"), daemon.daemon.log().right(3000).constData());
        call(*daemon.client, "settings_set", keyValue("seeding", "always"));
        QVERIFY2(logged("version 0: seeding the state again"), daemon.daemon.log().right(3000).constData());
        daemon.daemon.terminate();
        server.terminate();
    }
};

QTEST_GUILESS_MAIN(TestCheckpointSwarm)
#include "tst_checkpoint_swarm.moc"
