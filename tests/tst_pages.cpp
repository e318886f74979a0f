// The app's pages against a fake link (tests/fake_link.h): no daemon, so
// each runs in milliseconds. Tables are models fed by replies and events:
// a reload that adds one checkpoint inserts one row (no reset, the
// selection stays), a download event changes one cell and draws a
// progress bar, a catalog refresh keeps the current project (in the
// projects' tree and in the first-run wizard's list, whose Finish joins
// the project chosen); generated text streams even when pieces come before
// the request's reply; settings refused show the daemon's words and the
// editors update in place; the window routes events to its pages and
// reloads them on attaching.
#include "fake_link.h"
#include "ui/catalog_model.h"
#include "ui/checkpoint_model.h"
#include "ui/checkpoints_page.h"
#include "ui/contributions_page.h"
#include "ui/dashboard_page.h"
#include "ui/first_run.h"
#include "ui/leaderboard_model.h"
#include "ui/log_page.h"
#include "ui/main_window.h"
#include "ui/progress_delegate.h"
#include "ui/projects_page.h"
#include "ui/series_chart.h"
#include "ui/settings_page.h"

#include <QAbstractItemModelTester>
#include <QApplication>
#include <QCheckBox>
#include <QLabel>
#include <QLineEdit>
#include <QListView>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTableView>
#include <QTest>
#include <QTextBrowser>
#include <QTreeView>

using namespace crowdtrain;
using namespace crowdtrain::ui;
using crowdtrain::test::FakeLink;

namespace {

control::Value checkpoint(uint64_t round, const char* state, uint64_t doneBytes = 0)
{
    control::Value c = control::Value::map();
    c.set("round", round);
    c.set("tokens", round * 1000);
    c.set("val_loss", 5.0 - double(round) / 10);
    c.set("bytes", 1000);
    c.set("done_bytes", doneBytes);
    c.set("created_ms", 1700000000000 + round);
    c.set("state", state);
    c.set("samples", control::Value::array());
    return c;
}

control::Value checkpointList(std::initializer_list<control::Value> items)
{
    control::Value list = control::Value::map();
    list.set("project", "demo-fortunes");
    control::Value all = control::Value::array();
    for (const control::Value& c : items)
        all.push(c);
    list.set("checkpoints", all);
    return list;
}

control::Value project(const char* name, uint64_t volunteers, uint64_t trained)
{
    control::Value model = control::Value::map();
    model.set("n_layer", 2).set("n_embd", 64).set("n_head", 2).set("block_size", 64).set("vocab_size", 512);
    control::Value p = control::Value::map();
    p.set("name", name).set("description", "A test project").set("parameters", 100000).set("model", model);
    p.set("volunteers_online", volunteers).set("tokens_trained", trained).set("token_goal", 1000);
    p.set("newest_checkpoint", control::Value()).set("round", 3).set("license", "MIT");
    return p;
}

control::Value hub(const char* link, const char* label, std::initializer_list<control::Value> projects)
{
    control::Value h = control::Value::map();
    h.set("link", link).set("label", label).set("reachable", true).set("last_seen_ms", 0);
    control::Value all = control::Value::array();
    for (const control::Value& p : projects)
        all.push(p);
    h.set("projects", all);
    return h;
}

control::Value catalog(std::initializer_list<control::Value> hubs)
{
    control::Value c = control::Value::map();
    control::Value all = control::Value::array();
    for (const control::Value& h : hubs)
        all.push(h);
    c.set("hubs", all).set("joined_hub", "demo").set("joined_project", "demo-fortunes");
    return c;
}

control::Value setting(const char* key, const char* type, control::Value value, int64_t min = 0, int64_t max = 0)
{
    control::Value s = control::Value::map();
    s.set("key", key).set("type", type).set("value", std::move(value)).set("description", "what it does");
    if (std::string_view(type) == "int")
        s.set("min", min).set("max", max);
    return s;
}

control::Value described(int64_t threads)
{
    control::Value all = control::Value::array();
    all.push(setting("display_name", "string", "Ada"));
    all.push(setting("cpu_threads", "int", threads, 0, 64));
    all.push(setting("busy_share_in_use", "int", 25, 0, 100));
    all.push(setting("piece_cache_bytes", "int", int64_t(2) << 30, 0, int64_t(1) << 40));
    all.push(setting("max_gpu_temperature_c", "int", 83, 40, 100));
    control::Value body = control::Value::map();
    body.set("described", all);
    return body;
}

control::Value leader(const char* key, uint64_t tokens)
{
    control::Value c = control::Value::map();
    c.set("public_key", key).set("display_name", "").set("tokens", tokens).set("gpu_hours", 0.5);
    c.set("rounds_accepted", 3).set("rounds_rejected", 0);
    return c;
}

control::Value contributions(std::initializer_list<control::Value> board)
{
    control::Value all = control::Value::array();
    for (const control::Value& c : board)
        all.push(c);
    control::Value mine = leader("me", 10);
    control::Value b = control::Value::map();
    b.set("project", "demo-fortunes").set("mine", mine).set("share", 0.25).set("rank", 2);
    b.set("contributors", uint64_t(all.size())).set("leaderboard", all);
    return b;
}

} // namespace

class TestPages : public QObject {
    Q_OBJECT

private slots:
    void reloadsAskedMeanwhileCountAsOne()
    {
        FakeLink link;
        LogPage page(link);
        page.reload();
        page.reload();
        page.reload();
        QCOMPARE(link.sent(), QStringList{QStringLiteral("log")});
        QVERIFY(page.loading());
        control::Value lines = control::Value::map();
        lines.set("lines", control::Value::array());
        QVERIFY(link.answer(QStringLiteral("log"), lines));
        // One more for the calls made while the first was in flight.
        QCOMPARE(link.sent().size(), 2);
        QVERIFY(link.answer(QStringLiteral("log"), lines));
        QVERIFY(!page.loading());
        QCOMPARE(link.pendingCount(), 0);
    }

    void checkpointsTableChangesOnlyTheRowsThatDiffer()
    {
        FakeLink link;
        CheckpointsPage page(link);
        page.show();
        page.reload();
        QVERIFY(link.answer(
            QStringLiteral("checkpoints"), checkpointList({checkpoint(10, "ready", 1000), checkpoint(20, "remote")})));
        CheckpointModel* model = page.model();
        QCOMPARE(model->rowCount(), 2);
        QCOMPARE(model->index(0, CheckpointModel::kRound).data().toString(), QStringLiteral("20")); // newest first
        // The newest downloaded one is selected: it can be deleted and tried.
        QCOMPARE(page.selectedRound(), uint64_t(10));
        QVERIFY(page.button(CheckpointsPage::kDelete)->isEnabled());
        QVERIFY(!page.button(CheckpointsPage::kDownload)->isEnabled());
        QVERIFY(page.generateButton()->isEnabled());
        QVERIFY(model->index(1, CheckpointModel::kState).data().toString().contains(QStringLiteral("verified")));

        QSignalSpy reset(model, &QAbstractItemModel::modelReset);
        QSignalSpy inserted(model, &QAbstractItemModel::rowsInserted);
        QSignalSpy removed(model, &QAbstractItemModel::rowsRemoved);
        QSignalSpy changed(model, &QAbstractItemModel::dataChanged);
        const QPersistentModelIndex ten = model->index(1, 0);
        // A new checkpoint: one row inserted at the top, nothing else touched.
        page.reload();
        QVERIFY(link.answer(QStringLiteral("checkpoints"),
            checkpointList({checkpoint(10, "ready", 1000), checkpoint(20, "remote"), checkpoint(30, "remote")})));
        QCOMPARE(reset.count(), 0);
        QCOMPARE(inserted.count(), 1);
        QCOMPARE(inserted.first().at(1).toInt(), 0);
        QCOMPARE(changed.count(), 0);
        QCOMPARE(ten.row(), 2);
        QCOMPARE(page.selectedRound(), uint64_t(10));

        // Download progress: one cell changes, drawn as a bar.
        page.table()->selectRow(model->rowOf(20));
        QVERIFY(page.button(CheckpointsPage::kDownload)->isEnabled());
        control::Value event = control::Value::map();
        event.set("project", "demo-fortunes").set("round", 20).set("state", "downloading").set("done_bytes", 250);
        event.set("bytes_per_second", 1000.0);
        page.onEvent(QStringLiteral("download"), event);
        QCOMPARE(changed.count(), 1);
        const QModelIndex cell = changed.first().at(0).toModelIndex();
        QCOMPARE(cell.row(), model->rowOf(20));
        QCOMPARE(cell.column(), int(CheckpointModel::kState));
        QCOMPARE(cell.data(kProgressRole).toInt(), 250);
        QVERIFY2(cell.data().toString().contains(QStringLiteral("25%")), qPrintable(cell.data().toString()));
        QVERIFY(page.button(CheckpointsPage::kPause)->isEnabled());
        // A new state: the list is asked for again; more bytes alone are not.
        QVERIFY(link.pending(QStringLiteral("checkpoints")));
        QVERIFY(link.answer(QStringLiteral("checkpoints"),
            checkpointList(
                {checkpoint(10, "ready", 1000), checkpoint(20, "downloading", 250), checkpoint(30, "remote")})));
        event.set("done_bytes", 900);
        page.onEvent(QStringLiteral("download"), event);
        QVERIFY(!link.pending(QStringLiteral("checkpoints")));
        QCOMPARE(model->index(model->rowOf(20), CheckpointModel::kState).data(kProgressRole).toInt(), 900);
        // Another project's download changes nothing.
        event.set("project", "other");
        const int changes = int(changed.count());
        page.onEvent(QStringLiteral("download"), event);
        QCOMPARE(int(changed.count()), changes);

        // A checkpoint gone from the hub: its row only is removed.
        page.reload();
        QVERIFY(link.answer(
            QStringLiteral("checkpoints"), checkpointList({checkpoint(10, "ready", 1000), checkpoint(30, "remote")})));
        QCOMPARE(removed.count(), 1);
        QCOMPARE(reset.count(), 0);
        QCOMPARE(model->rowCount(), 2);
        QCOMPARE(model->rowOf(20), -1);
    }

    void aDownloadShowsAsAProgressBar()
    {
        FakeLink link;
        CheckpointsPage page(link);
        page.resize(900, 600);
        page.show();
        QVERIFY(QTest::qWaitForWindowExposed(&page));
        page.reload();
        QVERIFY(link.answer(QStringLiteral("checkpoints"), checkpointList({checkpoint(20, "paused", 0)})));
        page.table()->clearSelection();
        const QRect cell = page.table()->visualRect(page.model()->index(0, CheckpointModel::kState));
        QVERIFY(cell.width() > 50);
        auto cellImage = [&] { return page.table()->viewport()->grab(cell).toImage(); };
        const QImage empty = cellImage();
        control::Value event = control::Value::map();
        event.set("project", "demo-fortunes").set("round", 20).set("state", "paused").set("done_bytes", 1000);
        page.onEvent(QStringLiteral("download"), event);
        const QImage full = cellImage();
        // The bar's chunk fills the cell: most of its pixels change colour.
        int differing = 0;
        for (int y = 0; y < full.height(); ++y)
            for (int x = 0; x < full.width(); ++x)
                differing += full.pixel(x, y) != empty.pixel(x, y);
        QVERIFY2(differing > full.width() * full.height() / 3, qPrintable(QString::number(differing)));
    }

    void generatedTextStreamsEvenBeforeItsId()
    {
        FakeLink link;
        CheckpointsPage page(link);
        page.reload();
        QVERIFY(link.answer(QStringLiteral("checkpoints"), checkpointList({checkpoint(10, "ready", 1000)})));
        page.prompt()->setText(QStringLiteral("Hello"));
        page.generate();
        QVERIFY(!page.generateButton()->isEnabled());
        const control::Value body = link.bodyOf(QStringLiteral("generate"));
        QCOMPARE(body["round"].toUInt(), uint64_t(10));
        QCOMPARE(body["prompt"].toString(), std::string("Hello"));
        control::Value piece = control::Value::map();
        piece.set("id", 7).set("text", ", world").set("done", false);
        page.onEvent(QStringLiteral("generated"), piece); // before the reply
        control::Value id = control::Value::map();
        id.set("id", 7);
        QVERIFY(link.answer(QStringLiteral("generate"), id));
        QCOMPARE(page.output()->toPlainText(), QStringLiteral("Hello, world"));
        control::Value stranger = control::Value::map();
        stranger.set("id", 8).set("text", "nope").set("done", true);
        page.onEvent(QStringLiteral("generated"), stranger);
        piece.set("text", "!").set("done", true);
        page.onEvent(QStringLiteral("generated"), piece);
        QCOMPARE(page.output()->toPlainText(), QStringLiteral("Hello, world!"));
        QVERIFY(page.generateButton()->isEnabled());
    }

    void catalogRefreshKeepsTheCurrentProject()
    {
        FakeLink link;
        ProjectsPage page(link);
        page.reload();
        QVERIFY(link.answer(QStringLiteral("catalog"),
            catalog({hub("demo", "", {project("demo-fortunes", 1, 500)}),
                hub("crowdtrain://hub:1/key", "Hub", {project("alpha", 2, 100), project("beta", 3, 0)})})));
        CatalogModel* model = page.model();
        QCOMPARE(model->rowCount(), 2);
        QCOMPARE(model->rowCount(model->index(1, 0)), 2);
        QCOMPARE(model->index(0, 0).data().toString(), QStringLiteral("Local demo"));
        // The joined project is current, marked, and cannot be joined again.
        const QModelIndex demo = model->index(0, 0, model->index(0, 0));
        QCOMPARE(page.tree()->currentIndex(), demo);
        QCOMPARE(demo.data().toString(), QStringLiteral("demo-fortunes (joined)"));
        QVERIFY(!page.joinButton()->isEnabled());
        QVERIFY(page.leaveButton()->isEnabled());
        QCOMPARE(demo.siblingAtColumn(CatalogModel::kProgress).data(kProgressRole).toInt(), 500);

        const QModelIndex beta = model->find(QStringLiteral("crowdtrain://hub:1/key"), QStringLiteral("beta"));
        page.tree()->setCurrentIndex(beta);
        QVERIFY(page.detail()->toPlainText().contains(QStringLiteral("beta")));
        QVERIFY(page.joinButton()->isEnabled());

        QSignalSpy reset(model, &QAbstractItemModel::modelReset);
        QSignalSpy removed(model, &QAbstractItemModel::rowsRemoved);
        QSignalSpy changed(model, &QAbstractItemModel::dataChanged);
        // alpha is gone, beta has more volunteers: one row removed, one changed.
        page.reload();
        QVERIFY(link.answer(QStringLiteral("catalog"),
            catalog({hub("demo", "", {project("demo-fortunes", 1, 500)}),
                hub("crowdtrain://hub:1/key", "Hub", {project("beta", 9, 0)})})));
        QCOMPARE(reset.count(), 0);
        QCOMPARE(removed.count(), 1);
        QCOMPARE(changed.count(), 1);
        QCOMPARE(page.tree()->currentIndex().data(CatalogModel::kProjectRole).toString(), QStringLiteral("beta"));
        QCOMPARE(page.tree()->currentIndex().siblingAtColumn(CatalogModel::kVolunteers).data().toString(),
            QStringLiteral("9"));

        page.joinSelected();
        const control::Value join = link.bodyOf(QStringLiteral("join"));
        QCOMPARE(join["hub"].toString(), std::string("crowdtrain://hub:1/key"));
        QCOMPARE(join["project"].toString(), std::string("beta"));
        QVERIFY(!page.joinButton()->isEnabled());
        QSignalSpy said(&page, &Page::message);
        QVERIFY(link.answer(QStringLiteral("join")));
        QVERIFY(said.first().at(0).toString().contains(QStringLiteral("Joined beta")));
        QVERIFY(link.pending(QStringLiteral("catalog"))); // and the catalog again
    }

    void theWizardsProjectListUpdatesInPlaceAndJoinsTheChoice()
    {
        FakeLink link;
        FirstRunWizard wizard(link);
        ProjectChoicePage* choice = wizard.projectPage();
        QAbstractItemModel* projects = wizard.projectList()->model();
        QItemSelectionModel* selection = wizard.projectList()->selectionModel();
        QAbstractItemModelTester tester(projects, QAbstractItemModelTester::FailureReportingMode::QtTest);
        QCOMPARE(projects->rowCount(), 0);
        QVERIFY(!choice->isComplete());
        QVERIFY(link.answer(QStringLiteral("catalog"),
            catalog({hub("crowdtrain://hub:1/key", "Hub", {project("alpha", 2, 100), project("beta", 3, 0)}),
                hub("demo", "", {project("demo-fortunes", 1, 500)})})));
        QVERIFY(choice->loaded());
        QVERIFY(choice->waitingLabel()->isHidden());
        // One list, hub after hub; the demo is preselected though not first.
        QCOMPARE(projects->rowCount(), 3);
        QCOMPARE(projects->index(0, 0).data().toString(), QStringLiteral("alpha\nA test project"));
        QCOMPARE(projects->index(2, 0).data().toString(), QStringLiteral("Local demo: demo-fortunes\nA test project"));
        QCOMPARE(selection->selectedRows(), QModelIndexList{projects->index(2, 0)});
        QVERIFY(choice->isComplete());
        selection->clearSelection();
        QVERIFY(!choice->isComplete());
        choice->notNowBox()->setChecked(true);
        QVERIFY(choice->isComplete());
        choice->notNowBox()->setChecked(false);
        selection->setCurrentIndex(projects->index(1, 0), QItemSelectionModel::ClearAndSelect);
        QVERIFY(choice->isComplete());

        // A second reply: alpha gone, the demo's hub first, gamma new, beta
        // changed. The rows move, nothing starts over and beta stays chosen.
        QSignalSpy reset(projects, &QAbstractItemModel::modelReset);
        QSignalSpy removed(projects, &QAbstractItemModel::rowsRemoved);
        QSignalSpy moved(projects, &QAbstractItemModel::rowsMoved);
        QSignalSpy inserted(projects, &QAbstractItemModel::rowsInserted);
        QSignalSpy changed(projects, &QAbstractItemModel::dataChanged);
        control::Value beta = project("beta", 9, 0);
        beta.set("description", "Now longer");
        choice->setCatalog(catalog({hub("demo", "", {project("demo-fortunes", 1, 500)}),
            hub("crowdtrain://hub:1/key", "Hub", {project("gamma", 1, 0), beta})}));
        QCOMPARE(reset.count(), 0);
        QCOMPARE(removed.count(), 1);
        QCOMPARE(moved.count(), 1);
        QCOMPARE(inserted.count(), 1);
        QCOMPARE(changed.count(), 1);
        QCOMPARE(projects->rowCount(), 3);
        QCOMPARE(projects->index(0, 0).data(CatalogModel::kProjectRole).toString(), QStringLiteral("demo-fortunes"));
        QCOMPARE(projects->index(1, 0).data(CatalogModel::kProjectRole).toString(), QStringLiteral("gamma"));
        QCOMPARE(selection->selectedRows(), QModelIndexList{projects->index(2, 0)});
        QCOMPARE(selection->currentIndex(), projects->index(2, 0));
        QCOMPARE(projects->index(2, 0).data().toString(), QStringLiteral("beta\nNow longer"));

        // Finish: the name, the preset, then the chosen project is joined.
        QSignalSpy accepted(&wizard, &QWizard::accepted);
        wizard.accept();
        QVERIFY(link.answer(QStringLiteral("settings_set")));
        QVERIFY(link.answer(QStringLiteral("settings_set")));
        const control::Value join = link.bodyOf(QStringLiteral("join"));
        QCOMPARE(join["hub"].toString(), std::string("crowdtrain://hub:1/key"));
        QCOMPARE(join["project"].toString(), std::string("beta"));
        QVERIFY(link.answer(QStringLiteral("join")));
        QCOMPARE(accepted.count(), 1);
        QVERIFY(wizard.error().isEmpty());
    }

    // The project page opens on its choices, never on the buttons (Tab
    // would reach "Back" first): on the list, or on "Not now" while that is
    // ticked and the list disabled, however the page is reached.
    void theWizardsProjectPageStartsOnItsChoices()
    {
        FakeLink link;
        FirstRunWizard wizard(link);
        QVERIFY(link.answer(QStringLiteral("catalog"), catalog({hub("demo", "", {project("demo-fortunes", 1, 500)})})));
        wizard.show();
        QVERIFY(QTest::qWaitForWindowActive(&wizard));
        const auto click = [&wizard](QWizard::WizardButton which) {
            const int before = wizard.currentId();
            QTest::mouseClick(wizard.button(which), Qt::LeftButton);
            return wizard.currentId() != before;
        };
        while (wizard.currentPage() != wizard.projectPage())
            QVERIFY(click(QWizard::NextButton));
        QCOMPARE(QApplication::focusWidget(), static_cast<QWidget*>(wizard.projectList()));
        QVERIFY(click(QWizard::NextButton));
        QVERIFY(click(QWizard::BackButton));
        QCOMPARE(QApplication::focusWidget(), static_cast<QWidget*>(wizard.projectList()));
        wizard.projectPage()->notNowBox()->setChecked(true);
        QVERIFY(click(QWizard::BackButton));
        QVERIFY(click(QWizard::NextButton));
        QCOMPARE(QApplication::focusWidget(), static_cast<QWidget*>(wizard.projectPage()->notNowBox()));
    }

    void contributionsNameTheHoursAndMarkThisVolunteer()
    {
        FakeLink link;
        ContributionsPage page(link);
        page.reload();
        control::Value status = control::Value::map();
        status.set("device_in_use", "cpu");
        QVERIFY(link.answer(QStringLiteral("status"), status));
        QVERIFY(link.answer(QStringLiteral("contributions"), contributions({leader("other", 20), leader("me", 10)})));
        QVERIFY2(page.summary()->text().contains(QStringLiteral("CPU-hours")), qPrintable(page.summary()->text()));
        LeaderboardModel* model = page.model();
        QCOMPARE(model->rowCount(), 2);
        QVERIFY(model->index(1, LeaderboardModel::kVolunteer).data().toString().endsWith(QStringLiteral("(you)")));
        QVERIFY(!model->index(0, LeaderboardModel::kVolunteer).data().toString().endsWith(QStringLiteral("(you)")));

        QSignalSpy reset(model, &QAbstractItemModel::modelReset);
        QSignalSpy inserted(model, &QAbstractItemModel::rowsInserted);
        QSignalSpy changed(model, &QAbstractItemModel::dataChanged);
        page.reload();
        QVERIFY(link.answer(QStringLiteral("status"), status));
        QVERIFY(link.answer(
            QStringLiteral("contributions"), contributions({leader("other", 20), leader("me", 10), leader("new", 1)})));
        QCOMPARE(reset.count(), 0);
        QCOMPARE(inserted.count(), 1);
        QCOMPARE(changed.count(), 0);
        QCOMPARE(model->index(2, LeaderboardModel::kRank).data().toString(), QStringLiteral("3"));

        page.reload();
        QVERIFY(link.answer(QStringLiteral("status"), status));
        QVERIFY(link.refuse(QStringLiteral("contributions"), QStringLiteral("not_joined"), QStringLiteral("no")));
        QVERIFY(page.summary()->text().contains(QStringLiteral("Join a project")));
        QCOMPARE(model->rowCount(), 0);
    }

    void aRefusedSettingShowsTheDaemonsWordsAndTheValueKept()
    {
        FakeLink link;
        SettingsPage page(link);
        page.reload();
        control::Value status = control::Value::map();
        control::Value gpu = control::Value::map();
        gpu.set("available", false).set("why", "no NVIDIA driver");
        control::Value limits = control::Value::map();
        limits.set("gpu", gpu);
        status.set("limits", limits);
        QVERIFY(link.answer(QStringLiteral("status"), status));
        QVERIFY(link.answer(QStringLiteral("settings_get"), described(0)));
        auto* threads = qobject_cast<QSpinBox*>(page.editorFor(QStringLiteral("cpu_threads")));
        QVERIFY(threads);
        QCOMPARE(threads->maximum(), 64);
        QVERIFY(page.editorFor(QStringLiteral("busy_share_in_use")));
        QVERIFY(page.editorFor(QStringLiteral("piece_cache_bytes")));
        // Without NVML the GPU limits are shown greyed, with the reason.
        QWidget* temperature = page.editorFor(QStringLiteral("max_gpu_temperature_c"));
        QVERIFY(!temperature->isEnabled());
        QCOMPARE(temperature->toolTip(), QStringLiteral("No NVIDIA driver"));

        QSignalSpy applied(&page, &SettingsPage::applied);
        threads->setValue(99);
        emit threads->editingFinished();
        const control::Value sent = link.bodyOf(QStringLiteral("settings_set"));
        QCOMPARE(sent["key"].toString(), std::string("cpu_threads"));
        QCOMPARE(sent["value"].toInt(), int64_t(64)); // the spin box's own range
        QVERIFY(link.refuse(QStringLiteral("settings_set"), QStringLiteral("bad_value"),
            QStringLiteral("cpu_threads must be at most 8 on this machine")));
        QCOMPARE(applied.count(), 1);
        QCOMPARE(applied.first().at(1).toBool(), false);
        QVERIFY(!page.errorLabel()->isHidden());
        QVERIFY(page.errorLabel()->text().contains(QStringLiteral("at most 8")));
        // The form reloads: the same editors, showing the value the daemon kept.
        QVERIFY(link.answer(QStringLiteral("status"), status));
        QVERIFY(link.answer(QStringLiteral("settings_get"), described(2)));
        QCOMPARE(page.editorFor(QStringLiteral("cpu_threads")), threads);
        QCOMPARE(threads->value(), 2);
        QCOMPARE(link.pendingCount(), 0); // showing a value sends nothing

        threads->setValue(4);
        emit threads->editingFinished();
        QVERIFY(link.answer(QStringLiteral("settings_set")));
        QCOMPARE(applied.count(), 2);
        QCOMPARE(applied.last().at(1).toBool(), true);
        QVERIFY(page.errorLabel()->isHidden());
    }

    // A volunteer training across two GPUs: the device tile says so and how.
    void theDashboardSaysHowSeveralGpusShareTheWork()
    {
        FakeLink link;
        DashboardPage page(link);
        page.reload();
        control::Value status = control::Value::map();
        status.set("state", "training").set("project", "gpt2-xl").set("device", "cuda");
        status.set("device_in_use", "cuda:0,cuda:1").set("parallel_mode", "data_parallel");
        QVERIFY(link.answer(QStringLiteral("status"), status));
        QCOMPARE(page.tileText(DashboardPage::kDevice), QStringLiteral("2 GPUs (CUDA), data parallel"));
        QCOMPARE(page.tileToolTip(DashboardPage::kDevice), QString());
    }

    // The memory planner's choice and why: the device tile's tooltip.
    void theDashboardSaysTheMemoryPlan()
    {
        FakeLink link;
        DashboardPage page(link);
        page.reload();
        control::Value status = control::Value::map();
        status.set("state", "training").set("project", "gpt2-xl").set("device", "cuda").set("device_in_use", "cuda:0");
        status.set("memory_plan", "8-bit AdamW moments (10 B a parameter): the fp32 state does not fit");
        QVERIFY(link.answer(QStringLiteral("status"), status));
        QCOMPARE(page.tileText(DashboardPage::kDevice), QStringLiteral("GPU 0 (CUDA)"));
        QCOMPARE(page.tileToolTip(DashboardPage::kDevice),
            QStringLiteral("Memory: 8-bit AdamW moments (10 B a parameter): the fp32 state does not fit"));
    }

    // An NVIDIA GPU without the CUDA core: the dashboard says what to install.
    void theDashboardSaysHowToAddTheCudaCore()
    {
        FakeLink link;
        DashboardPage page(link);
        page.reload();
        control::Value status = control::Value::map();
        status.set("state", "training").set("project", "demo").set("device", "auto").set("device_in_use", "cpu");
        status.set("core", "cpu")
            .set("core_advice",
                "This computer has an NVIDIA GPU, but Crowdtrain's CUDA core is not installed, so it trains on the "
                "CPU. "
                "Add it with: sudo apt install crowdtrain-core-cuda");
        QVERIFY(link.answer(QStringLiteral("status"), status));
        QVERIFY(page.coreAdvice().contains(QStringLiteral("sudo apt install crowdtrain-core-cuda")));
        QCOMPARE(page.tileText(DashboardPage::kDevice), QStringLiteral("CPU"));
    }

    // With the CUDA core installed (no advice) nothing is shown.
    void theDashboardGivesNoAdviceWithoutAReason()
    {
        FakeLink link;
        DashboardPage page(link);
        page.reload();
        control::Value status = control::Value::map();
        status.set("state", "training").set("project", "demo").set("device", "auto").set("device_in_use", "cuda:0");
        status.set("core", "cuda").set("core_advice", "");
        QVERIFY(link.answer(QStringLiteral("status"), status));
        QVERIFY(page.coreAdvice().isEmpty());
        QCOMPARE(page.tileText(DashboardPage::kDevice), QStringLiteral("GPU 0 (CUDA)"));
    }

    void theDashboardShowsStatusAndAddsOnlyNewRounds()
    {
        FakeLink link;
        DashboardPage page(link);
        page.reload();
        control::Value status = control::Value::map();
        status.set("state", "training").set("project", "demo-fortunes").set("step", 5).set("steps", 10);
        status.set("loss", 2.5).set("device_in_use", "cpu").set("round", 3).set("accepted", 4).set("rejected", 1);
        status.set("busy_share", 0.5).set("effective_tokens_per_second", 1200.0);
        QVERIFY(link.answer(QStringLiteral("status"), status));
        QVERIFY(page.stateText().startsWith(QStringLiteral("Training")));
        QVERIFY(page.detailText().contains(QStringLiteral("step 5 of 10")));
        QCOMPARE(page.tileText(DashboardPage::kDevice), QStringLiteral("CPU"));
        QCOMPARE(page.tileText(DashboardPage::kRound), QStringLiteral("3"));
        QCOMPARE(page.tileText(DashboardPage::kWork), QStringLiteral("4 / 1"));
        QCOMPARE(page.tileText(DashboardPage::kBusy), QStringLiteral("50%"));

        auto row = [](uint64_t round) {
            control::Value r = control::Value::map();
            r.set("round", round).set("tokens", round * 100).set("train_loss", 3.0).set("val_loss", 3.1);
            r.set("time_ms", 1700000000000 + round * 1000).set("volunteers", 2);
            return r;
        };
        control::Value metrics = control::Value::map();
        control::Value rows = control::Value::array();
        rows.push(row(1));
        rows.push(row(2));
        metrics.set("project", "demo-fortunes").set("rows", rows);
        QVERIFY(link.answer(QStringLiteral("metrics"), metrics));
        QCOMPARE(page.lossChart()->pointCount(0), 2);
        QCOMPARE(page.volunteersChart()->pointCount(0), 2);
        // An event repeating round 2 adds round 3 only.
        control::Value more = control::Value::array();
        more.push(row(2));
        more.push(row(3));
        metrics.set("rows", more);
        page.onEvent(QStringLiteral("metrics"), metrics);
        QCOMPARE(page.lossChart()->pointCount(0), 3);
        QCOMPARE(page.lossChart()->pointCount(1), 3);

        QTest::mouseClick(page.pauseButton(), Qt::LeftButton);
        QVERIFY(link.pending(QStringLiteral("pause")));
    }

    void theWindowRoutesEventsAndReloadsOnAttaching()
    {
        FakeLink link;
        MainWindow window(link);
        auto* log = qobject_cast<LogPage*>(window.page(MainWindow::kLog));
        QVERIFY(log);
        control::Value line = control::Value::map();
        line.set("line", "joined demo-fortunes");
        link.emitEvent(QStringLiteral("log"), line);
        QCOMPARE(log->text(), QStringLiteral("joined demo-fortunes"));
        // Attaching: every page asks for what it missed.
        link.setAttached(true);
        for (const char* type : {"status", "metrics", "machine_history", "catalog", "checkpoints", "log"})
            QVERIFY2(link.pending(QString::fromLatin1(type)), type);
        control::Value state = control::Value::map();
        state.set("state", "paused").set("text", "paused by you").set("reason", "by you").set("project", "");
        link.emitEvent(QStringLiteral("state"), state);
        QCOMPARE(window.statusText(), QStringLiteral("Service: paused by you"));
        QVERIFY(window.dashboard()->stateText().startsWith(QStringLiteral("Paused")));
    }

    void theHeatLimitIsNotifiedByItsCodeNotItsWords()
    {
        FakeLink link;
        MainWindow window(link);
        QSignalSpy notified(&window, &MainWindow::notified);
        auto state = [&](const char* text, const char* reason, control::LimitCode code) {
            control::Value body = control::Value::map();
            body.set("state", "paused").set("text", text).set("reason", reason);
            body.set("limit_code", control::wireName(code));
            link.emitEvent(QStringLiteral("state"), body);
        };
        // Words that mention degrees, from another limit: no notification.
        state(
            "paused: program 40 \u00B0C-monitor runs", "program 40 \u00B0C-monitor runs", control::LimitCode::Program);
        QCOMPARE(notified.count(), 0);
        state("paused: GPU at 87 \u00B0C", "GPU at 87 \u00B0C", control::LimitCode::Temperature);
        QCOMPARE(notified.count(), 1);
        QCOMPARE(notified.first().at(1).toString(), QStringLiteral("GPU at 87 \u00B0C"));
        // The same state again is not news.
        state("paused: GPU at 87 \u00B0C", "GPU at 87 \u00B0C", control::LimitCode::Temperature);
        QCOMPARE(notified.count(), 1);
        state("paused: cooling down", "cooling down for 2 min", control::LimitCode::Cooling);
        QCOMPARE(notified.count(), 2);
        control::Value published = control::Value::map();
        published.set("project", "demo-fortunes").set("round", 10).set("val_loss", 3.5);
        link.emitEvent(QStringLiteral("checkpoint_published"), published);
        QCOMPARE(notified.count(), 3);
        QVERIFY(notified.last().at(1).toString().contains(QStringLiteral("round 10")));
    }
};

QTEST_MAIN(TestPages)
#include "tst_pages.moc"
