#include "ui/screenshot_tour.h"

#include "ui/checkpoints_page.h"
#include "ui/first_run.h"
#include "ui/format.h"
#include "ui/link.h"
#include "ui/main_window.h"

#include <QApplication>
#include <QDateTime>
#include <QDir>
#include <QLineEdit>
#include <QTimer>

#include <cstdio>

namespace crowdtrain::ui {

ScreenshotTour::ScreenshotTour(MainWindow& window, Link& link, QString dir, bool walkFirstRun)
    : QObject(&window)
    , m_window(window)
    , m_link(link)
    , m_dir(std::move(dir))
    , m_timer(new QTimer(this))
    , m_step(walkFirstRun ? Step::Welcome : Step::Training)
{
    m_timer->setInterval(250);
    connect(m_timer, &QTimer::timeout, this, &ScreenshotTour::tick);
}

void ScreenshotTour::start()
{
    QDir().mkpath(m_dir);
    if (m_step == Step::Welcome) {
        m_window.maybeRunFirstRun();
        m_wizard = m_window.findChild<FirstRunWizard*>();
        if (!m_wizard) {
            m_step = Step::Training;
        } else {
            connect(m_wizard, &QWizard::accepted, this, [this] { m_step = Step::Training; });
            connect(m_wizard, &FirstRunWizard::failed, this, [this] {
                std::fprintf(stderr, "the wizard's Finish failed: %s\n", qPrintable(m_wizard->error()));
                m_step = Step::Done;
                QApplication::exit(1);
            });
        }
    }
    m_timer->start();
}

void ScreenshotTour::save(const QString& file)
{
    std::printf("%s\n", qPrintable(file));
    std::fflush(stdout);
}

void ScreenshotTour::saveWizard(const QString& name)
{
    for (int pass = 0; pass < 4; ++pass)
        QApplication::processEvents();
    const QString file = QDir(m_dir).filePath(name + QStringLiteral(".png"));
    if (m_wizard->grab().save(file))
        save(file);
}

void ScreenshotTour::tick()
{
    if (m_step < Step::Finishing && !m_wizard) {
        m_step = Step::Training; // closed by hand
        return;
    }
    switch (m_step) {
    case Step::Welcome:
        saveWizard(QStringLiteral("wizard-1-welcome"));
        m_wizard->next();
        m_step = Step::Name;
        return;
    case Step::Name:
        m_wizard->nameEdit()->setText(QStringLiteral("Ada"));
        saveWizard(QStringLiteral("wizard-2-name"));
        m_wizard->next();
        m_step = Step::ProjectStarting;
        return;
    case Step::ProjectStarting:
        // The moment a new user sees: the service is still starting.
        if (!m_wizard->projectPage()->loaded())
            saveWizard(QStringLiteral("wizard-3-project-starting"));
        m_step = Step::ProjectLoaded;
        return;
    case Step::ProjectLoaded:
        if (!m_wizard->projectPage()->loaded() || !m_wizard->projectPage()->isComplete())
            return;
        saveWizard(QStringLiteral("wizard-3-project"));
        // Behind the wizard: the dashboard before anything is joined.
        if (const QString file = QDir(m_dir).filePath(QStringLiteral("dashboard-empty.png"));
            m_window.grab().save(file))
            save(file);
        m_wizard->next();
        m_step = Step::Preset;
        return;
    case Step::Preset:
        saveWizard(QStringLiteral("wizard-4-preset"));
        m_wizard->accept();
        m_step = Step::Finishing;
        return;
    case Step::Finishing:
        return; // until the wizard's accepted() or failed()
    case Step::Training: {
        if (m_asking)
            return;
        // A few rounds on the dashboard and a downloaded checkpoint.
        m_asking = true;
        m_link.request(
            qname(control::request::kMetrics), control::Value::map(), this, [this](const DaemonReply& metrics) {
                if (!metrics.ok || metrics.body["rows"].size() < 6) {
                    m_asking = false;
                    return;
                }
                m_link.request(
                    qname(control::request::kCheckpoints), control::Value::map(), this,
                    [this](const DaemonReply& checkpoints) {
                        m_asking = false;
                        bool ready = false;
                        for (const auto& c : checkpoints.body["checkpoints"].items())
                            ready = ready
                                || control::parseDownloadState(c["state"].toString()) == control::DownloadState::Ready;
                        if (!ready || m_step != Step::Training)
                            return;
                        m_window.showPage(MainWindow::kCheckpoints);
                        m_step = Step::Trying;
                        m_tryStartedMs = QDateTime::currentMSecsSinceEpoch();
                    },
                    15000);
            });
        return;
    }
    case Step::Trying:
        // Once the list shows the downloaded checkpoint, try it; the pages
        // are saved when its text is complete (or after a minute of a slow
        // machine, with what streamed so far).
        if (m_window.checkpoints()->loading())
            return;
        if (m_tryStartedMs > 0) {
            m_window.checkpoints()->generate();
            m_tryStartedMs = -QDateTime::currentMSecsSinceEpoch();
            return;
        }
        if (m_window.checkpoints()->generating() && QDateTime::currentMSecsSinceEpoch() + m_tryStartedMs < 60000)
            return;
        m_timer->stop();
        m_step = Step::Done;
        for (const QString& file : m_window.saveScreenshots(m_dir))
            save(file);
        QApplication::quit();
        return;
    case Step::Done:
        return;
    }
}

} // namespace crowdtrain::ui
