// The loss chart (QCustomPlot built against Qt 6 here) renders offscreen with
// the expected pixels, and its history stays bounded.
#include "ui/lossplot.h"

#include <QImage>
#include <QTest>
#include <cmath>
#include <limits>

using crowdtrain::ui::LossPlot;

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

} // namespace

class TestLossPlot : public QObject {
    Q_OBJECT

private slots:
    void emptyPlotHasNoCurves()
    {
        LossPlot plot;
        const QImage image = plot.render(QSize(400, 300));
        QCOMPARE(image.size(), QSize(400, 300));
        // Only the legend's short sample lines carry the series colours.
        QVERIFY(countNear(image, kTrainBlue) < 120);
    }

    void rendersTrainAndValidationCurves()
    {
        LossPlot plot;
        for (int i = 0; i <= 100; ++i)
            plot.appendTrain(i * 1000.0, 4.0 * std::exp(-i / 30.0) + 1.0);
        for (int i = 0; i <= 100; i += 10)
            plot.appendValidation(i * 1000.0, 4.2 * std::exp(-i / 30.0) + 1.1);
        QCOMPARE(plot.trainPointCount(), 101);
        QCOMPARE(plot.validationPointCount(), 11);

        const QImage image = plot.render(QSize(400, 300));
        const QImage empty = LossPlot().render(QSize(400, 300));
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
        LossPlot plot;
        plot.appendTrain(1.0, std::numeric_limits<double>::quiet_NaN());
        plot.appendTrain(std::numeric_limits<double>::infinity(), 1.0);
        QCOMPARE(plot.trainPointCount(), 0);
    }

    void historyIsBounded()
    {
        LossPlot plot;
        for (int i = 0; i < LossPlot::kMaxPoints + 500; ++i)
            plot.appendTrain(i, 1.0);
        QCOMPARE(plot.trainPointCount(), LossPlot::kMaxPoints);
        plot.clear();
        QCOMPARE(plot.trainPointCount(), 0);
    }
};

QTEST_MAIN(TestLossPlot)
#include "tst_lossplot.moc"
