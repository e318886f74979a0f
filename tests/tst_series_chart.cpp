// The dashboard's charts (SeriesChart on Debian's Qt 6 QCustomPlot) render
// offscreen with the expected pixels, ignore points that are not finite,
// and keep their history bounded. An empty chart keeps a fixed range and
// says why while it has no point (refreshes once a second must not widen
// it), a flat line gets a range of its own, and count axes tick at whole
// numbers only.
#include "ui/series_chart.h"

#include <QImage>
#include <QTest>
#include <cmath>
#include <limits>
#include <memory>
#include <qcustomplot.h>
#include <vector>

using crowdtrain::ui::SeriesChart;

namespace {

// Pixels close to the given colour (anti-aliasing blends the line's edges).
int countNear(const QImage& image, QColor target, int tolerance = 40)
{
    int count = 0;
    for (int y = 0; y < image.height(); ++y) {
        for (int x = 0; x < image.width(); ++x) {
            const QColor c = image.pixelColor(x, y);
            if (std::abs(c.red() - target.red()) < tolerance && std::abs(c.green() - target.green()) < tolerance
                && std::abs(c.blue() - target.blue()) < tolerance)
                ++count;
        }
    }
    return count;
}

const QColor kTrainBlue(0x1f, 0x77, 0xb4);
const QColor kValidationRed(0xd6, 0x27, 0x28);

// The dashboard's loss chart: train loss as a line, validation loss as dots.
std::unique_ptr<SeriesChart> lossChart()
{
    auto chart = std::make_unique<SeriesChart>(
        QStringLiteral("Loss"), SeriesChart::XAxis::Number, QStringLiteral("Tokens trained"), QStringLiteral("Loss"));
    chart->addSeries(QStringLiteral("Train loss"), kTrainBlue);
    chart->addSeries(QStringLiteral("Validation loss"), kValidationRed, false, true);
    return chart;
}

QImage render(SeriesChart& chart, const QSize& size)
{
    chart.refresh();
    return chart.plot()->toPixmap(size.width(), size.height()).toImage();
}

} // namespace

class TestSeriesChart : public QObject {
    Q_OBJECT

private slots:
    void anEmptyChartHasNoCurves()
    {
        auto chart = lossChart();
        const QImage image = render(*chart, QSize(400, 300));
        QCOMPARE(image.size(), QSize(400, 300));
        // Only the legend's short sample lines carry the series colours.
        QVERIFY(countNear(image, kTrainBlue) < 120);
    }

    void rendersTrainAndValidationCurves()
    {
        auto chart = lossChart();
        for (int i = 0; i <= 100; ++i)
            chart->append(0, i * 1000.0, 4.0 * std::exp(-i / 30.0) + 1.0);
        for (int i = 0; i <= 100; i += 10)
            chart->append(1, i * 1000.0, 4.2 * std::exp(-i / 30.0) + 1.1);
        QCOMPARE(chart->pointCount(0), 101);
        QCOMPARE(chart->pointCount(1), 11);

        const QImage image = render(*chart, QSize(400, 300));
        const QImage empty = render(*lossChart(), QSize(400, 300));
        // A 2-px line across most of the width adds hundreds of blue pixels.
        QVERIFY2(countNear(image, kTrainBlue) > countNear(empty, kTrainBlue) + 300,
            qPrintable(QString::number(countNear(image, kTrainBlue))));
        QVERIFY(countNear(image, kValidationRed) > countNear(empty, kValidationRed) + 100);

        // The curve falls: blue pixels in the left third sit higher (smaller y)
        // than those in the right third.
        auto meanBlueY = [&](int x0, int x1) {
            double sum = 0;
            int n = 0;
            for (int y = 0; y < image.height(); ++y)
                for (int x = x0; x < x1; ++x)
                    if (countNear(image.copy(x, y, 1, 1), kTrainBlue, 30) == 1) {
                        sum += y;
                        ++n;
                    }
            return n ? sum / n : -1.0;
        };
        const double left = meanBlueY(80, 160);
        const double right = meanBlueY(300, 380);
        QVERIFY(left >= 0 && right >= 0);
        QVERIFY2(left < right, qPrintable(QStringLiteral("left %1 right %2").arg(left).arg(right)));
    }

    void ignoresNonFinitePoints()
    {
        auto chart = lossChart();
        chart->append(0, 1.0, std::numeric_limits<double>::quiet_NaN());
        chart->append(0, std::numeric_limits<double>::infinity(), 1.0);
        QCOMPARE(chart->pointCount(0), 0);
        QVERIFY(chart->isEmpty());
    }

    void anEmptyChartKeepsItsRangeAndSaysWhy()
    {
        for (SeriesChart::XAxis x : {SeriesChart::XAxis::Number, SeriesChart::XAxis::Time}) {
            SeriesChart chart(QStringLiteral("Volunteers"), x, QStringLiteral("Time"), QStringLiteral("Volunteers"));
            chart.addSeries(QStringLiteral("Volunteers"), Qt::green);
            chart.setEmptyRange(0, 2);
            chart.setEmptyText(QStringLiteral("No points yet: join a project"));
            chart.resize(600, 300);
            // A minute of refreshes at the dashboard's cadence.
            for (int i = 0; i < 60; ++i)
                chart.refresh();
            QCOMPARE(chart.plot()->yAxis->range().lower, 0.0);
            QCOMPARE(chart.plot()->yAxis->range().upper, 2.0);
            QVERIFY(chart.showsEmptyText());
            QCOMPARE(chart.emptyText(), QStringLiteral("No points yet: join a project"));
            // The first point: the line, not the words, and a range around it.
            chart.append(0, 1000.0, 3.0);
            chart.refresh();
            QVERIFY(!chart.showsEmptyText());
            const QCPRange y = chart.plot()->yAxis->range();
            QVERIFY2(y.lower <= 3.0 && y.upper >= 3.0 && y.size() >= 0.5,
                qPrintable(QStringLiteral("%1..%2").arg(y.lower).arg(y.upper)));
            QVERIFY(y.lower >= 0); // counts never go below zero
            for (int i = 0; i < 60; ++i)
                chart.refresh();
            QCOMPARE(chart.plot()->yAxis->range(), y);
            chart.clear();
            QVERIFY(chart.showsEmptyText());
            QCOMPARE(chart.plot()->yAxis->range().upper, 2.0);
        }
    }

    void countAxesTickAtWholeNumbers()
    {
        SeriesChart chart(QStringLiteral("Volunteers"), SeriesChart::XAxis::Time, QStringLiteral("Time"),
            QStringLiteral("Volunteers"));
        chart.addSeries(QStringLiteral("Volunteers"), Qt::green);
        chart.setIntegerTicks(true);
        chart.resize(600, 300);
        for (const std::vector<double>& values : {std::vector<double>{1, 1, 1}, {1, 2, 1, 2}, {0, 7, 3, 12}}) {
            chart.clear();
            for (std::size_t i = 0; i < values.size(); ++i)
                chart.append(0, 1.7e9 + double(i) * 10, values[i]);
            chart.refresh();
            chart.plot()->replot(QCustomPlot::rpImmediateRefresh);
            const QVector<double> ticks = chart.plot()->yAxis->tickVector();
            QVERIFY(ticks.size() >= 2);
            for (double tick : ticks)
                QVERIFY2(tick == std::round(tick), qPrintable(QString::number(tick)));
        }
    }

    void historyIsBounded()
    {
        auto chart = lossChart();
        for (int i = 0; i < SeriesChart::kMaxPoints + 500; ++i)
            chart->append(0, i, 1.0);
        QCOMPARE(chart->pointCount(0), SeriesChart::kMaxPoints);
        // The oldest went first.
        QCOMPARE(chart->lastX(0), double(SeriesChart::kMaxPoints + 499));
        chart->clear();
        QCOMPARE(chart->pointCount(0), 0);
    }
};

QTEST_MAIN(TestSeriesChart)
#include "tst_series_chart.moc"
