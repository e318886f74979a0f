// crowdtrain: the desktop app. View and controller only; the daemon
// (crowdtrain-worker run) does the training, and the app drives it through
// the control API (docs/architecture.md, "Processes").
#include "crowdtrain/version.h"
#include "ui/daemon_link.h"
#include "ui/main_window.h"
#include "ui/screenshot_tour.h"
#include "ui/theme.h"

#include <QApplication>
#include <QCommandLineParser>
#include <QSystemTrayIcon>
#include <QTimer>

int main(int argc, char** argv)
{
    QApplication app(argc, argv);
    QApplication::setApplicationName(QStringLiteral("crowdtrain"));
    QApplication::setApplicationDisplayName(QStringLiteral("Crowdtrain"));
    QApplication::setApplicationVersion(QString::fromLatin1(crowdtrain::kVersion));
    QApplication::setOrganizationName(QStringLiteral("Crowdtrain"));
    // The installed desktop entry's id (installer/package): window icons and
    // Wayland's app id follow it.
    QApplication::setDesktopFileName(QStringLiteral("io.github.crowdtrain.Crowdtrain"));
    // With a tray, closing the window hides it and the app lives on there.
    QApplication::setQuitOnLastWindowClosed(!QSystemTrayIcon::isSystemTrayAvailable());

    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral("Crowdtrain - donate your GPU to public training projects"));
    parser.addHelpOption();
    parser.addVersionOption();
    QCommandLineOption quitAfter(QStringLiteral("quit-after-ms"),
        QStringLiteral("Quit after the given milliseconds (smoke tests)."), QStringLiteral("ms"));
    QCommandLineOption hidden(QStringLiteral("hidden"), QStringLiteral("Start in the tray (at login)."));
    QCommandLineOption screenshots(QStringLiteral("screenshot-dir"),
        QStringLiteral("Once the service trains, save a PNG of each page into DIR and quit."), QStringLiteral("dir"));
    QCommandLineOption walkFirstRun(QStringLiteral("walk-first-run"),
        QStringLiteral("With --screenshot-dir: walk the first-run wizard (demo project), saving its pages."));
    QCommandLineOption page(QStringLiteral("page"),
        QStringLiteral("The page to open: dashboard, projects, checkpoints, contributions, settings, log."),
        QStringLiteral("name"));
    QCommandLineOption dark(QStringLiteral("dark"),
        QStringLiteral("Use a dark palette (for desktops that do not pass their dark mode on to Qt)."));
    parser.addOption(dark);
    parser.addOption(quitAfter);
    parser.addOption(hidden);
    parser.addOption(screenshots);
    parser.addOption(walkFirstRun);
    parser.addOption(page);
    parser.process(app);
    if (parser.isSet(dark))
        crowdtrain::ui::useDarkPalette(app);

    crowdtrain::ui::DaemonLink link;
    crowdtrain::ui::MainWindow window(link);
    link.start();
    if (!parser.isSet(hidden) || !QSystemTrayIcon::isSystemTrayAvailable())
        window.show();
    const QStringList pages{QStringLiteral("dashboard"), QStringLiteral("projects"), QStringLiteral("checkpoints"),
        QStringLiteral("contributions"), QStringLiteral("settings"), QStringLiteral("log")};
    if (parser.isSet(page))
        window.showPage(int(pages.indexOf(parser.value(page))));
    if (parser.isSet(screenshots)) {
        auto* tour
            = new crowdtrain::ui::ScreenshotTour(window, link, parser.value(screenshots), parser.isSet(walkFirstRun));
        QTimer::singleShot(0, tour, &crowdtrain::ui::ScreenshotTour::start);
    } else {
        // At once, while the service may still be starting: the wizard
        // fills its project list when the service answers.
        QTimer::singleShot(0, &window, [&window] { window.maybeRunFirstRun(); });
    }
    if (parser.isSet(quitAfter))
        QTimer::singleShot(parser.value(quitAfter).toInt(), &app, &QApplication::quit);
    return QApplication::exec();
}
