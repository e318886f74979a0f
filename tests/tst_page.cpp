// The public project page (crowdtrain-server --http) against a real
// coordinator process: the JSON API follows the rounds a volunteer closes,
// hostile display names come out escaped, downloads keep to the project's
// checkpoint_access, the server is read-only and bounded per client, and
// the page in a real headless browser (Debian's chromium) draws the loss
// curve, growing as rounds close, with no console error and no request
// outside the page's own server.
// libtorch's headers (through the page's) before Qt's, whose `slots` they use.
#include "engine/diloco/codec.h"
#include "net/page/hub_address.h"
#include "net/page/page_html.h"

#include "coordinator_process.h"
#include "protocol_client.h"

#include <QProcess>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTest>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <regex>

using namespace crowdtrain;
using namespace crowdtrain::testing;
using json = nlohmann::json;

namespace {

constexpr uint64_t kTaskTokens = 20 * 8 * 32; // the test spec's H * B * T
const std::string kHostileName = "<script>alert(\"pwned\")</script>&'";
const std::string kEscapedName = "&lt;script&gt;alert(&quot;pwned&quot;)&lt;/script&gt;&amp;&#39;";

std::string int8Payload(const std::vector<float>& delta)
{
    return diloco::encode(diloco::Codec::Int8, delta.data(), int64_t(delta.size()));
}

struct Browser {
    std::string dom;
    std::string console; // the page's console messages and failed loads
};

} // namespace

class TestPage : public QObject {
    Q_OBJECT

    QTemporaryDir m_dir;
    zmq::context_t m_context;
    ServerProcess m_server; // with --http on a free loopback port
    std::unique_ptr<httplib::Client> m_http;
    std::optional<ProtocolVolunteer> m_volunteer;
    net::CurveKeyPair m_identity;
    uint64_t m_version = 0;

    std::filesystem::path root() const { return m_dir.path().toStdString(); }

    httplib::Result get(const std::string& path)
    {
        auto result = m_http->Get(path);
        if (!result)
            qFatal("GET %s: %s", path.c_str(), httplib::to_string(result.error()).c_str());
        return result;
    }

    json getJson(const std::string& path)
    {
        auto result = get(path);
        if (result->status != 200)
            qFatal("GET %s: HTTP %d", path.c_str(), result->status);
        return json::parse(result->body);
    }

    // One round: a task, a small random update, the close.
    void closeRound()
    {
        // A fresh session with the same key: the browser's seconds may have
        // outlived the last one (the volunteer sends no heartbeats meanwhile).
        m_volunteer = joinProject(m_context, m_server.first["requests"].get<std::string>(),
            m_server.first["public_key"].get<std::string>(), "tiny", kHostileName, m_identity);
        auto task = askForTask(*m_volunteer, m_version);
        QVERIFY(task);
        const auto delta
            = randomDelta(int64_t(net::manifestElements(m_volunteer->joined.manifest)), 1e-3f, m_version + 1);
        auto submitted = uploadAndSubmit(*m_volunteer, *task, int8Payload(delta), kTaskTokens);
        QVERIFY2(submitted, submitted ? "" : submitted.error().message.c_str());
        ++m_version;
        QVERIFY(waitFor([&] { return projectVersion(*m_volunteer) == m_version; }, 30000));
    }

    // Chromium headless, every host name but the page's own unresolvable.
    Browser openInBrowser(const std::string& path)
    {
        QProcess chromium;
        dieWithTheTest(chromium);
        const std::string url = m_server.first["page"].get<std::string>() + path.substr(1);
        chromium.start(QStringLiteral("chromium"),
            {QStringLiteral("--headless=new"), QStringLiteral("--no-sandbox"), QStringLiteral("--disable-gpu"),
                QStringLiteral("--no-first-run"), QStringLiteral("--enable-logging=stderr"), QStringLiteral("--v=0"),
                QStringLiteral("--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"),
                QStringLiteral("--user-data-dir=") + m_dir.filePath(QStringLiteral("chromium")),
                QStringLiteral("--virtual-time-budget=8000"), QStringLiteral("--dump-dom"),
                QString::fromStdString(url)});
        if (!chromium.waitForFinished(120000))
            qFatal("chromium did not finish");
        Browser b;
        b.dom = chromium.readAllStandardOutput().toStdString();
        for (const QByteArray& line : chromium.readAllStandardError().split('\n'))
            if (line.contains(":CONSOLE") || line.contains("net::ERR"))
                b.console += line.toStdString() + "\n";
        return b;
    }

private slots:
    void initTestCase()
    {
        QVERIFY(m_dir.isValid());
        const auto data = preparedText(root());
        SpecOptions options{.tasksPerRound = 1, .checkpointEvery = 1, .prompts = {"ROMEO:"}};
        const auto spec = writeSpec(root() / "project", data, options);
        // The description is hostile too.
        auto text = json::parse(std::ifstream(spec));
        text["description"] = "A <b>tiny</b> demo & test";
        text["license"] = "CC-BY-4.0";
        text["token_goal"] = 100000;
        std::ofstream(spec) << text.dump(2);
        QVERIFY(m_server.start(spec, root() / "state", 1000, "tcp://127.0.0.1:*",
            {QStringLiteral("--http"), QStringLiteral("127.0.0.1:0")}));
        const std::string page = m_server.first["page"].get<std::string>();
        QVERIFY2(page.starts_with("http://127.0.0.1:"), page.c_str());
        m_http = std::make_unique<httplib::Client>(page.substr(0, page.size() - 1));
        m_http->set_read_timeout(20, 0);
        auto identity = net::generateKeyPair();
        QVERIFY(identity);
        m_identity = *identity;
    }

    void theServerPrintsTheHubLinkAndThePage()
    {
        const std::string link = m_server.first["hub_link"].get<std::string>();
        const std::string requests = m_server.first["requests"].get<std::string>();
        const std::string port = requests.substr(requests.rfind(':') + 1);
        QVERIFY2(
            std::regex_match(link, std::regex("crowdtrain://127\\.0\\.0\\.1:" + port + "/[0-9a-f]{64}")), link.c_str());
        QVERIFY(page::hubLink("tcp://0.0.0.0:7400", m_server.first["public_key"].get<std::string>(), "hub.example.org")
                    .starts_with("crowdtrain://hub.example.org:7400/"));
        QVERIFY(!page::parseHttpAddress("8080"));
        QVERIFY(!page::parseHttpAddress("127.0.0.1:70000"));
        QCOMPARE(page::parseHttpAddress("[::1]:8080")->host, std::string("::1"));
    }

    void theApiFollowsTheRounds()
    {
        for (int i = 0; i < 2; ++i)
            closeRound();
        // The page's snapshot follows within its refresh period.
        QVERIFY(waitFor(
            [&] {
                json p = getJson("/api/projects/tiny");
                return p["tokens_trained"] == 2 * kTaskTokens && p["checkpoints"].size() == 2
                    && !p["checkpoints"][0]["val_loss"].is_null();
            },
            30000));
        json p = getJson("/api/projects/tiny");
        QVERIFY(p["name"] == "tiny");
        QVERIFY(p["version"] == 2);
        QVERIFY(p["token_goal"] == 100000);
        QVERIFY(p["codec"] == "int8");
        QVERIFY(p["terms"]["license"] == "CC-BY-4.0");
        QVERIFY(p["terms"]["checkpoint_access"] == "everyone");
        QVERIFY(p["hub_link"] == m_server.first["hub_link"]);
        QVERIFY(p["how_to_join"].get<std::string>().find("crowdtrain-worker join") != std::string::npos);
        QCOMPARE(p["leaderboard"].size(), std::size_t(1));
        // The JSON carries the hostile name as data.
        QVERIFY(p["leaderboard"][0]["display_name"].get<std::string>() == kHostileName);
        QVERIFY(p["leaderboard"][0]["tokens"] == 2 * kTaskTokens);
        QVERIFY(p["leaderboard"][0]["accepted"] == 2);
        QVERIFY(p["leaderboard"][0]["rejected"] == 0);
        // What the volunteers train on: as their join named it.
        QVERIFY(p["leaderboard"][0]["device"] == "CPU");
        QCOMPARE(p["devices"].size(), std::size_t(1));
        QVERIFY(p["devices"][0]["device"] == "CPU");
        QVERIFY(p["devices"][0]["volunteers"] == 1);
        QVERIFY(p["devices"][0]["tokens"] == 2 * kTaskTokens);
        QVERIFY2(
            p["checkpoints"][0]["devices"].size() == 1 && p["checkpoints"][0]["devices"][0]["tokens"] == kTaskTokens,
            p["checkpoints"][0].dump().c_str());
        // Newest checkpoint first, with what the model wrote after the prompt.
        QVERIFY(p["checkpoints"][0]["round"] == 2);
        QVERIFY2(p["checkpoints"][0]["samples"][0]["prompt"] == "ROMEO:", p["checkpoints"].dump().c_str());
        QVERIFY(!p["checkpoints"][0]["samples"][0]["text"].get<std::string>().empty());

        // Train and validation loss per round, against tokens and time.
        json m = getJson("/api/projects/tiny/metrics?since=0");
        QVERIFY(m["more"] == false);
        QVERIFY(m["rows"].size() >= 3); // round 0's evaluation, rounds 1 and 2
        json last = m["rows"].back();
        QVERIFY(last[0] == 2);
        QVERIFY(last[1] == 2 * kTaskTokens);
        QVERIFY(last[2].is_number() && last[3].is_number());
        QVERIFY(last[5].get<uint64_t>() > 1'600'000'000'000ull);
        // since= gives only what is new.
        json recent = getJson("/api/projects/tiny/metrics?since=2");
        QVERIFY(recent["rows"].size() >= 1);
        for (const json& row : recent["rows"])
            QVERIFY(row[0] == 2);
        QVERIFY(getJson("/api/projects")[0]["url"] == "/projects/tiny");
    }

    void thePageEscapesEveryField()
    {
        auto r = get("/projects/tiny");
        QCOMPARE(r->status, 200);
        QCOMPARE(r->get_header_value("Content-Type"), std::string("text/html; charset=utf-8"));
        QVERIFY(r->get_header_value("Content-Security-Policy").find("script-src 'self'") != std::string::npos);
        QCOMPARE(r->get_header_value("X-Content-Type-Options"), std::string("nosniff"));
        QVERIFY(!r->has_header("Set-Cookie"));
        const std::string& html = r->body;
        QVERIFY2(html.find(kEscapedName) != std::string::npos, html.c_str());
        QVERIFY(html.find("A &lt;b&gt;tiny&lt;/b&gt; demo &amp; test") != std::string::npos);
        QVERIFY(html.find("int8 (8 bits per parameter)") != std::string::npos);
        QVERIFY(html.find("alert(\"pwned") == std::string::npos);
        QVERIFY(html.find("<b>tiny") == std::string::npos);
        // Only the page's own two scripts, and no address of another site.
        const std::regex script("<script[^>]*>");
        std::vector<std::string> scripts;
        for (auto it = std::sregex_iterator(html.begin(), html.end(), script); it != std::sregex_iterator(); ++it)
            scripts.push_back(it->str());
        QCOMPARE(scripts.size(), 2u);
        QVERIFY(html.find("http://") == std::string::npos && html.find("https://") == std::string::npos);
        // The numbers read without JavaScript.
        QVERIFY(html.find("<dd id=\"tokens\">" + page::groupedNumber(2 * kTaskTokens) + "</dd>") != std::string::npos);
        QVERIFY(html.find("<table id=\"devices\">") != std::string::npos);
        QVERIFY2(html.find("Trained on: CPU (1 volunteer, " + page::groupedNumber(kTaskTokens) + " tokens)")
                != std::string::npos,
            html.c_str());
        QCOMPARE(page::escapeHtml("a\xff<b\x01"), std::string("a\xEF\xBF\xBD&lt;b"));

        auto js = get("/static/page.js");
        QCOMPARE(js->get_header_value("Content-Type"), std::string("text/javascript; charset=utf-8"));
        QVERIFY(js->body.find("innerHTML") == std::string::npos);
        QCOMPARE(get("/api/projects/tiny")->get_header_value("Content-Type"), std::string("application/json"));
    }

    // This project names no trusted key and neither calibrates nor
    // evaluates: the server's log, the page and its API say it is open to
    // fresh keys (TrustSpec::unprotected) and what the host can set.
    void anUnprotectedProjectSaysSo()
    {
        const std::string html = get("/projects/tiny")->body;
        QVERIFY2(html.find("<p class=\"warning\" id=\"unprotected\" role=\"note\"><strong>Unprotected against "
                           "Sybils:</strong> no key is trusted")
                != std::string::npos,
            html.c_str());
        const json p = getJson("/api/projects/tiny");
        QVERIFY(p["unprotected"].is_string());
        QVERIFY(p["unprotected"].get<std::string>().find("trust.keys") != std::string::npos);
        std::string log;
        QVERIFY(waitFor(
            [&] {
                QCoreApplication::processEvents(); // the server's stderr into its QProcess buffer
                log += m_server.stderrText().toStdString();
                return log.find("tiny: unprotected against Sybils: no key is trusted") != std::string::npos;
            },
            10000));
    }

    void downloadsKeepToTheTerms()
    {
        json p = getJson("/api/projects/tiny");
        bool sawConfig = false;
        for (const json& file : p["checkpoints"][0]["files"]) {
            if (file["name"] != "config.json")
                continue;
            auto r = get(file["url"].get<std::string>());
            QCOMPARE(r->status, 200);
            QCOMPARE(r->body.size(), file["bytes"].get<std::size_t>());
            QCOMPARE(net::sha256Hex(r->body), file["sha256"].get<std::string>());
            QVERIFY(r->get_header_value("Content-Disposition").starts_with("attachment"));
            sawConfig = true;
        }
        QVERIFY(sawConfig);
        QCOMPARE(get("/projects/tiny/checkpoints/round-2/../../ledger.sqlite")->status, 404);
        QCOMPARE(get("/projects/tiny/checkpoints/round-2/ledger.sqlite")->status, 404);
        QCOMPARE(get("/projects/tiny/checkpoints/round-99/config.json")->status, 404);
    }

    void theBrowserDrawsTheLiveLossCurve()
    {
        if (QStandardPaths::findExecutable(QStringLiteral("chromium")).isEmpty())
            QFAIL("chromium is missing: installer/install-deps.sh installs it");
        const Browser first = openInBrowser("/projects/tiny");
        QVERIFY2(first.console.empty(), first.console.c_str());
        std::smatch loaded;
        QVERIFY2(std::regex_search(first.dom, loaded, std::regex("data-loaded=\"([0-9]+)\"")), first.dom.c_str());
        const int rowsBefore = std::stoi(loaded[1]);
        QVERIFY(rowsBefore >= 3);
        // Three charts drawn by uPlot, the hostile name shown as text.
        QVERIFY(std::regex_search(first.dom, std::regex("id=\"chart-loss-tokens\"[^>]*>.*?<canvas")));
        QVERIFY(first.dom.find("&lt;script&gt;alert(\"pwned\")&lt;/script&gt;&amp;'") != std::string::npos);
        QVERIFY(first.dom.find("<script>alert") == std::string::npos);

        closeRound();
        QVERIFY(waitFor([&] { return getJson("/api/projects/tiny")["version"] == m_version; }, 30000));
        const Browser second = openInBrowser("/projects/tiny");
        QVERIFY2(second.console.empty(), second.console.c_str());
        QVERIFY(std::regex_search(second.dom, loaded, std::regex("data-loaded=\"([0-9]+)\"")));
        QVERIFY2(std::stoi(loaded[1]) > rowsBefore, second.dom.c_str());
    }

    // Last: it spends 127.0.0.1's request budget.
    void theServerIsReadOnlyAndBounded()
    {
        auto post = m_http->Post("/api/projects/tiny", "x", "text/plain");
        QVERIFY(post);
        QCOMPARE(post->status, 405);
        QCOMPARE(get("/api/projects/nope")->status, 404);
        QCOMPARE(get("/api/projects/nope")->body, std::string("{\"error\":\"not_found\"}"));
        QCOMPARE(get("/api/projects/tiny/metrics?since=-1")->status, 400);
        QCOMPARE(get("/static/nothing.js")->status, 404);
        int limited = 0;
        for (int i = 0; i < 200 && limited == 0; ++i) {
            auto r = get("/api/projects/tiny");
            if (r->status == 429) {
                ++limited;
                QCOMPARE(r->get_header_value("Retry-After"), std::string("1"));
            }
        }
        QVERIFY(limited > 0);
        QVERIFY(waitFor([&] { return get("/api/projects/tiny")->status == 200; }, 5000));
    }
};

QTEST_GUILESS_MAIN(TestPage)
#include "tst_page.moc"
