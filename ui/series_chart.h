#pragma once

// A live line chart of a few named series over one x axis (time or
// tokens), on QCustomPlot. append() only stores a point; refresh() redraws
// once, so callers batch at a cadence. Each series keeps at most kMaxPoints
// (oldest dropped). Until its first point the chart keeps a fixed range
// (setEmptyRange; a time axis shows the last five minutes) and says why it
// is empty (setEmptyText); a flat line gets a sensible range around it, and
// a count axis (setIntegerTicks) ticks at whole numbers only. Zoom and pan
// with the mouse; "Export PNG..." on the context menu. GUI thread only.

#include <QColor>
#include <QWidget>

class QCustomPlot;
class QCPItemText;

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
    // The value axis's range while there is no point (default 0 to 1), and
    // the x range of a number axis then (default 0 to 1).
    void setEmptyRange(double yMinimum, double yMaximum, double xMinimum = 0, double xMaximum = 1);
    // The line shown in the middle of the chart while it has no point.
    void setEmptyText(const QString& text);
    QString emptyText() const;
    // Whether the empty-chart line is shown now.
    bool showsEmptyText() const;
    // Ticks of the value axis at whole numbers only (counts), from 0.
    void setIntegerTicks(bool on);
    void append(int series, double x, double y);
    void clear();
    void refresh();
    int pointCount(int series) const;
    // How long the last redraw took, in ms (QCustomPlot measures it).
    double lastReplotMs() const;
    bool isEmpty() const;
    // The newest x of a series (NaN when empty).
    double lastX(int series) const;
    bool saveImage(const QString& file, int width = 0, int height = 0);
    QCustomPlot* plot() const { return m_plot; }

private:
    void exportImage();

    void rescaleValues();

    QCustomPlot* m_plot;
    QCPItemText* m_emptyText;
    QString m_title;
    XAxis m_x;
    double m_emptyY[2] = {0, 1};
    double m_emptyX[2] = {0, 1};
    bool m_integer = false;
};

} // namespace crowdtrain::ui
