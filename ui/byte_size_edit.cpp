#include "ui/byte_size_edit.h"

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QHBoxLayout>
#include <QLocale>
#include <QSignalBlocker>

#include <algorithm>

#include <cmath>

namespace crowdtrain::ui {
namespace {

constexpr double kUnits[] = {1024.0 * 1024, 1024.0 * 1024 * 1024, 1024.0 * 1024 * 1024 * 1024};

} // namespace

ByteSizeEdit::ByteSizeEdit(QWidget* parent)
    : QWidget(parent)
    , m_number(new QDoubleSpinBox(this))
    , m_unit(new QComboBox(this))
{
    auto* layout = new QHBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    m_number->setDecimals(2);
    m_number->setRange(0, 1e9);
    m_number->setKeyboardTracking(false);
    m_number->setAccessibleName(tr("Size"));
    m_unit->addItems({tr("MiB"), tr("GiB"), tr("TiB")});
    m_unit->setAccessibleName(tr("Unit"));
    m_number->setMinimumWidth(m_number->fontMetrics().horizontalAdvance(QStringLiteral("000000.00")) + 40);
    layout->addWidget(m_number);
    layout->addWidget(m_unit);
    layout->addStretch(1);
    connect(m_unit, &QComboBox::currentIndexChanged, this, [this](int index) { showIn(index); });
    connect(m_number, &QDoubleSpinBox::editingFinished, this, [this] {
        const qint64 typed = qint64(std::llround(m_number->value() * unitBytes()));
        // The shown value stands for m_bytes as rounded: only a real edit sends.
        if (std::abs(double(typed - m_bytes)) < unitBytes() * 0.005)
            return;
        m_bytes = typed;
        emit edited(m_bytes);
    });
}

double ByteSizeEdit::unitBytes() const
{
    return kUnits[std::max(0, m_unit->currentIndex())];
}

void ByteSizeEdit::setBytes(int64_t bytes)
{
    m_bytes = bytes;
    // The largest unit that leaves at least 1 (MiB below 1 GiB).
    int unit = 0;
    while (unit + 1 < 3 && double(bytes) >= kUnits[unit + 1])
        ++unit;
    const QSignalBlocker blocker(m_unit);
    m_unit->setCurrentIndex(unit);
    showIn(unit);
}

void ByteSizeEdit::showIn(int unitIndex)
{
    const QSignalBlocker blocker(m_number);
    m_number->setValue(double(m_bytes) / kUnits[std::clamp(unitIndex, 0, 2)]);
}

QString ByteSizeEdit::shownText() const
{
    return QLocale().toString(m_number->value(), 'f', 2) + QLatin1Char(' ') + m_unit->currentText();
}

} // namespace crowdtrain::ui
