#include "ui/schedule_grid.h"

#include <QKeyEvent>
#include <QLocale>
#include <QMouseEvent>
#include <QPainter>

namespace crowdtrain::ui {

ScheduleGrid::ScheduleGrid(QWidget* parent)
    : QWidget(parent)
{
    setFocusPolicy(Qt::StrongFocus);
    setAccessibleName(tr("Weekly schedule"));
    setAccessibleDescription(tr("Hours when training may run; drag to change, arrows and Space with the keyboard"));
    setMouseTracking(false);
}

QString ScheduleGrid::value() const
{
    QString text(168, QLatin1Char('0'));
    for (int i = 0; i < 168; ++i)
        if (m_cells.testBit(i))
            text[i] = QLatin1Char('1');
    return text;
}

bool ScheduleGrid::setValue(const QString& text)
{
    if (text.size() != 168)
        return false;
    QBitArray cells(168);
    for (int i = 0; i < 168; ++i) {
        if (text[i] != QLatin1Char('0') && text[i] != QLatin1Char('1'))
            return false;
        cells.setBit(i, text[i] == QLatin1Char('1'));
    }
    m_cells = cells;
    update();
    return true;
}

int ScheduleGrid::labelWidth() const
{
    return fontMetrics().horizontalAdvance(QStringLiteral("Wed")) + 12;
}

int ScheduleGrid::headerHeight() const
{
    return fontMetrics().height() + 6;
}

QSize ScheduleGrid::sizeHint() const
{
    return {labelWidth() + 24 * 24, headerHeight() + 7 * 22};
}

QSize ScheduleGrid::minimumSizeHint() const
{
    return {labelWidth() + 24 * 12, headerHeight() + 7 * 14};
}

QRect ScheduleGrid::cellRect(int day, int hour) const
{
    const double w = double(width() - labelWidth()) / 24.0;
    const double h = double(height() - headerHeight()) / 7.0;
    const int x0 = labelWidth() + int(hour * w);
    const int x1 = labelWidth() + int((hour + 1) * w);
    const int y0 = headerHeight() + int(day * h);
    const int y1 = headerHeight() + int((day + 1) * h);
    return QRect(QPoint(x0, y0), QPoint(x1 - 1, y1 - 1));
}

std::pair<int, int> ScheduleGrid::cellAt(QPoint point) const
{
    const double w = double(width() - labelWidth()) / 24.0;
    const double h = double(height() - headerHeight()) / 7.0;
    if (w <= 0 || h <= 0)
        return {-1, -1};
    const int hour = int((point.x() - labelWidth()) / w);
    const int day = int((point.y() - headerHeight()) / h);
    if (point.x() < labelWidth() || point.y() < headerHeight() || hour > 23 || day > 6)
        return {-1, -1};
    return {day, hour};
}

void ScheduleGrid::paintEvent(QPaintEvent*)
{
    QPainter painter(this);
    const QPalette& p = palette();
    painter.fillRect(rect(), p.color(QPalette::Base));
    const QColor on = p.color(QPalette::Highlight);
    const QColor off = p.color(QPalette::AlternateBase);
    const QColor line = p.color(QPalette::Mid);
    painter.setPen(p.color(QPalette::Text));
    const QLocale locale;
    for (int day = 0; day < 7; ++day) {
        const QRect row = cellRect(day, 0);
        // Qt's days run from 1 = Monday.
        painter.drawText(QRect(0, row.top(), labelWidth() - 6, row.height()), Qt::AlignVCenter | Qt::AlignRight,
            locale.dayName(day + 1, QLocale::ShortFormat));
    }
    for (int hour = 0; hour < 24; hour += 3) {
        const QRect cell = cellRect(0, hour);
        painter.drawText(QRect(cell.left(), 0, cell.width() * 3, headerHeight()), Qt::AlignLeft | Qt::AlignVCenter,
            QString::number(hour));
    }
    for (int day = 0; day < 7; ++day) {
        for (int hour = 0; hour < 24; ++hour) {
            const QRect cell = cellRect(day, hour);
            painter.fillRect(cell, allowed(day, hour) ? on : off);
            painter.setPen(line);
            painter.drawRect(cell);
        }
    }
    if (hasFocus()) {
        QPen pen(p.color(QPalette::Text), 2);
        painter.setPen(pen);
        painter.drawRect(cellRect(m_cursorDay, m_cursorHour).adjusted(1, 1, -1, -1));
    }
}

void ScheduleGrid::mousePressEvent(QMouseEvent* event)
{
    const auto cell = cellAt(event->position().toPoint());
    if (cell.first < 0 || event->button() != Qt::LeftButton)
        return;
    m_dragFrom = cell;
    m_beforeDrag = m_cells;
    m_dragValue = !allowed(cell.first, cell.second);
    m_cursorDay = cell.first;
    m_cursorHour = cell.second;
    applyDrag(event->position().toPoint());
}

void ScheduleGrid::mouseMoveEvent(QMouseEvent* event)
{
    if (m_dragFrom.first >= 0)
        applyDrag(event->position().toPoint());
}

void ScheduleGrid::mouseReleaseEvent(QMouseEvent* event)
{
    if (m_dragFrom.first < 0)
        return;
    applyDrag(event->position().toPoint());
    m_dragFrom = {-1, -1};
    if (m_cells != m_beforeDrag)
        emit edited(value());
}

void ScheduleGrid::applyDrag(QPoint to)
{
    auto cell = cellAt(to);
    if (cell.first < 0) {
        // Outside the grid: clamp to its edge.
        const QPoint clamped(
            std::clamp(to.x(), labelWidth(), width() - 1), std::clamp(to.y(), headerHeight(), height() - 1));
        cell = cellAt(clamped);
        if (cell.first < 0)
            return;
    }
    m_cells = m_beforeDrag;
    const auto [d0, d1] = std::minmax(m_dragFrom.first, cell.first);
    const auto [h0, h1] = std::minmax(m_dragFrom.second, cell.second);
    for (int day = d0; day <= d1; ++day)
        for (int hour = h0; hour <= h1; ++hour)
            m_cells.setBit(day * 24 + hour, m_dragValue);
    update();
}

void ScheduleGrid::keyPressEvent(QKeyEvent* event)
{
    switch (event->key()) {
    case Qt::Key_Left:
        m_cursorHour = std::max(0, m_cursorHour - 1);
        break;
    case Qt::Key_Right:
        m_cursorHour = std::min(23, m_cursorHour + 1);
        break;
    case Qt::Key_Up:
        m_cursorDay = std::max(0, m_cursorDay - 1);
        break;
    case Qt::Key_Down:
        m_cursorDay = std::min(6, m_cursorDay + 1);
        break;
    case Qt::Key_Space:
        m_cells.toggleBit(m_cursorDay * 24 + m_cursorHour);
        emit edited(value());
        break;
    default:
        QWidget::keyPressEvent(event);
        return;
    }
    update();
}

} // namespace crowdtrain::ui
