#pragma once

// Draws a cell as a progress bar when its model gives kProgressRole (0 to
// 1000), with the cell's text on the bar; other cells as usual. One
// delegate for every table and tree of the app: no widget per row.
// GUI thread only.

#include <QStyledItemDelegate>

namespace crowdtrain::ui {

// The share done, 0 to 1000 (an int); no value: a plain cell.
constexpr int kProgressRole = Qt::UserRole + 100;

class ProgressDelegate : public QStyledItemDelegate {
    Q_OBJECT

public:
    using QStyledItemDelegate::QStyledItemDelegate;

    void paint(QPainter* painter, const QStyleOptionViewItem& option, const QModelIndex& index) const override;
};

} // namespace crowdtrain::ui
