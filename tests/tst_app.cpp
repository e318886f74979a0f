// The desktop app against a real daemon and the real demo project on
// loopback (fresh XDG folders): the first start as a new user has it (no
// service running: the app starts it while the wizard is open; the project
// list fills once it answers, the demo preselected) joins the demo and the
// dashboard's charts fill as rounds close; a setting changed in the UI
// reaches the daemon and survives a restart of both; a bad value shows the
// daemon's message; a checkpoint downloads and "Try it" streams text; the
// app survives the daemon being SIGKILLed; the schedule grid's drag edits
// the right cells. Each page is saved as a PNG under the build folder.
#include "ui/byte_size_edit.h"
#include "ui/catalog_model.h"
#include "ui/checkpoint_model.h"
#include "ui/checkpoints_page.h"
#include "ui/daemon_link.h"
#include "ui/dashboard_page.h"
#include "ui/first_run.h"
#include "ui/main_window.h"
#include "ui/schedule_grid.h"
#include "ui/series_chart.h"
#include "ui/settings_page.h"

#include <QAbstractButton>
#include <QCheckBox>
#include <QDoubleSpinBox>
#include <QFile>
#include <QLabel>
#include <QLineEdit>
#include <QListView>
#include <QLocale>
#include <QPlainTextEdit>
#include <QPointer>
#include <QSettings>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QTest>
#include <qcustomplot.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <optional>
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

    // A request through the app's own link, waiting here (the test's
    // event loop runs meanwhile; the app never waits like this).
    DaemonReply ask(const QString& type, const control::Value& body = control::Value::map())
    {
        std::optional<DaemonReply> got;
        m_link->request(type, body, this, [&](const DaemonReply& reply) { got = reply; });
        if (!QTest::qWaitFor([&] { return got.has_value(); }, 30000))
            return {};
        return *got;
    }

    static QLabel* labelNamed(QWidget* parent, const QString& accessibleName)
    {
        for (QLabel* label : parent->findChildren<QLabel*>())
            if (label->accessibleName() == accessibleName)
                return label;
        return nullptr;
    }

    QString settingText(const char* key)
    {
        return QString::fromStdString(ask(QStringLiteral("settings_get")).body["settings"][key].toString());
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
        if (QTest::qWaitFor(noneLeft, 30000))
            return;
        // Where the stop's time went: the daemon logs its shutdown's parts.
        QFile log(m_home.path() + QStringLiteral("/cache/crowdtrain/daemon.log"));
        if (log.open(QIODevice::ReadOnly))
            qWarning().noquote() << "daemon.log, its end:\n" << log.readAll().right(6000);
        QFAIL("a daemon did not stop within 30 s of SIGTERM");
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
    }

    void firstStartWithNoServiceWalksTheWizardToTraining()
    {
        // A new machine: no service, no control folder.
        QVERIFY(daemonsOf(runtimeDir()).empty());
        QVERIFY(!std::filesystem::exists(runtimeDir() + "/crowdtrain"));
        // What gui_main does: the link starts (and starts the service), the
        // wizard opens at once.
        m_link = std::make_unique<DaemonLink>(
            std::filesystem::path(), QStringLiteral(CROWDTRAIN_BIN_DIR "/crowdtrain-worker"));
        m_window = std::make_unique<MainWindow>(*m_link);
        m_window->show();
        m_link->start();
        QVERIFY(m_window->maybeRunFirstRun());
        QPointer<FirstRunWizard> wizard = m_window->findChild<FirstRunWizard*>();
        QVERIFY(wizard);
        ProjectChoicePage* choice = wizard->projectPage();
        QVERIFY(!choice->loaded());
        QAbstractItemModel* projects = wizard->projectList()->model();
        QItemSelectionModel* selection = wizard->projectList()->selectionModel();
        QCOMPARE(projects->rowCount(), 0);
        QVERIFY(choice->waitingLabel()->text().contains(QStringLiteral("Starting the Crowdtrain service")));
        wizard->nameEdit()->setText(QStringLiteral("Ada"));
        wizard->next();
        wizard->next();
        QCOMPARE(wizard->currentId(), int(FirstRunWizard::kProject));
        // Nothing chosen yet: no way on.
        QVERIFY(!choice->isComplete());
        QVERIFY(!wizard->button(QWizard::NextButton)->isEnabled());
        // The service comes up; the list fills with the demo selected.
        QTRY_VERIFY_WITH_TIMEOUT(choice->loaded(), 60000);
        QVERIFY(m_link->attached());
        QVERIFY(choice->waitingLabel()->isHidden());
        QCOMPARE(selection->selectedRows().size(), 1);
        QCOMPARE(selection->selectedRows().first().data(CatalogModel::kProjectRole).toString(),
            QStringLiteral("demo-fortunes"));
        QVERIFY(wizard->button(QWizard::NextButton)->isEnabled());
        // Unselected, only "not now" lets the volunteer on.
        wizard->projectList()->clearSelection();
        QVERIFY(!choice->isComplete());
        QVERIFY(!wizard->button(QWizard::NextButton)->isEnabled());
        choice->notNowBox()->setChecked(true);
        QVERIFY(choice->isComplete());
        choice->notNowBox()->setChecked(false);
        QVERIFY(!choice->isComplete());
        for (int row = 0; row < projects->rowCount(); ++row) {
            const QModelIndex project = projects->index(row, 0);
            selection->select(project,
                project.data(CatalogModel::kProjectRole).toString() == QLatin1String("demo-fortunes")
                    ? QItemSelectionModel::Select
                    : QItemSelectionModel::Deselect);
        }
        QVERIFY(choice->isComplete());
        // Behind the wizard, the dashboard's empty charts say why, at a fixed range.
        SeriesChart* volunteers = m_window->dashboard()->volunteersChart();
        QTRY_COMPARE(volunteers->emptyText(), QStringLiteral("No points yet: join a project"));
        QVERIFY(volunteers->showsEmptyText());
        QCOMPARE(volunteers->plot()->yAxis->range().upper, 2.0);
        wizard->next();
        QCOMPARE(wizard->currentId(), int(FirstRunWizard::kHow));
        QSignalSpy accepted(wizard.data(), &QWizard::accepted);
        wizard->button(QWizard::FinishButton)->click();
        // Accepted, it closes and is deleted (the wizard pointer turns null).
        auto error = [&] { return wizard ? wizard->error() : QString(); };
        QTRY_VERIFY_WITH_TIMEOUT(accepted.count() == 1 || !error().isEmpty(), 60000);
        QVERIFY2(accepted.count() == 1, qPrintable(error()));
        QCOMPARE(m_link->daemonsStarted(), 1); // nothing ran: the app started the service, once
        QCOMPARE(settingText("display_name"), QStringLiteral("Ada"));
        // A training dashboard, in words.
        QTRY_VERIFY_WITH_TIMEOUT(m_window->dashboard()->stateText().startsWith(QStringLiteral("Training")), kLongMs);
        QLabel* device = labelNamed(m_window->dashboard(), QStringLiteral("Device"));
        QVERIFY(device);
        QTRY_COMPARE(device->text(), QStringLiteral("CPU"));
        // Validation points arrive as rounds close; the state speaks plain words.
        SeriesChart* loss = m_window->dashboard()->lossChart();
        QTRY_VERIFY_WITH_TIMEOUT(loss->pointCount(1) >= 3, kLongMs);
        QVERIFY(loss->pointCount(0) >= 2);
        QTRY_VERIFY_WITH_TIMEOUT(m_window->dashboard()->volunteersChart()->pointCount(0) >= 2, 30000);
        QTRY_VERIFY_WITH_TIMEOUT(m_window->dashboard()->machineChart()->pointCount(0) >= 2, 30000);
        QVERIFY(!m_window->dashboard()->stateText().isEmpty());
        QVERIFY(!m_window->maybeRunFirstRun()); // only once
    }

    void aServiceThatAlreadyTrainsNeedsNoWizard()
    {
        // As after joining from the command line: a project, but the app's
        // first-run flag not set. The wizard opens at once and closes itself
        // when the service says what it trains.
        QSettings().remove(QStringLiteral("firstRunDone"));
        QVERIFY(m_window->maybeRunFirstRun());
        QPointer<FirstRunWizard> wizard = m_window->findChild<FirstRunWizard*>();
        QVERIFY(wizard);
        QTRY_VERIFY(!wizard || !wizard->isVisible());
        QVERIFY(QSettings().value(QStringLiteral("firstRunDone")).toBool());
        QVERIFY(!m_window->maybeRunFirstRun());
    }

    void aSettingReachesTheDaemonAndABadValueShowsItsMessage()
    {
        m_window->showPage(MainWindow::kSettings);
        SettingsPage* settings = m_window->settings();
        QTRY_VERIFY(!settings->loading() && settings->editorFor(QStringLiteral("cpu_threads")));
        auto* threads = qobject_cast<QSpinBox*>(settings->editorFor(QStringLiteral("cpu_threads")));
        QVERIFY(threads);
        QSignalSpy applied(settings, &SettingsPage::applied);
        threads->setValue(1);
        emit threads->editingFinished();
        QTRY_COMPARE(applied.count(), 1);
        QCOMPARE(applied.first().at(1).toBool(), true);
        QCOMPARE(ask(QStringLiteral("settings_get")).body["settings"]["cpu_threads"].toInt(), int64_t(1));
        QVERIFY(settings->errorLabel()->isHidden());

        auto* name = qobject_cast<QLineEdit*>(settings->editorFor(QStringLiteral("display_name")));
        QVERIFY(name);
        name->setText(QString(70, QLatin1Char('x'))); // over 64 bytes
        name->setModified(true);
        emit name->editingFinished();
        QTRY_COMPARE(applied.count(), 2);
        QCOMPARE(applied.last().at(1).toBool(), false);
        QVERIFY(!settings->errorLabel()->isHidden());
        QVERIFY2(
            settings->errorLabel()->text().contains(QStringLiteral("64")), qPrintable(settings->errorLabel()->text()));
        QCOMPARE(settingText("display_name"), QStringLiteral("Ada"));

        // Sizes in human units, sent in bytes (the form as rebuilt after the refusal).
        QTRY_VERIFY(!settings->loading());
        auto* cache = qobject_cast<ByteSizeEdit*>(settings->editorFor(QStringLiteral("piece_cache_bytes")));
        QVERIFY(cache);
        QCOMPARE(cache->shownText(), QLocale().toString(2.0, 'f', 2) + QStringLiteral(" GiB"));
        auto* autoMax = qobject_cast<ByteSizeEdit*>(settings->editorFor(QStringLiteral("auto_download_max_bytes")));
        QVERIFY(autoMax);
        QCOMPARE(autoMax->shownText(), QLocale().toString(1.0, 'f', 2) + QStringLiteral(" GiB"));
        cache->number()->setValue(3);
        emit cache->number()->editingFinished();
        QTRY_COMPARE(applied.count(), 3);
        QCOMPARE(applied.last().at(1).toBool(), true);
        QCOMPARE(ask(QStringLiteral("settings_get")).body["settings"]["piece_cache_bytes"].toInt(), int64_t(3) << 30);
    }

    void aCheckpointDownloadsAndTryItStreams()
    {
        m_window->showPage(MainWindow::kCheckpoints);
        CheckpointsPage* page = m_window->checkpoints();
        // The demo publishes every 10 rounds and the daemon downloads it.
        // The page may have selected a newer round that is still remote:
        // the user picks the downloaded one, as the test does.
        uint64_t verified = 0;
        auto ready = [&] {
            page->reload();
            const CheckpointModel* model = page->model();
            for (int row = 0; row < model->rowCount(); ++row)
                if (model->index(row, CheckpointModel::kState).data().toString().contains(QStringLiteral("verified"))) {
                    verified = model->index(row, 0).data(CheckpointModel::kRoundRole).toULongLong();
                    return true;
                }
            return false;
        };
        QTRY_VERIFY_WITH_TIMEOUT(ready(), kLongMs);
        page->selectRound(verified);
        QCOMPARE(page->selectedRound(), verified);
        QTRY_VERIFY(page->generateButton()->isEnabled());
        // What the page told the user (a refusal, a timeout) explains a failure.
        QSignalSpy told(page, &Page::message);
        page->generateButton()->click();
        auto toldText = [&told] {
            QStringList texts;
            for (const QList<QVariant>& args : told)
                texts << args.at(0).toString();
            return texts.join(QStringLiteral(" | "));
        };
        QTRY_VERIFY2_WITH_TIMEOUT(page->output()->toPlainText().size() > 40,
            qPrintable(QStringLiteral("output \"%1\", messages: %2").arg(page->output()->toPlainText(), toldText())),
            60000);
    }

    void pagesRenderToPngs()
    {
        const QStringList files = m_window->saveScreenshots(pngDir());
        QCOMPARE(files.size(), int(MainWindow::kPages));
        for (const QString& file : files)
            QVERIFY(QImage(file).width() > 500);
        // This machine trains on its CPU: its hours are CPU-hours, and an
        // anonymous volunteer is named by a tag of its key.
        QLabel* summary = labelNamed(m_window->page(MainWindow::kContributions), QStringLiteral("Your contribution"));
        QVERIFY(summary);
        QTRY_VERIFY2(summary->text().contains(QStringLiteral("CPU-hours")), qPrintable(summary->text()));
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
        QCOMPARE(ask(QStringLiteral("settings_get")).body["settings"]["cpu_threads"].toInt(), int64_t(1));
        m_window->showPage(MainWindow::kSettings);
        QTRY_VERIFY(m_window->settings()->editorFor(QStringLiteral("cpu_threads")));
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
