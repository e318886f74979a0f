// The desktop app against a real daemon and the real demo project on
// loopback (fresh XDG folders): the first-run flow joins the demo and the
// dashboard's charts fill as rounds close; a setting changed in the UI
// reaches the daemon and survives a restart of both; a bad value shows the
// daemon's message; a checkpoint downloads and "Try it" streams text; the
// app survives the daemon being SIGKILLed; the schedule grid's drag edits
// the right cells. Each page is saved as a PNG under the build folder.
#include "ui/daemon_link.h"
#include "ui/first_run.h"
#include "ui/main_window.h"
#include "ui/pages.h"
#include "ui/schedule_grid.h"
#include "ui/series_chart.h"

#include <QCheckBox>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QPlainTextEdit>
#include <QSpinBox>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QTest>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>

using namespace crowdtrain;
using namespace crowdtrain::ui;

namespace {

constexpr int kLongMs = 180000;

// The crowdtrain-daemon processes whose environment names `runtimeDir`.
std::vector<pid_t> daemonsOf(const std::string& runtimeDir)
{
    std::vector<pid_t> pids;
    for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
        const std::string name = entry.path().filename().string();
        if (name.find_first_not_of("0123456789") != std::string::npos)
            continue;
        std::ifstream comm(entry.path() / "comm");
        std::string command;
        std::getline(comm, command);
        if (command.rfind("crowdtrain-daem", 0) != 0)
            continue;
        std::ifstream environ(entry.path() / "environ");
        std::stringstream all;
        all << environ.rdbuf();
        if (all.str().find("XDG_RUNTIME_DIR=" + runtimeDir + '\0') != std::string::npos)
            pids.push_back(pid_t(std::stoi(name)));
    }
    return pids;
}

} // namespace

class TestApp : public QObject {
    Q_OBJECT

    QTemporaryDir m_home;
    std::unique_ptr<DaemonLink> m_link;
    std::unique_ptr<MainWindow> m_window;

    std::string runtimeDir() const { return m_home.path().toStdString() + "/run"; }
    QString pngDir() const { return QStringLiteral(CROWDTRAIN_BIN_DIR "/../app-pages"); }

    void openApp()
    {
        m_link = std::make_unique<DaemonLink>(
            std::filesystem::path(), QStringLiteral(CROWDTRAIN_BIN_DIR "/crowdtrain-worker"));
        m_window = std::make_unique<MainWindow>(*m_link);
        m_window->show();
        m_link->start();
        QTRY_VERIFY_WITH_TIMEOUT(m_link->attached(), 30000);
    }

    void closeApp()
    {
        m_window.reset();
        m_link.reset();
    }

    // Asks every daemon of this test to stop, again on each try: one the
    // app started a moment ago may only now have become a daemon.
    void stopDaemons()
    {
        auto noneLeft = [this] {
            const auto pids = daemonsOf(runtimeDir());
            for (pid_t pid : pids)
                ::kill(pid, SIGTERM);
            return pids.empty();
        };
        QTRY_VERIFY_WITH_TIMEOUT(noneLeft(), 30000);
    }

private slots:
    void initTestCase()
    {
        QVERIFY(m_home.isValid());
        if (!std::filesystem::is_directory("/usr/share/games/fortunes"))
            QFAIL("the demo's corpus is missing: installer/install-deps.sh installs the fortunes package");
        const QByteArray home = m_home.path().toUtf8();
        std::filesystem::create_directories(runtimeDir());
        std::filesystem::permissions(runtimeDir(), std::filesystem::perms::owner_all);
        qputenv("HOME", home);
        qputenv("XDG_RUNTIME_DIR", home + "/run");
        qputenv("XDG_CONFIG_HOME", home + "/config");
        qputenv("XDG_DATA_HOME", home + "/data");
        qputenv("XDG_CACHE_HOME", home + "/cache");
        QCoreApplication::setOrganizationName(QStringLiteral("Crowdtrain"));
        QCoreApplication::setApplicationName(QStringLiteral("crowdtrain-test"));
        openApp();
        QCOMPARE(m_link->daemonsStarted(), 1); // nothing ran: the app started the service
    }

    void firstRunJoinsTheDemoAndChartsFill()
    {
        QVERIFY(m_window->maybeRunFirstRun());
        auto* wizard = m_window->findChild<FirstRunWizard*>();
        QVERIFY(wizard);
        QVERIFY(wizard->projectList()->currentItem());
        QCOMPARE(
            wizard->projectList()->currentItem()->data(Qt::UserRole + 1).toString(), QStringLiteral("demo-fortunes"));
        wizard->nameEdit()->setText(QStringLiteral("Ada"));
        wizard->accept();
        QCOMPARE(wizard->error(), QString());
        QCOMPARE(QString::fromStdString(
                     m_link->call(QStringLiteral("settings_get")).body["settings"]["display_name"].toString()),
            QStringLiteral("Ada"));
        // Validation points arrive as rounds close; the state speaks plain words.
        SeriesChart* loss = m_window->dashboard()->lossChart();
        QTRY_VERIFY_WITH_TIMEOUT(loss->pointCount(1) >= 3, kLongMs);
        QVERIFY(loss->pointCount(0) >= 2);
        QTRY_VERIFY_WITH_TIMEOUT(m_window->dashboard()->volunteersChart()->pointCount(0) >= 2, 30000);
        QTRY_VERIFY_WITH_TIMEOUT(m_window->dashboard()->machineChart()->pointCount(0) >= 2, 30000);
        QVERIFY(!m_window->dashboard()->stateText().isEmpty());
        QVERIFY(!m_window->maybeRunFirstRun()); // only once
    }

    void aSettingReachesTheDaemonAndABadValueShowsItsMessage()
    {
        m_window->showPage(MainWindow::kSettings);
        SettingsPage* settings = m_window->settings();
        auto* threads = qobject_cast<QSpinBox*>(settings->editorFor(QStringLiteral("cpu_threads")));
        QVERIFY(threads);
        threads->setValue(1);
        emit threads->editingFinished();
        QCOMPARE(m_link->call(QStringLiteral("settings_get")).body["settings"]["cpu_threads"].toInt(), int64_t(1));
        QVERIFY(settings->errorLabel()->isHidden());

        auto* name = qobject_cast<QLineEdit*>(settings->editorFor(QStringLiteral("display_name")));
        QVERIFY(name);
        name->setText(QString(70, QLatin1Char('x'))); // over 64 bytes
        name->setModified(true);
        emit name->editingFinished();
        QVERIFY(!settings->errorLabel()->isHidden());
        QVERIFY2(
            settings->errorLabel()->text().contains(QStringLiteral("64")), qPrintable(settings->errorLabel()->text()));
        QCOMPARE(QString::fromStdString(
                     m_link->call(QStringLiteral("settings_get")).body["settings"]["display_name"].toString()),
            QStringLiteral("Ada"));
    }

    void aCheckpointDownloadsAndTryItStreams()
    {
        m_window->showPage(MainWindow::kCheckpoints);
        CheckpointsPage* page = m_window->checkpoints();
        // The demo publishes every 10 rounds and the daemon downloads it.
        auto ready = [&] {
            page->reload();
            for (int row = 0; row < page->table()->rowCount(); ++row)
                if (page->table()->item(row, 5)
                    && page->table()->item(row, 5)->text().contains(QStringLiteral("verified")))
                    return true;
            return false;
        };
        QTRY_VERIFY_WITH_TIMEOUT(ready(), kLongMs);
        page->generate();
        QTRY_VERIFY_WITH_TIMEOUT(page->output()->toPlainText().size() > 40, 60000);
    }

    void pagesRenderToPngs()
    {
        const QStringList files = m_window->saveScreenshots(pngDir());
        QCOMPARE(files.size(), int(MainWindow::kPages));
        for (const QString& file : files)
            QVERIFY(QImage(file).width() > 500);
    }

    void survivesTheDaemonBeingKilled()
    {
        SeriesChart* loss = m_window->dashboard()->lossChart();
        const int before = loss->pointCount(1);
        const auto pids = daemonsOf(runtimeDir());
        QCOMPARE(pids.size(), std::size_t(1));
        // What the window says at the moment the link is lost (the app may
        // restart the service and say so a moment later).
        QString saidWhenLost;
        auto watch = connect(m_link.get(), &DaemonLink::attachedChanged, this, [&](bool attached) {
            if (!attached && saidWhenLost.isEmpty())
                saidWhenLost = m_window->statusText();
        });
        ::kill(pids.front(), SIGKILL);
        QTRY_VERIFY_WITH_TIMEOUT(!saidWhenLost.isEmpty(), 20000);
        disconnect(watch);
        QVERIFY2(saidWhenLost.contains(QStringLiteral("not running")), qPrintable(saidWhenLost));
        // It starts a new one and reattaches; the charts keep their history and go on.
        QTRY_VERIFY_WITH_TIMEOUT(m_link->attached(), 60000);
        QVERIFY(m_link->daemonsStarted() >= 2);
        QVERIFY(loss->pointCount(1) >= before);
        QTRY_VERIFY_WITH_TIMEOUT(loss->pointCount(1) > before, kLongMs);
    }

    void settingsSurviveARestartOfBoth()
    {
        closeApp();
        stopDaemons();
        openApp();
        QCOMPARE(m_link->call(QStringLiteral("settings_get")).body["settings"]["cpu_threads"].toInt(), int64_t(1));
        m_window->showPage(MainWindow::kSettings);
        auto* threads = qobject_cast<QSpinBox*>(m_window->settings()->editorFor(QStringLiteral("cpu_threads")));
        QVERIFY(threads);
        QCOMPARE(threads->value(), 1);
    }

    void scheduleGridDragEditsTheRightCells()
    {
        ScheduleGrid grid;
        grid.resize(700, 240);
        grid.show();
        QVERIFY(QTest::qWaitForWindowExposed(&grid));
        QString edited;
        connect(&grid, &ScheduleGrid::edited, this, [&](const QString& value) { edited = value; });
        // Drag from Tuesday 02:00 to Wednesday 04:00: those six hours become off.
        QTest::mousePress(&grid, Qt::LeftButton, {}, grid.cellRect(1, 2).center());
        QMouseEvent move(QEvent::MouseMove, grid.cellRect(2, 4).center(),
            grid.mapToGlobal(grid.cellRect(2, 4).center()), Qt::NoButton, Qt::LeftButton, Qt::NoModifier);
        QCoreApplication::sendEvent(&grid, &move);
        QTest::mouseRelease(&grid, Qt::LeftButton, {}, grid.cellRect(2, 4).center());
        for (int day = 0; day < 7; ++day)
            for (int hour = 0; hour < 24; ++hour) {
                const bool off = day >= 1 && day <= 2 && hour >= 2 && hour <= 4;
                QCOMPARE(grid.allowed(day, hour), !off);
            }
        QCOMPARE(edited, grid.value());
        QCOMPARE(edited.count(QLatin1Char('0')), 6);
        QCOMPARE(edited.mid(24 + 2, 3), QStringLiteral("000"));
        // Dragging back over an off cell turns the rectangle on again.
        QTest::mousePress(&grid, Qt::LeftButton, {}, grid.cellRect(1, 2).center());
        QTest::mouseRelease(&grid, Qt::LeftButton, {}, grid.cellRect(1, 2).center());
        QVERIFY(grid.allowed(1, 2));
        QVERIFY(!grid.setValue(QStringLiteral("01")));
        QVERIFY(grid.setValue(QString(168, QLatin1Char('0'))));
        QVERIFY(!grid.allowed(6, 23));
    }

    void cleanupTestCase()
    {
        closeApp();
        stopDaemons();
    }
};

QTEST_MAIN(TestApp)
#include "tst_app.moc"
