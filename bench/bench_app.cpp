// The desktop app's drawing costs, offscreen (QT_QPA_PLATFORM=offscreen):
// the main window from construction to its first paint (no daemon), and a
// loss chart's rescale + replot with 100,000 points per series.
//   QT_QPA_PLATFORM=offscreen build/dev/bin/bench_app
#include "ui/daemon_link.h"
#include "ui/main_window.h"
#include "ui/series_chart.h"

#include <QApplication>
#include <QElapsedTimer>
#include <QPaintEvent>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <qcustomplot.h>
#include <vector>

namespace {

// Notes the first paint of a widget.
class FirstPaint : public QObject {
public:
    qint64 at = -1;
    QElapsedTimer* clock = nullptr;
    bool eventFilter(QObject* watched, QEvent* event) override
    {
        if (event->type() == QEvent::Paint && at < 0)
            at = clock->elapsed();
        return QObject::eventFilter(watched, event);
    }
};

double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

} // namespace

int main(int argc, char** argv)
{
    QElapsedTimer clock;
    clock.start();
    QApplication app(argc, argv);
    // No daemon: the link is never started, so nothing is spawned.
    crowdtrain::ui::DaemonLink link("/nonexistent-crowdtrain-bench");
    crowdtrain::ui::MainWindow window(link);
    FirstPaint paint;
    paint.clock = &clock;
    window.installEventFilter(&paint);
    window.show();
    while (paint.at < 0 && clock.elapsed() < 10000)
        QApplication::processEvents();
    std::printf("| what | value |\n| --- | --- |\n");
    std::printf(
        "| app start (QApplication) to first painted main window | %lld ms |\n", static_cast<long long>(paint.at));

    crowdtrain::ui::SeriesChart chart(QStringLiteral("Loss"), crowdtrain::ui::SeriesChart::XAxis::Number,
        QStringLiteral("Tokens"), QStringLiteral("Loss"));
    const int train = chart.addSeries(QStringLiteral("train"), Qt::blue);
    const int val = chart.addSeries(QStringLiteral("val"), Qt::red, false, true);
    chart.resize(1200, 500);
    chart.show();
    QElapsedTimer fill;
    fill.start();
    const int n = 100000;
    for (int i = 0; i < n; ++i) {
        chart.append(train, double(i) * 5120, 4.0 * std::exp(-i / 20000.0) + 1.5 + 0.05 * std::sin(i));
        if (i % 10 == 0)
            chart.append(val, double(i) * 5120, 4.0 * std::exp(-i / 20000.0) + 1.6);
    }
    std::printf("| append 100,000 + 10,000 points | %.1f ms |\n", double(fill.nsecsElapsed()) / 1e6);
    std::vector<double> times;
    for (int r = 0; r < 11; ++r) {
        QElapsedTimer t;
        t.start();
        chart.refresh();
        chart.plot()->replot(QCustomPlot::rpImmediateRefresh);
        times.push_back(double(t.nsecsElapsed()) / 1e6);
    }
    std::printf("| rescale + replot, 100,000-point loss chart (median of 11) | %.1f ms |\n", median(times));
    std::printf("| points kept per series (history cap) | %d |\n", chart.pointCount(train));
    return 0;
}
