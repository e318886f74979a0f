#pragma once

// A live line chart of a few named series over one x axis (time or
// tokens), on QCustomPlot. append() only stores a point; refresh() redraws
// once, so callers batch at a cadence. Each series keeps at most kMaxPoints
// (oldest dropped). Zoom and pan with the mouse; "Export PNG..." on the
// context menu. GUI thread only.

#include <QColor>
#include <QWidget>

class QCustomPlot;

namespace crowdtrain::ui {

class SeriesChart : public QWidget {
    Q_OBJECT

public:
    static constexpr int kMaxPoints = 100000;
    enum class XAxis { Time, Number };

    SeriesChart(const QString& title, XAxis x, const QString& xLabel, const QString& yLabel, QWidget* parent = nullptr);

    // Adds a series; returns its index. `rightAxis`: plotted against a second y axis.
    int addSeries(const QString& name, const QColor& color, bool rightAxis = false, bool dots = false);
    void setRightAxisLabel(const QString& label, double minimum, double maximum);
    void append(int series, double x, double y);
    void clear();
    void refresh();
    int pointCount(int series) const;
    // How long the last redraw took, in ms (QCustomPlot measures it).
    double lastReplotMs() const;
    // The newest x of a series (NaN when empty).
    double lastX(int series) const;
    bool saveImage(const QString& file, int width = 0, int height = 0);
    QCustomPlot* plot() const { return m_plot; }

private:
    void exportImage();

    QCustomPlot* m_plot;
    QString m_title;
};

} // namespace crowdtrain::ui
