#pragma once

// The desktop app's window: a sidebar of pages (Dashboard, Projects,
// Checkpoints, Contributions, Settings, Log) over one DaemonLink, a status
// bar in plain words, the tray icon, and the first-run wizard. Closing the
// window hides it (training goes on in the service); Quit ends the app
// only. GUI thread only.

#include "net/control/value.h"

#include <QMainWindow>

class QListWidget;
class QStackedWidget;
class QSystemTrayIcon;
class QLabel;

namespace crowdtrain::ui {

class Link;
class DashboardPage;
class ProjectsPage;
class CheckpointsPage;
class ContributionsPage;
class SettingsPage;
class LogPage;
class Page;

class MainWindow : public QMainWindow {
    Q_OBJECT

public:
    enum PageIndex { kDashboard, kProjects, kCheckpoints, kContributions, kSettings, kLog, kPages };

    explicit MainWindow(Link& link, QWidget* parent = nullptr);

    void showPage(int index);
    Page* page(int index) const;
    DashboardPage* dashboard() const;
    CheckpointsPage* checkpoints() const;
    SettingsPage* settings() const;
    // Shows the first-run wizard when no project is joined and it was never
    // completed; returns whether it was shown.
    bool maybeRunFirstRun();
    QString statusText() const;
    // Saves a PNG of each page into `dir` (screenshots, tests).
    QStringList saveScreenshots(const QString& dir);

signals:
    // A notification for the volunteer (shown by the tray icon where there is one).
    void notified(const QString& title, const QString& text);

protected:
    void closeEvent(QCloseEvent* event) override;

private:
    void onEvent(const QString& type, const crowdtrain::control::Value& body);
    void onAttached(bool attached);
    void setupTray();
    void notify(const QString& title, const QString& words);

    Link& m_link;
    // A QListWidget, not a model: a fixed list of the pages, not data from the daemon.
    QListWidget* m_sidebar;
    QStackedWidget* m_stack;
    Page* m_pages[kPages];
    QLabel* m_status;
    QSystemTrayIcon* m_tray = nullptr;
    QString m_lastState;
};

} // namespace crowdtrain::ui
