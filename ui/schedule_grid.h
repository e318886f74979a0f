#pragma once

// The weekly schedule, BOINC-style: 7 days x 24 hours, each hour allowed
// (filled) or not. Press on a cell and drag: every cell the pointer
// covers takes the opposite of the first cell's state (a rectangle from
// the press to the pointer). Arrow keys move a cursor, Space toggles.
// The value is the daemon's `schedule` text: 168 characters '0'/'1', hour h
// of weekday d (0 = Monday) at d*24+h.

#include <QBitArray>
#include <QWidget>

namespace crowdtrain::ui {

class ScheduleGrid : public QWidget {
    Q_OBJECT

public:
    explicit ScheduleGrid(QWidget* parent = nullptr);

    QString value() const;
    // False (and nothing changes) unless `text` is 168 '0'/'1'.
    bool setValue(const QString& text);
    bool allowed(int day, int hour) const { return m_cells.testBit(day * 24 + hour); }
    // Where a cell is drawn (for tests driving the mouse).
    QRect cellRect(int day, int hour) const;
    QSize sizeHint() const override;
    QSize minimumSizeHint() const override;

signals:
    // After a drag or key press changed cells.
    void edited(const QString& value);

protected:
    void paintEvent(QPaintEvent* event) override;
    void mousePressEvent(QMouseEvent* event) override;
    void mouseMoveEvent(QMouseEvent* event) override;
    void mouseReleaseEvent(QMouseEvent* event) override;
    void keyPressEvent(QKeyEvent* event) override;

private:
    std::pair<int, int> cellAt(QPoint point) const; // (-1, -1) outside
    void applyDrag(QPoint to);
    int labelWidth() const;
    int headerHeight() const;

    QBitArray m_cells{168, true};
    QBitArray m_beforeDrag;
    std::pair<int, int> m_dragFrom{-1, -1};
    bool m_dragValue = false;
    int m_cursorDay = 0;
    int m_cursorHour = 0;
};

} // namespace crowdtrain::ui
