#include "ui/series_chart.h"

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
    m_plot->replot(QCustomPlot::rpQueuedReplot);
}

void SeriesChart::refresh()
{
    const QCPRange right = m_plot->yAxis2->range();
    m_plot->xAxis->rescale();
    m_plot->yAxis->rescale();
    // A little room above and below the lines.
    const QCPRange y = m_plot->yAxis->range();
    const double pad = std::max(1e-9, (y.upper - y.lower) * 0.08);
    m_plot->yAxis->setRange(y.lower - pad, y.upper + pad);
    m_plot->yAxis2->setRange(right);
    m_plot->replot(QCustomPlot::rpQueuedReplot);
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
