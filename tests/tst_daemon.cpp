// The volunteer daemon as a volunteer's machine runs it: a real
// crowdtrain-worker run process (it execs crowdtrain-daemon) in temporary
// XDG folders, a real coordinator on loopback, and the control API over its
// ipc:// sockets. Every control request, its refusals, a second daemon, an
// insecure control folder, settings across restarts and a corrupted
// settings file, a SIGKILL mid-task, a download left half-done, generation,
// and a worker that joins with nothing but a hub link (no data folder).

// libtorch's headers before Qt's: Qt's `slots` macro breaks them.
#include "net/daemon/hub_link.h"
#include "net/volunteer/connection.h"
#include "net/volunteer/piece_library.h"

#include "coordinator_process.h"
#include "daemon_process.h"

#include "core/utf8.h"
#include "engine/token_shard.h"
#include "net/control/control_client.h"

#include <QTemporaryDir>
#include <chrono>
#include <fstream>
#include <sys/stat.h>

using namespace crowdtrain;
using namespace crowdtrain::testing;
using control::Value;

class TestDaemon : public QObject {
    Q_OBJECT

    QTemporaryDir m_dir;
    std::filesystem::path m_data;
    ServerProcess m_server;
    std::string m_link;

    std::filesystem::path root() const { return m_dir.path().toStdString(); }
    Home home(const std::string& name) const { return Home{root() / name}; }

    Value joinBody() const
    {
        Value body = Value::map();
        body.set("hub", m_link).set("project", "tiny");
        return body;
    }

private slots:
    void initTestCase()
    {
        QVERIFY(m_dir.isValid());
        m_data = preparedText(root());
        const auto spec = writeSpec(root() / "hub", m_data,
            SpecOptions{.tasksPerRound = 1, .checkpointEvery = 1, .prompts = {"ROMEO:", "First "}});
        QVERIFY(m_server.start(spec, root() / "hub/state", 1000));
        daemon::HubLink hub;
        hub.host = "127.0.0.1";
        hub.port = uint16_t(std::stoi(m_server.endpoint.substr(m_server.endpoint.rfind(':') + 1)));
        hub.publicKey = m_server.publicKey;
        m_link = daemon::formatHubLink(hub);
    }

    void hubLinksRoundTrip()
    {
        auto hub = daemon::parseHubLink(m_link);
        QVERIFY2(hub, hub ? "" : hub.error().message.c_str());
        QCOMPARE(hub->publicKey, m_server.publicKey);
        QCOMPARE(hub->endpoint(), m_server.endpoint);
        auto z85 = daemon::parseHubLink(
            "  crowdtrain://127.0.0.1:" + std::to_string(hub->port) + "/" + m_server.publicKey + "\n");
        QVERIFY(z85);
        QCOMPARE(*z85, *hub);
        auto v6 = daemon::parseHubLink("crowdtrain://[::1]:7400/" + m_server.publicKey);
        QVERIFY(v6);
        QCOMPARE(v6->endpoint(), std::string("tcp://[::1]:7400"));
        for (const std::string& bad :
            std::vector<std::string>{"http://x:1/" + m_server.publicKey, std::string("crowdtrain://host/abc"),
                "crowdtrain://host:0/" + m_server.publicKey, "crowdtrain://host:70000/" + m_server.publicKey,
                std::string("crowdtrain://host:7400/") + std::string(64, 'g'),
                std::string("crowdtrain://host:7400/short"), "crowdtrain://ho st:7400/" + m_server.publicKey}) {
            auto parsed = daemon::parseHubLink(bad);
            QVERIFY2(!parsed, bad.c_str());
            QCOMPARE(parsed.error().code, std::string("bad_hub_link"));
        }
    }

    // Every request of the control API against a real daemon and coordinator:
    // the worker joins with the hub link alone (no data folder) and trains.
    void everyControlRequest()
    {
        const Home h = home("api");
        DaemonProcess d;
        d.start(h);
        auto client = connectTo(h, d);
        control::ControlClient& c = *client;

        Value s = call(c, "status");
        QCOMPARE(s["state"].toString(), std::string("idle"));
        QCOMPARE(s["reason"].toString(), std::string("no project joined"));

        // Settings: typed, validated, and a refusal changes nothing.
        Value settings = call(c, "settings_get");
        QCOMPARE(settings["settings"]["cpu_threads"].toInt(), int64_t(0));
        QVERIFY(settings["described"].size() >= 5);
        QCOMPARE(call(c, "settings_set", keyValue("cpu_threads", 1))["settings"]["cpu_threads"].toInt(), int64_t(1));
        Error bad = refusal(c, "settings_set", keyValue("cpu_threads", -3));
        QCOMPARE(bad.code, std::string("bad_value"));
        QVERIFY2(bad.message.find("from 0 to") != std::string::npos, bad.message.c_str());
        QCOMPARE(refusal(c, "settings_set", keyValue("device", "gpu-please")).code, std::string("bad_value"));
        QCOMPARE(refusal(c, "settings_set", keyValue("display_name", "evil\xE2\x80\xAEname")).code,
            std::string("bad_value"));
        QCOMPARE(refusal(c, "settings_set", keyValue("no_such_setting", true)).code, std::string("unknown_setting"));
        QCOMPARE(refusal(c, "settings_set", keyValue("auto_download", 1)).code, std::string("bad_value"));
        QCOMPARE(call(c, "settings_get")["settings"]["cpu_threads"].toInt(), int64_t(1));
        QCOMPARE(refusal(c, "no_such_request", Value::map()).code, std::string("unknown_type"));

        // Hubs and the catalog (the demo is always listed).
        Value link = Value::map();
        link.set("link", "crowdtrain://nowhere");
        QCOMPARE(refusal(c, "follow", link).code, std::string("bad_hub_link"));
        link.set("link", m_link);
        QCOMPARE(call(c, "follow", link)["link"].toString(), m_link);
        Value refresh = Value::map();
        refresh.set("refresh", true);
        Value catalog = call(c, "catalog", refresh);
        bool sawTiny = false, sawDemo = false;
        for (const Value& hub : catalog["hubs"].items()) {
            sawDemo = sawDemo || hub["link"].toString() == "demo";
            if (hub["link"].toString() != m_link)
                continue;
            QVERIFY(hub["reachable"].toBool());
            QVERIFY(!hub["last_seen_ms"].isNil());
            QCOMPARE(hub["projects"].size(), std::size_t(1));
            const Value& p = hub["projects"].at(0);
            sawTiny = p["name"].toString() == "tiny";
            QVERIFY(p["parameters"].toUInt() > 0);
            QCOMPARE(p["model"]["n_layer"].toUInt(), uint64_t(2));
            QCOMPARE(p["checkpoint_access"].toString(), std::string("everyone"));
        }
        QVERIFY(sawTiny);
        QVERIFY(sawDemo);

        // Join with the link alone: the daemon trains on pieces it fetches.
        QCOMPARE(refusal(c, "join", Value::map()).code, std::string("bad_request"));
        call(c, "join", joinBody());
        QVERIFY2(waitUntil([&] { return call(c, "status")["accepted"].toUInt() >= 2; }, 120000), d.log().constData());
        s = call(c, "status");
        QCOMPARE(s["project"].toString(), std::string("tiny"));
        QVERIFY(s["piece_fetches"].toUInt() >= 1);
        // "auto" resolved to a real device.
        QVERIFY2(s["device_in_use"].toString() == "cpu" || s["device_in_use"].toString().rfind("cuda:", 0) == 0,
            s["device_in_use"].toString().c_str());
        QVERIFY(!std::filesystem::exists(h.data() / "data")); // no corpus on this machine

        // Pause, snooze, resume.
        QVERIFY(call(c, "pause")["paused"].toBool());
        s = call(c, "status");
        QCOMPARE(s["state"].toString(), std::string("paused"));
        QCOMPARE(s["reason"].toString(), std::string("paused by you"));
        call(c, "resume");
        QVERIFY(waitUntil([&] { return call(c, "status")["state"].toString() != "paused"; }, 10000));
        Value snooze = Value::map();
        snooze.set("seconds", 3600);
        QVERIFY(call(c, "snooze", snooze)["snooze_until_ms"].toInt() > 0);
        QCOMPARE(call(c, "status")["reason"].toString(), std::string("snoozed"));
        snooze.set("seconds", 0);
        QCOMPARE(refusal(c, "snooze", snooze).code, std::string("bad_request"));
        call(c, "resume");
        QVERIFY(waitUntil([&] { return call(c, "status")["state"].toString() != "paused"; }, 10000));

        // Limits: a schedule with no hours on pauses and says so; the status
        // says which limit acts, and a busy share is held.
        call(c, "settings_set", keyValue("schedule", std::string(168, '0')));
        QVERIFY(waitUntil([&] { return call(c, "status")["state"].toString() == "paused"; }, 10000));
        s = call(c, "status");
        QCOMPARE(s["reason"].toString(), std::string("outside the schedule (no hours are on)"));
        QCOMPARE(s["limit"].toString(), s["reason"].toString());
        QCOMPARE(s["limit_code"].toString(), std::string("schedule"));
        QCOMPARE(s["limits"]["busy_target"].toDouble(), 0.0);
        QCOMPARE(refusal(c, "settings_set", keyValue("schedule", "0101")).code, std::string("bad_value"));
        call(c, "settings_set", keyValue("schedule", std::string(168, '1')));
        call(c, "settings_set", keyValue("busy_share_in_use", 30));
        call(c, "settings_set", keyValue("busy_share_idle", 30));
        QCOMPARE(call(c, "settings_get")["settings"]["preset"].toString(), std::string("custom"));
        QVERIFY(waitUntil([&] { return call(c, "status")["limits"]["busy_target"].toDouble() == 0.3; }, 10000));
        s = call(c, "status");
        QVERIFY2(s["limit"].toString().rfind("busy share 30% (computer ", 0) == 0, s["limit"].toString().c_str());
        QCOMPARE(s["limit_code"].toString(), std::string("busy_share"));
        QVERIFY(!s["limits"]["idle_source"].toString().empty());
        QVERIFY(s["limits"]["month_bytes"].toUInt() > 0); // the agent's traffic, counted for the month
        if (!s["limits"]["gpu"]["available"].toBool())
            QVERIFY(s["limits"]["gpu"]["why"].toString().rfind("not available on this machine", 0) == 0);
        call(c, "settings_set", keyValue("preset", "maximum"));
        QCOMPARE(call(c, "settings_get")["settings"]["busy_share_in_use"].toInt(), int64_t(100));
        QVERIFY(waitUntil([&] { return call(c, "status")["limits"]["busy_target"].toDouble() == 1.0; }, 10000));

        // Histories and contributions.
        QVERIFY(waitUntil([&] { return call(c, "metrics")["rows"].size() >= 2; }, 60000));
        const Value rows = call(c, "metrics")["rows"];
        QVERIFY(rows.at(rows.size() - 1)["round"].toUInt() > rows.at(0)["round"].toUInt());
        QVERIFY(waitUntil([&] { return call(c, "machine_history")["rows"].size() >= 1; }, 10000));
        QVERIFY(waitUntil([&] { return call(c, "contributions")["mine"]["tokens"].toUInt() > 0; }, 60000));
        const Value mine = call(c, "contributions");
        QVERIFY(mine["rank"].toUInt() >= 1);
        QVERIFY(mine["leaderboard"].size() >= 1);
        QVERIFY(call(c, "log")["lines"].size() >= 1);

        // Checkpoints: published every round and downloaded automatically.
        std::optional<uint64_t> ready;
        Value listed;
        if (!waitUntil(
                [&] {
                    listed = call(c, "checkpoints");
                    for (const Value& cp : listed["checkpoints"].items())
                        if (cp["state"].toString() == "ready")
                            ready = cp["round"].toUInt();
                    return ready.has_value();
                },
                120000)) {
            qWarning("checkpoints: %s\ndaemon: %s", listed.toJson().c_str(), d.log().constData());
            QFAIL("no checkpoint was downloaded");
        }
        const auto folder = h.data() / "checkpoints" / "tiny" / ("round-" + std::to_string(*ready));
        QVERIFY(std::filesystem::exists(folder / "model.safetensors"));
        QVERIFY(std::filesystem::exists(folder / "config.json"));
        QVERIFY(std::filesystem::exists(folder / "tokenizer"));
        QVERIFY(std::filesystem::exists(folder / "samples.json"));

        // What the model wrote at each checkpoint comes without downloading it.
        Value samples;
        if (!waitUntil(
                [&] {
                    const Value listed = call(c, "checkpoints");
                    for (const Value& cp : listed["checkpoints"].items())
                        if (cp["samples"].size() == 2)
                            samples = cp["samples"];
                    return !samples.isNil();
                },
                30000)) {
            qWarning("checkpoints: %s", call(c, "checkpoints").toJson().c_str());
            QFAIL("no checkpoint's samples came");
        }
        QCOMPARE(samples.at(0)["prompt"].toString(), std::string("ROMEO:"));
        QCOMPARE(samples.at(1)["prompt"].toString(), std::string("First "));
        QVERIFY(!samples.at(0)["text"].toString().empty());

        // Generation streams whole UTF-8 characters as events.
        auto events = control::EventSubscriber::connect(h.control(), {"generated", "progress"});
        QVERIFY(events);
        // The daemon's progress events show when the subscription is live.
        QVERIFY(waitUntil(
            [&] {
                auto event = (*events)->next(100);
                return event && event->type == "progress";
            },
            10000));
        Value generate = Value::map();
        generate.set("round", *ready).set("prompt", "ROMEO:").set("max_tokens", 40).set("temperature", 0.8);
        const uint64_t id = call(c, "generate", generate)["id"].toUInt();
        std::string text;
        bool done = false;
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        while (!done && std::chrono::steady_clock::now() < deadline) {
            auto event = (*events)->next(1000);
            if (!event || event->type != "generated" || event->body["id"].toUInt() != id)
                continue;
            const std::string piece = event->body["text"].toString();
            QCOMPARE(core::completeUtf8Length(piece), piece.size());
            text += piece;
            done = event->body["done"].toBool();
            QCOMPARE(event->body["error"].toString(), std::string());
        }
        QVERIFY2(done, "no end of the generated text");
        QVERIFY(!text.empty());
        generate.set("round", 999999);
        QCOMPARE(refusal(c, "generate", generate).code, std::string("not_downloaded"));
        generate.set("round", *ready).set("max_tokens", 0);
        QCOMPARE(refusal(c, "generate", generate).code, std::string("bad_request"));

        Value round = Value::map();
        round.set("round", 999999);
        QCOMPARE(refusal(c, "download_cancel", round).code, std::string("not_found"));
        round.set("round", *ready);
        call(c, "checkpoint_delete", round);
        QVERIFY(!std::filesystem::exists(folder));

        call(c, "leave");
        QCOMPARE(call(c, "status")["state"].toString(), std::string("idle"));
        QCOMPARE(refusal(c, "leave", Value::map()).code, std::string("not_joined"));
        call(c, "unfollow", link);
        QCOMPARE(refusal(c, "unfollow", link).code, std::string("not_found"));
        // SIGTERM stops it cleanly.
        d.terminate();
        if (!d.exitedNormally() || d.exitCode() != 0)
            qWarning("exit %d (normal: %d); log: %s", d.exitCode(), int(d.exitedNormally()),
                d.log().right(1500).constData());
        QVERIFY(d.exitedNormally() && d.exitCode() == 0);
    }

    // A cached piece that was corrupted on disk is fetched again, never used.
    void corruptedPieceIsFetchedAgain()
    {
        const auto cache = root() / "pieces";
        zmq::context_t context;
        net::ClientOptions options;
        options.endpoint = m_server.endpoint;
        options.serverPublicKey = m_server.publicKey;
        options.keys = *net::generateKeyPair();
        volunteer::Traffic traffic;
        auto connection = volunteer::Connection::open(context, options, traffic, nullptr);
        QVERIFY(connection);
        volunteer::PieceLibrary library(cache, 64 << 20,
            [&] { return std::make_unique<volunteer::ConnectionSource>(**connection, "tiny", 10000); });
        std::string shardName;
        for (const auto& entry : std::filesystem::directory_iterator(m_data))
            if (entry.path().filename().string().find("train") != std::string::npos)
                shardName = entry.path().filename().string();
        auto shard = engine::TokenShard::open(m_data / shardName);
        QVERIFY(shard);
        const net::ShardRange range{shardName, 1000, 1641};
        auto tokens = library.tokens(range);
        QVERIFY2(tokens, tokens ? "" : tokens.error().message.c_str());
        QVERIFY(std::equal(tokens->begin(), tokens->end(), shard->tokens() + 1000));
        QCOMPARE(library.fetched(), uint64_t(1));

        // Flip bytes in the cached file, then ask again from a fresh library.
        {
            std::fstream file(library.fileOf(range), std::ios::in | std::ios::out | std::ios::binary);
            file.seekp(10);
            file.write("\xff\xff\xff\xff", 4);
        }
        volunteer::PieceLibrary again(cache, 64 << 20,
            [&] { return std::make_unique<volunteer::ConnectionSource>(**connection, "tiny", 10000); });
        auto refetched = again.tokens(range);
        QVERIFY(refetched);
        QCOMPARE(again.fetched(), uint64_t(1));
        QCOMPARE(again.reused(), uint64_t(0));
        QVERIFY(std::equal(refetched->begin(), refetched->end(), shard->tokens() + 1000));
        // Whole, it is reused without fetching.
        volunteer::PieceLibrary third(cache, 64 << 20,
            [&] { return std::make_unique<volunteer::ConnectionSource>(**connection, "tiny", 10000); });
        QVERIFY(third.tokens(range));
        QCOMPARE(third.reused(), uint64_t(1));
        // A range outside the shard is refused by the coordinator.
        const net::ShardRange outside{shardName, shard->size() - 10, shard->size() + 10};
        auto refused = third.tokens(outside);
        QVERIFY(!refused);
        QCOMPARE(refused.error().code, std::string("not_found"));
    }

    void oneDaemonPerUser()
    {
        const Home h = home("twice");
        DaemonProcess first;
        first.start(h);
        connectTo(h, first);
        DaemonProcess second;
        second.start(h);
        QVERIFY(second.waitForExit(30000));
        QCOMPARE(second.exitCode(), 3);
        QVERIFY2(second.log().contains("already running"), second.log().constData());
        QVERIFY(first.running());
        first.terminate();
    }

    // A control folder another user could reach is refused by both sides.
    void sharedControlFolderIsRefused()
    {
        const Home h = home("shared");
        std::filesystem::create_directories(h.control());
        ::chmod(h.control().c_str(), 0777);
        DaemonProcess d;
        d.start(h);
        QVERIFY(d.waitForExit(30000));
        QVERIFY(d.exitCode() != 0);
        QVERIFY2(d.log().contains("lets group or other users in"), d.log().constData());
        // A socket file planted there is not talked to.
        std::ofstream(h.control() / "control") << "";
        auto client = control::ControlClient::connect(h.control());
        QVERIFY(!client);
        QCOMPARE(client.error().code, std::string("insecure_control_dir"));
        // And the command-line client says so clearly.
        QProcess cli;
        cli.start(QString::fromStdString(binary("crowdtrain-worker").string()),
            {QStringLiteral("status"), QStringLiteral("--control-dir"), QString::fromStdString(h.control().string())});
        QVERIFY(cli.waitForFinished(10000));
        QVERIFY(cli.exitCode() != 0);
        QVERIFY(cli.readAllStandardError().contains("chmod 700"));
        // No daemon at all: "no daemon running".
        cli.start(QString::fromStdString(binary("crowdtrain-worker").string()),
            {QStringLiteral("status"), QStringLiteral("--control-dir"),
                QString::fromStdString((root() / "nobody-here").string())});
        QVERIFY(cli.waitForFinished(10000));
        QCOMPARE(cli.exitCode(), 3);
        QVERIFY(cli.readAllStandardError().contains("no daemon running"));
    }

    void settingsSurviveRestartsAndACorruptFileIsSetAside()
    {
        const Home h = home("settings");
        {
            DaemonProcess d;
            d.start(h);
            auto c = connectTo(h, d);
            call(*c, "settings_set", keyValue("display_name", "Ada Lovelace"));
            call(*c, "settings_set", keyValue("auto_download", false));
            d.terminate();
        }
        {
            DaemonProcess d;
            d.start(h);
            auto c = connectTo(h, d);
            const Value s = call(*c, "settings_get")["settings"];
            QCOMPARE(s["display_name"].toString(), std::string("Ada Lovelace"));
            QCOMPARE(s["auto_download"].toBool(), false);
            QCOMPARE(call(*c, "status")["notices"].size(), std::size_t(0));
            d.terminate();
        }
        std::ofstream(h.config() / "settings.json") << "{\"version\": 1, \"settings\": {\"cpu_threads\": \"many\"";
        {
            DaemonProcess d;
            d.start(h);
            auto c = connectTo(h, d);
            const Value s = call(*c, "settings_get")["settings"];
            QCOMPARE(s["display_name"].toString(), std::string(""));
            const Value notices = call(*c, "status")["notices"];
            QCOMPARE(notices.size(), std::size_t(1));
            QVERIFY2(notices.at(0).toString().find("could not be used") != std::string::npos,
                notices.at(0).toString().c_str());
            bool setAside = false;
            for (const auto& entry : std::filesystem::directory_iterator(h.config()))
                setAside = setAside || entry.path().filename().string().starts_with("settings.json.corrupt-");
            QVERIFY(setAside);
            QVERIFY(!std::filesystem::exists(h.config() / "settings.json"));
            d.terminate();
        }
    }

    // SIGKILL while training: the restarted daemon is still joined, trains
    // on, and the coordinator's count of its accepted work only grows.
    void killedDaemonResumes()
    {
        const Home h = home("killed");
        DaemonProcess d;
        d.start(h);
        auto c = connectTo(h, d);
        call(*c, "join", joinBody());
        if (!waitUntil([&] { return call(*c, "status")["accepted"].toUInt() >= 1; }, 120000)) {
            qWarning("daemon: %s", d.log().constData());
            QFAIL("the daemon had no task accepted");
        }
        uint64_t acceptedBefore = 0;
        QVERIFY(waitUntil(
            [&] {
                auto r = c->call("contributions", Value::map(), 10000);
                acceptedBefore = r ? (*r)["mine"]["rounds_accepted"].toUInt() : 0;
                return acceptedBefore >= 1;
            },
            60000));
        d.kill(); // SIGKILL, mid-task
        c.reset();
        DaemonProcess restarted;
        restarted.start(h);
        auto again = connectTo(h, restarted);
        const Value s = call(*again, "status");
        QCOMPARE(s["project"].toString(), std::string("tiny"));
        if (!waitUntil([&] { return call(*again, "status")["accepted"].toUInt() >= 1; }, 120000)) {
            qWarning("restarted daemon: %s", restarted.log().constData());
            QFAIL("the restarted daemon had no task accepted");
        }
        const uint64_t acceptedAfter = call(*again, "contributions")["mine"]["rounds_accepted"].toUInt();
        QVERIFY(acceptedAfter > acceptedBefore);
        restarted.terminate();
    }

    // A download the daemon had begun (its .part folder and job) is taken
    // up again by the next daemon and finished, verified.
    void halfDoneDownloadResumes()
    {
        const Home h = home("resume");
        // Learn a published round first.
        uint64_t round = 0;
        {
            DaemonProcess d;
            d.start(h);
            auto c = connectTo(h, d);
            call(*c, "settings_set", keyValue("auto_download", false));
            call(*c, "join", joinBody());
            QVERIFY(waitUntil(
                [&] {
                    const Value list = call(*c, "checkpoints")["checkpoints"];
                    if (list.size() == 0)
                        return false;
                    round = list.at(list.size() - 1)["round"].toUInt();
                    return true;
                },
                120000));
            call(*c, "pause");
            d.terminate();
        }
        // What a daemon killed mid-download leaves: the job and a partial file.
        const auto part = h.data() / "checkpoints" / "tiny" / (".round-" + std::to_string(round) + ".part");
        std::filesystem::create_directories(part);
        const nlohmann::json job = {{"hub", m_link}, {"project", "tiny"}, {"round", round}};
        std::ofstream(part / "job.json") << job.dump();
        std::ofstream(part / "model.safetensors.part") << "garbage that is not the checkpoint";
        DaemonProcess d;
        d.start(h);
        auto c = connectTo(h, d);
        const auto folder = h.data() / "checkpoints" / "tiny" / ("round-" + std::to_string(round));
        QVERIFY2(waitUntil([&] { return std::filesystem::exists(folder / "model.safetensors"); }, 60000),
            d.log().constData());
        QVERIFY(!std::filesystem::exists(part));
        d.terminate();
    }
};

QTEST_GUILESS_MAIN(TestDaemon)
#include "tst_daemon.moc"
