// crowdtrain: the desktop app. View and controller only; the worker daemon
// does the training (docs/architecture.md, "Processes").
#include "crowdtrain/version.h"
#include "ui/lossplot.h"

#include <QApplication>
#include <QCommandLineParser>
#include <QMainWindow>
#include <QTimer>

int main(int argc, char** argv)
{
    QApplication app(argc, argv);
    QApplication::setApplicationName(QStringLiteral("crowdtrain"));
    QApplication::setApplicationDisplayName(QStringLiteral("Crowdtrain"));
    QApplication::setApplicationVersion(QString::fromLatin1(crowdtrain::kVersion));
    QApplication::setOrganizationName(QStringLiteral("Crowdtrain"));

    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral("Crowdtrain - donate your GPU to public training projects"));
    parser.addHelpOption();
    parser.addVersionOption();
    QCommandLineOption quitAfter(QStringLiteral("quit-after-ms"),
        QStringLiteral("Quit after the given milliseconds (smoke tests)."), QStringLiteral("ms"));
    parser.addOption(quitAfter);
    parser.process(app);

    QMainWindow window;
    window.setWindowTitle(QStringLiteral("Crowdtrain"));
    window.setCentralWidget(new crowdtrain::ui::LossPlot(&window));
    window.resize(960, 600);
    window.show();

    if (parser.isSet(quitAfter))
        QTimer::singleShot(parser.value(quitAfter).toInt(), &app, &QApplication::quit);
    return QApplication::exec();
}
