#pragma once

// A live loss chart: train and validation loss against training tokens.
// Appends only store points; refresh() redraws, so callers batch at a cadence and
// the history is bounded (kMaxPoints per series, oldest dropped first).
// GUI thread only.

#include <QWidget>

class QCustomPlot;

namespace crowdtrain::ui {

class LossPlot : public QWidget {
    Q_OBJECT

public:
    static constexpr int kMaxPoints = 20000;

    explicit LossPlot(QWidget* parent = nullptr);

    void appendTrain(double tokens, double loss);
    void appendValidation(double tokens, double loss);
    void clear();
    // Rescales and schedules one replot; call at the refresh cadence, after
    // a batch of appends.
    void refresh();

    int trainPointCount() const;
    int validationPointCount() const;

    // Renders the chart into an image of the given size (for tests, exports).
    QImage render(const QSize& size);

private:
    void append(int graphIndex, double tokens, double loss);

    QCustomPlot* m_plot;
};

} // namespace crowdtrain::ui
