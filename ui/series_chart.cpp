#include "ui/series_chart.h"

#include <QDateTime>
#include <QFileDialog>
#include <QMenu>
#include <QVBoxLayout>
#include <cmath>
#include <qcustomplot.h>

namespace crowdtrain::ui {

SeriesChart::SeriesChart(const QString& title, XAxis x, const QString& xLabel, const QString& yLabel, QWidget* parent)
    : QWidget(parent)
    , m_plot(new QCustomPlot(this))
    , m_title(title)
    , m_x(x)
{
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(m_plot);
    setAccessibleName(title);
    setMinimumHeight(180);

    // The system palette, light or dark.
    const QPalette palette = this->palette();
    const QColor text = palette.color(QPalette::WindowText);
    const QColor grid = palette.color(QPalette::Mid);
    m_plot->setBackground(palette.brush(QPalette::Base));
    for (QCPAxis* axis : {m_plot->xAxis, m_plot->yAxis, m_plot->yAxis2}) {
        axis->setBasePen(QPen(text));
        axis->setTickPen(QPen(text));
        axis->setSubTickPen(QPen(text));
        axis->setTickLabelColor(text);
        axis->setLabelColor(text);
        axis->grid()->setPen(QPen(grid, 0, Qt::DotLine));
    }
    m_plot->plotLayout()->insertRow(0);
    auto* heading = new QCPTextElement(m_plot, title, QFont(font().family(), font().pointSize() + 1, QFont::Bold));
    heading->setTextColor(text);
    m_plot->plotLayout()->addElement(0, 0, heading);
    m_plot->xAxis->setLabel(xLabel);
    m_plot->yAxis->setLabel(yLabel);
    if (x == XAxis::Time) {
        auto ticker = QSharedPointer<QCPAxisTickerDateTime>::create();
        ticker->setDateTimeFormat(QStringLiteral("HH:mm:ss"));
        m_plot->xAxis->setTicker(ticker);
    }
    m_plot->legend->setVisible(true);
    m_plot->legend->setBrush(palette.brush(QPalette::Base));
    m_plot->legend->setTextColor(text);
    m_plot->legend->setBorderPen(QPen(grid));
    m_plot->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignTop | Qt::AlignRight);
    m_plot->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
    m_emptyText = new QCPItemText(m_plot);
    m_emptyText->position->setType(QCPItemPosition::ptAxisRectRatio);
    m_emptyText->position->setCoords(0.5, 0.5);
    m_emptyText->setPositionAlignment(Qt::AlignCenter);
    m_emptyText->setColor(palette.color(QPalette::PlaceholderText));
    QFont emptyFont = font();
    emptyFont.setPointSizeF(emptyFont.pointSizeF() * 1.15);
    m_emptyText->setFont(emptyFont);
    m_emptyText->setText(tr("No points yet"));
    m_emptyText->setClipToAxisRect(false);
    m_plot->setContextMenuPolicy(Qt::CustomContextMenu);
    connect(m_plot, &QWidget::customContextMenuRequested, this, [this](const QPoint& at) {
        QMenu menu(this);
        menu.addAction(tr("Reset zoom"), this, [this] { refresh(); });
        menu.addAction(tr("Export PNG..."), this, &SeriesChart::exportImage);
        menu.exec(m_plot->mapToGlobal(at));
    });
}

int SeriesChart::addSeries(const QString& name, const QColor& color, bool rightAxis, bool dots)
{
    QCPGraph* graph = m_plot->addGraph(m_plot->xAxis, rightAxis ? m_plot->yAxis2 : m_plot->yAxis);
    graph->setName(name);
    graph->setPen(QPen(color, 2));
    if (dots) {
        graph->setLineStyle(QCPGraph::lsLine);
        graph->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, 6));
    }
    if (rightAxis)
        m_plot->yAxis2->setVisible(true);
    return m_plot->graphCount() - 1;
}

void SeriesChart::setRightAxisLabel(const QString& label, double minimum, double maximum)
{
    m_plot->yAxis2->setVisible(true);
    m_plot->yAxis2->setLabel(label);
    m_plot->yAxis2->setRange(minimum, maximum);
}

void SeriesChart::append(int series, double x, double y)
{
    if (!std::isfinite(x) || !std::isfinite(y) || series < 0 || series >= m_plot->graphCount())
        return;
    QCPGraph* graph = m_plot->graph(series);
    graph->addData(x, y);
    if (graph->dataCount() > kMaxPoints)
        graph->data()->removeBefore(graph->data()->at(graph->dataCount() - kMaxPoints)->key);
}

void SeriesChart::clear()
{
    for (int i = 0; i < m_plot->graphCount(); ++i)
        m_plot->graph(i)->data()->clear();
    refresh();
}

void SeriesChart::setEmptyRange(double yMinimum, double yMaximum, double xMinimum, double xMaximum)
{
    m_emptyY[0] = yMinimum;
    m_emptyY[1] = yMaximum;
    m_emptyX[0] = xMinimum;
    m_emptyX[1] = xMaximum;
}

void SeriesChart::setEmptyText(const QString& text)
{
    if (m_emptyText->text() == text)
        return;
    m_emptyText->setText(text);
    if (isEmpty())
        m_plot->replot(QCustomPlot::rpQueuedReplot);
}

QString SeriesChart::emptyText() const
{
    return m_emptyText->text();
}

bool SeriesChart::showsEmptyText() const
{
    return m_emptyText->visible();
}

void SeriesChart::setIntegerTicks(bool on)
{
    m_integer = on;
    if (on) {
        // Whole multiples of 1: 0, 1, 2 or 0, 5, 10, never 0.25.
        auto ticker = QSharedPointer<QCPAxisTickerFixed>::create();
        ticker->setTickStep(1.0);
        ticker->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);
        m_plot->yAxis->setTicker(ticker);
        m_plot->yAxis->setNumberPrecision(0);
        m_plot->yAxis->setSubTicks(false);
    } else {
        m_plot->yAxis->setTicker(QSharedPointer<QCPAxisTicker>::create());
        m_plot->yAxis->setSubTicks(true);
    }
}

bool SeriesChart::isEmpty() const
{
    for (int i = 0; i < m_plot->graphCount(); ++i)
        if (m_plot->graph(i)->dataCount() > 0)
            return false;
    return true;
}

void SeriesChart::refresh()
{
    const QCPRange right = m_plot->yAxis2->range();
    const bool empty = isEmpty();
    m_emptyText->setVisible(empty);
    if (empty) {
        // Fixed, so that the axes do not wander before the first point.
        if (m_x == XAxis::Time) {
            const double now = double(QDateTime::currentMSecsSinceEpoch()) / 1e3;
            m_plot->xAxis->setRange(now - 300, now);
        } else {
            m_plot->xAxis->setRange(m_emptyX[0], m_emptyX[1]);
        }
        m_plot->yAxis->setRange(m_emptyY[0], m_emptyY[1]);
    } else {
        m_plot->xAxis->rescale();
        const QCPRange x = m_plot->xAxis->range();
        if (x.size() <= 0) // one point: a minute or 1% around it
            m_plot->xAxis->setRange(x.lower - (m_x == XAxis::Time ? 60 : std::max(1.0, std::abs(x.lower) * 0.01)),
                x.upper + (m_x == XAxis::Time ? 5 : std::max(1.0, std::abs(x.upper) * 0.01)));
        rescaleValues();
    }
    m_plot->yAxis2->setRange(right);
    m_plot->replot(QCustomPlot::rpQueuedReplot);
}

void SeriesChart::rescaleValues()
{
    double lower = 0, upper = 0;
    bool found = false;
    for (int i = 0; i < m_plot->graphCount(); ++i) {
        QCPGraph* graph = m_plot->graph(i);
        if (graph->valueAxis() != m_plot->yAxis)
            continue;
        bool ok = false;
        const QCPRange r = graph->getValueRange(ok);
        if (!ok)
            continue;
        lower = found ? std::min(lower, r.lower) : r.lower;
        upper = found ? std::max(upper, r.upper) : r.upper;
        found = true;
    }
    if (!found) {
        m_plot->yAxis->setRange(m_emptyY[0], m_emptyY[1]);
        return;
    }
    // A little room above and below the lines; a flat line gets room of
    // its own size (or 1 around zero), never a range of nothing.
    const double span = upper - lower;
    const double pad = span > 0 ? span * 0.08 : std::max(std::abs(upper) * 0.1, m_integer ? 1.0 : 0.1);
    double low = lower - pad, high = upper + pad;
    // Counts, rates and losses are never negative: the axis starts at 0.
    if (lower >= 0 && low < 0)
        low = 0;
    if (m_integer) {
        low = std::floor(low);
        high = std::max(std::ceil(high), low + 2);
    }
    m_plot->yAxis->setRange(low, high);
}

double SeriesChart::lastReplotMs() const
{
    return m_plot->replotTime();
}

int SeriesChart::pointCount(int series) const
{
    return series >= 0 && series < m_plot->graphCount() ? m_plot->graph(series)->dataCount() : 0;
}

double SeriesChart::lastX(int series) const
{
    if (pointCount(series) == 0)
        return std::nan("");
    QCPGraph* graph = m_plot->graph(series);
    return (graph->data()->constEnd() - 1)->key;
}

bool SeriesChart::saveImage(const QString& file, int width, int height)
{
    return m_plot->savePng(file, width, height);
}

void SeriesChart::exportImage()
{
    const QString file = QFileDialog::getSaveFileName(this, tr("Export chart"),
        m_title.toLower().replace(QLatin1Char(' '), QLatin1Char('-')) + QStringLiteral(".png"),
        tr("PNG images (*.png)"));
    if (!file.isEmpty())
        saveImage(file);
}

} // namespace crowdtrain::ui
