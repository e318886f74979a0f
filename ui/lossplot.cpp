#include "ui/lossplot.h"

#include <QVBoxLayout>
#include <cmath>
#include <qcustomplot.h>

namespace crowdtrain::ui {
namespace {

constexpr int kTrainGraph = 0;
constexpr int kValidationGraph = 1;

} // namespace

LossPlot::LossPlot(QWidget* parent)
    : QWidget(parent)
    , m_plot(new QCustomPlot(this))
{
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(m_plot);

    QCPGraph* train = m_plot->addGraph();
    train->setName(tr("Train loss"));
    train->setPen(QPen(QColor(0x1f, 0x77, 0xb4), 2));
    QCPGraph* validation = m_plot->addGraph();
    validation->setName(tr("Validation loss"));
    validation->setPen(QPen(QColor(0xd6, 0x27, 0x28), 2));
    validation->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, 5));

    m_plot->xAxis->setLabel(tr("Tokens"));
    m_plot->yAxis->setLabel(tr("Loss"));
    m_plot->legend->setVisible(true);
    m_plot->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
}

void LossPlot::appendTrain(double tokens, double loss)
{
    append(kTrainGraph, tokens, loss);
}

void LossPlot::appendValidation(double tokens, double loss)
{
    append(kValidationGraph, tokens, loss);
}

void LossPlot::append(int graphIndex, double tokens, double loss)
{
    if (!std::isfinite(tokens) || !std::isfinite(loss))
        return;
    QCPGraph* graph = m_plot->graph(graphIndex);
    graph->addData(tokens, loss);
    if (graph->dataCount() > kMaxPoints)
        graph->data()->removeBefore(graph->data()->at(graph->dataCount() - kMaxPoints)->key);
}

void LossPlot::refresh()
{
    m_plot->rescaleAxes();
    m_plot->replot(QCustomPlot::rpQueuedReplot);
}

void LossPlot::clear()
{
    for (int i = 0; i < m_plot->graphCount(); ++i)
        m_plot->graph(i)->data()->clear();
    m_plot->replot(QCustomPlot::rpQueuedReplot);
}

int LossPlot::trainPointCount() const
{
    return m_plot->graph(kTrainGraph)->dataCount();
}

int LossPlot::validationPointCount() const
{
    return m_plot->graph(kValidationGraph)->dataCount();
}

QImage LossPlot::render(const QSize& size)
{
    m_plot->rescaleAxes();
    return m_plot->toPixmap(size.width(), size.height()).toImage();
}

} // namespace crowdtrain::ui
