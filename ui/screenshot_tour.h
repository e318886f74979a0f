#pragma once

// The app's own screenshot run (tools/screenshots.sh): optionally walks
// the first-run wizard as a new user would, saving each of its pages
// (the project page also while the service starts), then waits until the
// dashboard has rounds to show and a checkpoint is downloaded, tries it,
// saves a PNG of each page and quits. Nothing here waits on the daemon.
// GUI thread only.

#include <QObject>
#include <QPointer>
#include <QString>

class QTimer;

namespace crowdtrain::ui {

class Link;
class FirstRunWizard;
class MainWindow;

class ScreenshotTour : public QObject {
    Q_OBJECT

public:
    ScreenshotTour(MainWindow& window, Link& link, QString dir, bool walkFirstRun);
    void start();

private:
    enum class Step { Welcome, Name, ProjectStarting, ProjectLoaded, Preset, Finishing, Training, Trying, Done };
    void tick();
    void save(const QString& name);
    void saveWizard(const QString& name);

    MainWindow& m_window;
    Link& m_link;
    QString m_dir;
    QPointer<FirstRunWizard> m_wizard; // deleted once it closes
    QTimer* m_timer;
    Step m_step;
    bool m_asking = false;
    qint64 m_tryStartedMs = 0;
};

} // namespace crowdtrain::ui
