// The desktop app's parts without the whole daemon: DaemonLink's
// asynchronous requests against a real ControlServer on a real ipc socket
// (several in flight matched by id, a per-request timeout that fails only
// that request, a reply never delivered before request() returned, no
// service at all); the byte-size editor; the words the app shows for
// volunteers, devices and compute-hours.
#include "net/control/control_server.h"
#include "ui/byte_size_edit.h"
#include "ui/daemon_link.h"
#include "ui/format.h"

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QRegularExpression>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>

#include <chrono>
#include <thread>

using namespace crowdtrain;
using namespace crowdtrain::ui;

class TestAppParts : public QObject {
    Q_OBJECT

    QTemporaryDir m_home;
    std::filesystem::path m_dir;
    std::unique_ptr<control::ControlServer> m_server;
    std::thread m_serving;

    // Finishes `job` (waiting here, in the test), returning its reply.
    DaemonReply wait(DaemonRequest* job)
    {
        std::optional<DaemonReply> got;
        connect(job, &DaemonRequest::finished, this, [&](const DaemonReply& reply) { got = reply; });
        [&] { QTRY_VERIFY_WITH_TIMEOUT(got.has_value(), 10000); }();
        return got.value_or(DaemonReply{});
    }

private slots:
    void initTestCase()
    {
        QVERIFY(m_home.isValid());
        m_dir = std::filesystem::path(m_home.path().toStdString()) / "control";
        // "echo" answers its body; "slow" first sleeps body.ms.
        auto server
            = control::ControlServer::open(m_dir, [](const control::Request& request) -> Result<control::Value> {
                  if (request.type == "slow")
                      std::this_thread::sleep_for(std::chrono::milliseconds(request.body["ms"].toInt()));
                  if (request.type == "fail")
                      return Error::make("bad_value", "refused on purpose");
                  return request.body;
              });
        QVERIFY2(server, server ? "" : server.error().message.c_str());
        m_server = std::move(*server);
        m_serving = std::thread([this] { (void)m_server->run(); });
    }

    void manyRequestsInFlightAreMatchedById()
    {
        DaemonLink link(m_dir, QStringLiteral("/nonexistent/crowdtrain-worker"));
        std::map<int, int64_t> answered;
        for (int n = 0; n < 48; ++n) {
            control::Value body = control::Value::map();
            body.set("n", int64_t(n));
            // Matching is what is tested here, not speed: a loaded machine
            // must not turn a late answer into a timeout.
            DaemonRequest* job = link.request(QStringLiteral("echo"), body, 60'000);
            // Never finished before the caller could connect to it.
            QVERIFY(!job->isFinished());
            connect(job, &DaemonRequest::finished, this,
                [&answered, n](const DaemonReply& reply) { answered[n] = reply.ok ? reply.body["n"].toInt() : -1; });
        }
        QCOMPARE(link.inFlight(), 48);
        // The daemon drops replies past a client's queue of 16
        // (docs/protocol.md §12): the rest wait in the link for their turn.
        // (CI once lost the 17th of 20 replies before the link held them back.)
        QCOMPARE(link.sentInFlight(), control::kReplyQueueLength);
        QTRY_COMPARE_WITH_TIMEOUT(int(answered.size()), 48, 60'000);
        for (const auto& [n, got] : answered)
            QCOMPARE(got, int64_t(n));
        QCOMPARE(link.inFlight(), 0);
        QVERIFY(link.attached()); // an answer means a live service
    }

    void anErrorReplyCarriesTheServicesWords()
    {
        DaemonLink link(m_dir, QStringLiteral("/nonexistent/crowdtrain-worker"));
        const DaemonReply reply = wait(link.request(QStringLiteral("fail")));
        QVERIFY(!reply.ok);
        QCOMPARE(reply.code, QStringLiteral("bad_value"));
        QCOMPARE(reply.message, QStringLiteral("refused on purpose"));
    }

    void aTimeoutFailsOnlyThatRequestAndTheLateReplyIsDropped()
    {
        DaemonLink link(m_dir, QStringLiteral("/nonexistent/crowdtrain-worker"));
        control::Value slow = control::Value::map();
        slow.set("ms", int64_t(600));
        const DaemonReply late = wait(link.request(QStringLiteral("slow"), slow, 100));
        QVERIFY(!late.ok);
        QCOMPARE(late.code, QStringLiteral("no_daemon"));
        QCOMPARE(link.inFlight(), 0);
        // The next request gets its own answer, not the late one (the
        // socket was reopened once nothing was in flight).
        control::Value body = control::Value::map();
        body.set("n", int64_t(42));
        const DaemonReply next = wait(link.request(QStringLiteral("echo"), body, 5000));
        QVERIFY2(next.ok, qPrintable(next.message));
        QCOMPARE(next.body["n"].toInt(), int64_t(42));
        QVERIFY(!next.body.has("ms"));
    }

    void withNoServiceARequestFailsLaterNotAtOnce()
    {
        DaemonLink link(std::filesystem::path(m_home.path().toStdString()) / "nothing-here",
            QStringLiteral("/nonexistent/crowdtrain-worker"));
        DaemonRequest* job = link.request(QStringLiteral("status"));
        QVERIFY(!job->isFinished());
        const DaemonReply reply = wait(job);
        QVERIFY(!reply.ok);
        QCOMPARE(reply.code, QStringLiteral("no_daemon"));
        QVERIFY(!link.attached());
    }

    void aServiceThatCannotStartIsReportedInWords()
    {
        DaemonLink link(std::filesystem::path(m_home.path().toStdString()) / "nothing-here",
            QStringLiteral("/nonexistent/crowdtrain-worker"));
        QSignalSpy failed(&link, &DaemonLink::startFailed);
        link.start();
        QVERIFY(failed.wait(5000));
        QVERIFY2(failed.first().at(0).toString().contains(QStringLiteral("/nonexistent/crowdtrain-worker")),
            qPrintable(failed.first().at(0).toString()));
        QVERIFY(!link.attached());
        QCOMPARE(link.daemonsStarted(), 0);
    }

    void byteSizesShowInHumanUnits()
    {
        ByteSizeEdit edit;
        edit.setBytes(1000000000);
        QCOMPARE(edit.unit()->currentText(), QStringLiteral("MiB"));
        QCOMPARE(edit.number()->value(), 953.67);
        edit.setBytes(int64_t(2) << 30);
        QCOMPARE(edit.unit()->currentText(), QStringLiteral("GiB"));
        QCOMPARE(edit.number()->value(), 2.0);
        QSignalSpy edited(&edit, &ByteSizeEdit::edited);
        // Another unit shows the same size, and sends nothing.
        edit.unit()->setCurrentIndex(0);
        QCOMPARE(edit.number()->value(), 2048.0);
        emit edit.number()->editingFinished();
        QCOMPARE(edited.count(), 0);
        // A new number is sent in bytes.
        edit.unit()->setCurrentIndex(1);
        edit.number()->setValue(3.5);
        emit edit.number()->editingFinished();
        QCOMPARE(edited.count(), 1);
        QCOMPARE(edited.first().at(0).value<int64_t>(), int64_t(3.5 * 1024 * 1024 * 1024));
        QCOMPARE(edit.bytes(), int64_t(3.5 * 1024 * 1024 * 1024));
    }

    void volunteersDevicesAndHoursInWords()
    {
        const QString key = QStringLiteral("-RT*/(-cabcdefghijklmnopqrstuvwxyz0123456");
        const QString name = volunteerName(QString(), key);
        QVERIFY(name.startsWith(QStringLiteral("anonymous volunteer ")));
        const QString tag = name.mid(QStringLiteral("anonymous volunteer ").size());
        QCOMPARE(tag.size(), 4);
        QVERIFY(QRegularExpression(QStringLiteral("^[0-9A-F]{4}$")).match(tag).hasMatch());
        QCOMPARE(volunteerName(QString(), key), name); // the same key, the same name
        QVERIFY(volunteerName(QString(), key + QLatin1Char('x')) != name);
        QCOMPARE(volunteerName(QStringLiteral("Ada"), key), QStringLiteral("Ada"));
        QCOMPARE(deviceWords(QStringLiteral("auto")), QStringLiteral("Automatic"));
        QCOMPARE(deviceWords(QStringLiteral("cpu")), QStringLiteral("CPU"));
        QCOMPARE(deviceWords(QStringLiteral("cuda:1")), QStringLiteral("GPU 1 (CUDA)"));
        QCOMPARE(deviceWords(QStringLiteral("cuda:0,cuda:1")), QStringLiteral("2 GPUs (CUDA)"));
        QCOMPARE(deviceWords(QStringLiteral("cpu,cpu")), QStringLiteral("2 devices (cpu,cpu)"));
        QCOMPARE(trainingDeviceWords(QStringLiteral("cuda:0"), QString()), QStringLiteral("GPU 0 (CUDA)"));
        QCOMPARE(trainingDeviceWords(QStringLiteral("cuda:0,cuda:1,cuda:2"), QStringLiteral("sharded")),
            QStringLiteral("3 GPUs (CUDA), sharded (ZeRO-3)"));
        QCOMPARE(computeHoursName(QStringLiteral("cuda:0,cuda:1")), QStringLiteral("GPU-hours"));
        QCOMPARE(computeHoursName(QStringLiteral("cpu")), QStringLiteral("CPU-hours"));
        QCOMPARE(computeHoursName(QStringLiteral("cuda:0")), QStringLiteral("GPU-hours"));
        QCOMPARE(computeHoursName(QString()), QStringLiteral("compute-hours"));
    }

    void cleanupTestCase()
    {
        m_server->stop();
        m_serving.join();
        m_server.reset();
    }
};

QTEST_MAIN(TestAppParts)
#include "tst_app_parts.moc"
