#include "ui/main_window.h"

#include "ui/checkpoints_page.h"
#include "ui/contributions_page.h"
#include "ui/dashboard_page.h"
#include "ui/first_run.h"
#include "ui/format.h"
#include "ui/link.h"
#include "ui/log_page.h"
#include "ui/projects_page.h"
#include "ui/settings_page.h"

#include <QAction>
#include <QApplication>
#include <QCloseEvent>
#include <QDir>
#include <QElapsedTimer>
#include <QHBoxLayout>
#include <QLabel>
#include <QListWidget>
#include <QMenu>
#include <QMessageBox>
#include <QPointer>
#include <QSettings>
#include <QStackedWidget>
#include <QStatusBar>
#include <QSystemTrayIcon>

// The icons are compiled into this static library; Qt registers them on request.
static void initUiResources()
{
    Q_INIT_RESOURCE(resources);
}

namespace crowdtrain::ui {

MainWindow::MainWindow(Link& link, QWidget* parent)
    : QMainWindow(parent)
    , m_link(link)
{
    initUiResources();
    setWindowTitle(tr("Crowdtrain"));
    setWindowIcon(QIcon(QStringLiteral(":/icons/crowdtrain.svg")));
    auto* central = new QWidget(this);
    auto* layout = new QHBoxLayout(central);
    m_sidebar = new QListWidget(central);
    m_sidebar->setAccessibleName(tr("Pages"));
    m_sidebar->setIconSize(QSize(24, 24));
    m_sidebar->setFixedWidth(190);
    m_sidebar->setSpacing(2);
    m_stack = new QStackedWidget(central);
    layout->addWidget(m_sidebar);
    layout->addWidget(m_stack, 1);
    setCentralWidget(central);

    m_pages[kDashboard] = new DashboardPage(link, m_stack);
    m_pages[kProjects] = new ProjectsPage(link, m_stack);
    m_pages[kCheckpoints] = new CheckpointsPage(link, m_stack);
    m_pages[kContributions] = new ContributionsPage(link, m_stack);
    m_pages[kSettings] = new SettingsPage(link, m_stack);
    m_pages[kLog] = new LogPage(link, m_stack);
    const QString names[]
        = {tr("Dashboard"), tr("Projects"), tr("Checkpoints"), tr("Contributions"), tr("Settings"), tr("Log")};
    const char* icons[] = {"dashboard", "projects", "checkpoints", "contributions", "settings", "log"};
    for (int i = 0; i < kPages; ++i) {
        m_stack->addWidget(m_pages[i]);
        m_pages[i]->setAccessibleName(names[i]);
        auto* item = new QListWidgetItem(
            QIcon(QStringLiteral(":/icons/%1.svg").arg(QLatin1String(icons[i]))), names[i], m_sidebar);
        item->setSizeHint(QSize(0, 36));
        connect(
            m_pages[i], &Page::message, this, [this](const QString& text) { statusBar()->showMessage(text, 8000); });
    }
    connect(m_sidebar, &QListWidget::currentRowChanged, this, &MainWindow::showPage);

    m_status = new QLabel(this);
    m_status->setAccessibleName(tr("Service status"));
    statusBar()->addPermanentWidget(m_status);

    connect(&m_link, &Link::event, this, &MainWindow::onEvent);
    connect(&m_link, &Link::attachedChanged, this, &MainWindow::onAttached);
    connect(&m_link, &Link::notice, this, [this](const QString& text) { statusBar()->showMessage(text, 10000); });
    setupTray();
    m_sidebar->setCurrentRow(kDashboard);
    resize(1180, 800);
}

void MainWindow::showPage(int index)
{
    if (index < 0 || index >= kPages)
        return;
    if (m_sidebar->currentRow() != index)
        m_sidebar->setCurrentRow(index);
    m_stack->setCurrentIndex(index);
    if (m_link.attached())
        m_pages[index]->reload();
}

Page* MainWindow::page(int index) const
{
    return m_pages[index];
}

DashboardPage* MainWindow::dashboard() const
{
    return static_cast<DashboardPage*>(m_pages[kDashboard]);
}

CheckpointsPage* MainWindow::checkpoints() const
{
    return static_cast<CheckpointsPage*>(m_pages[kCheckpoints]);
}

SettingsPage* MainWindow::settings() const
{
    return static_cast<SettingsPage*>(m_pages[kSettings]);
}

QString MainWindow::statusText() const
{
    return m_status->text();
}

void MainWindow::onAttached(bool attached)
{
    if (!attached) {
        m_status->setText(tr("The Crowdtrain service is not running; starting it..."));
        return;
    }
    m_status->setText(tr("Connected to the Crowdtrain service"));
    // Every page fetches what it missed; charts keep their history and add to it.
    for (Page* page : m_pages)
        page->reload();
}

void MainWindow::onEvent(const QString& type, const control::Value& body)
{
    for (Page* page : m_pages)
        page->onEvent(type, body);
    if (type == qname(control::event::kState) || type == qname(control::event::kProgress)) {
        const QString state = text(body["text"]);
        m_status->setText(tr("Service: %1").arg(state));
        if (m_tray)
            m_tray->setToolTip(tr("Crowdtrain — %1").arg(state));
        // The heat limit pauses training: said once, as it starts (or its cooling begins).
        const auto limit = control::parseLimitCode(body["limit_code"].toString());
        const bool heat = limit == control::LimitCode::Temperature || limit == control::LimitCode::Cooling;
        if (type == qname(control::event::kState) && state != m_lastState && heat)
            notify(tr("Training paused"), text(body["reason"]));
        m_lastState = state;
    } else if (type == qname(control::event::kCheckpointPublished)) {
        notify(tr("New checkpoint"),
            tr("%1 published round %2 (validation loss %3).")
                .arg(text(body["project"]))
                .arg(body["round"].toUInt())
                .arg(formatLoss(body["val_loss"])));
    }
}

void MainWindow::notify(const QString& title, const QString& words)
{
    if (m_tray)
        m_tray->showMessage(title, words);
    emit notified(title, words);
}

void MainWindow::setupTray()
{
    if (!QSystemTrayIcon::isSystemTrayAvailable())
        return;
    m_tray = new QSystemTrayIcon(QIcon(QStringLiteral(":/icons/crowdtrain.svg")), this);
    auto* menu = new QMenu(this);
    menu->addAction(tr("Show Crowdtrain"), this, [this] {
        show();
        raise();
        activateWindow();
    });
    menu->addSeparator();
    // Whatever the service answers shows in the status bar and the tray tip.
    auto say = [this](const DaemonReply& reply) {
        if (!reply.ok)
            statusBar()->showMessage(reply.message, 10000);
    };
    menu->addAction(tr("Pause"), this,
        [this, say] { m_link.request(qname(control::request::kPause), control::Value::map(), this, say); });
    menu->addAction(tr("Resume"), this,
        [this, say] { m_link.request(qname(control::request::kResume), control::Value::map(), this, say); });
    menu->addAction(tr("Snooze for 1 hour"), this, [this, say] {
        control::Value body = control::Value::map();
        body.set("seconds", 3600);
        m_link.request(qname(control::request::kSnooze), body, this, say);
    });
    menu->addSeparator();
    menu->addAction(tr("Quit (training goes on)"), qApp, &QApplication::quit);
    m_tray->setContextMenu(menu);
    m_tray->setToolTip(tr("Crowdtrain"));
    connect(m_tray, &QSystemTrayIcon::activated, this, [this](QSystemTrayIcon::ActivationReason reason) {
        if (reason == QSystemTrayIcon::Trigger)
            setVisible(!isVisible());
    });
    m_tray->show();
}

void MainWindow::closeEvent(QCloseEvent* event)
{
    // Quit (tray menu, session end) closes windows on its own: no questions then.
    if (!event->spontaneous() || !m_tray) {
        event->accept();
        return;
    }
    QSettings settings;
    if (!settings.value(QStringLiteral("closeNoticeShown")).toBool()) {
        settings.setValue(QStringLiteral("closeNoticeShown"), true);
        QMessageBox::information(this, tr("Crowdtrain keeps training"),
            tr("Closing this window does not stop your contribution: the Crowdtrain service goes on training "
               "within your limits. Pause it from the tray icon or the dashboard."));
    }
    hide();
    event->ignore();
}

bool MainWindow::maybeRunFirstRun()
{
    QSettings settings;
    if (settings.value(QStringLiteral("firstRunDone")).toBool() || findChild<FirstRunWizard*>())
        return false;
    // Shown at once, while the service may still be starting; the wizard
    // fills its project list when the service answers.
    auto* wizard = new FirstRunWizard(m_link, this);
    wizard->setObjectName(QStringLiteral("firstRun"));
    wizard->setAttribute(Qt::WA_DeleteOnClose);
    connect(wizard, &QWizard::accepted, this, [this] {
        QSettings().setValue(QStringLiteral("firstRunDone"), true);
        showPage(kDashboard);
    });
    wizard->open();
    // A machine whose service already trains (joined from the command
    // line) needs no wizard: closed unless the volunteer started on it.
    // Asked now and once the service answers (it may be starting).
    QPointer<FirstRunWizard> guard(wizard);
    auto check = [this, guard] {
        m_link.request(
            qname(control::request::kStatus), control::Value::map(), this, [guard](const DaemonReply& reply) {
                if (!guard || !reply.ok || text(reply.body["project"]).isEmpty())
                    return;
                QSettings().setValue(QStringLiteral("firstRunDone"), true);
                if (guard->currentId() == FirstRunWizard::kWelcome)
                    guard->reject();
            });
    };
    check();
    connect(&m_link, &Link::attachedChanged, wizard, [check](bool attached) {
        if (attached)
            check();
    });
    return true;
}

QStringList MainWindow::saveScreenshots(const QString& dir)
{
    QDir().mkpath(dir);
    const char* names[] = {"dashboard", "projects", "checkpoints", "contributions", "settings", "log"};
    QStringList files;
    const int current = m_stack->currentIndex();
    for (int i = 0; i < kPages; ++i) {
        showPage(i);
        // The page's replies first (a tool's wait, not the app's: the event
        // loop runs meanwhile). A page built just now lays out in steps (its
        // form, then the scroll area around it): let every step run.
        QElapsedTimer waited;
        waited.start();
        while (m_pages[i]->loading() && waited.elapsed() < 5000)
            QApplication::processEvents(QEventLoop::AllEvents, 20);
        for (int pass = 0; pass < 4; ++pass)
            QApplication::processEvents();
        const QString file = QDir(dir).filePath(QStringLiteral("%1.png").arg(QLatin1String(names[i])));
        if (grab().save(file))
            files << file;
    }
    showPage(current);
    return files;
}

} // namespace crowdtrain::ui
