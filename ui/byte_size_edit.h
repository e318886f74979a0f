#pragma once

// A size in bytes shown and edited in human units: a number and its unit
// (MiB, GiB, TiB), e.g. "953.67 MiB" for 1,000,000,000 bytes. Changing the
// unit re-expresses the same size; editing the number emits edited() with
// the new size in bytes (the daemon judges the range). GUI thread only.

#include <QWidget>

class QComboBox;
class QDoubleSpinBox;

namespace crowdtrain::ui {

class ByteSizeEdit : public QWidget {
    Q_OBJECT

public:
    explicit ByteSizeEdit(QWidget* parent = nullptr);
    void setBytes(int64_t bytes);
    int64_t bytes() const { return m_bytes; }
    // What it shows, e.g. "953.67 MiB".
    QString shownText() const;
    QDoubleSpinBox* number() const { return m_number; }
    QComboBox* unit() const { return m_unit; }

signals:
    void edited(int64_t bytes);

private:
    void showIn(int unitIndex);
    double unitBytes() const;

    QDoubleSpinBox* m_number;
    QComboBox* m_unit;
    int64_t m_bytes = 0;
};

} // namespace crowdtrain::ui
