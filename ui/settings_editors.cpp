#include "ui/settings_editors.h"

#include "ui/byte_size_edit.h"
#include "ui/format.h"
#include "ui/schedule_grid.h"

#include <QCheckBox>
#include <QComboBox>
#include <QCoreApplication>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QSignalBlocker>
#include <QSlider>
#include <QSpinBox>
#include <QTimer>

#include <map>

namespace crowdtrain::ui::settings {
namespace {

namespace setting = control::setting;
namespace setting_type = control::setting_type;

QString tr(const char* text)
{
    return QCoreApplication::translate("Settings", text);
}

bool endsWith(const std::string& key, std::string_view tail)
{
    return key.size() > tail.size() && key.compare(key.size() - tail.size(), tail.size(), tail) == 0;
}

// A choice as people read it: "auto" -> "Automatic", "balanced" -> "Balanced".
QString choiceWords(const std::string& key, const QString& choice)
{
    if (key == setting::kDevice.name)
        return deviceWords(choice);
    return choice.left(1).toUpper() + choice.mid(1);
}

// A share of the time: a slider with its value beside it.
QWidget* shareEditor(const control::Value& spec, QWidget* parent, Apply apply)
{
    auto* host = new QWidget(parent);
    auto* row = new QHBoxLayout(host);
    row->setContentsMargins(0, 0, 0, 0);
    auto* slider = new QSlider(Qt::Horizontal, host);
    slider->setRange(int(spec["min"].toInt()), int(spec["max"].toInt()));
    slider->setSingleStep(5);
    slider->setPageStep(25);
    slider->setTickInterval(25);
    slider->setTickPosition(QSlider::TicksBelow);
    slider->setValue(int(spec["value"].toInt()));
    auto* shown = new QLabel(host);
    shown->setMinimumWidth(shown->fontMetrics().horizontalAdvance(QStringLiteral("100% ")));
    auto show = [shown](int v) { shown->setText(v == 0 ? tr("pause") : QStringLiteral("%1%").arg(v)); };
    show(slider->value());
    QObject::connect(slider, &QSlider::valueChanged, shown, show);
    auto send = [slider, apply] {
        if (!slider->isSliderDown())
            apply(control::Value(int64_t(slider->value())));
    };
    QObject::connect(slider, &QSlider::sliderReleased, host, send);
    QObject::connect(slider, &QSlider::actionTriggered, host, [host, send](int) {
        QTimer::singleShot(0, host, send); // keyboard and page clicks: after the value moved
    });
    const QString key = QString::fromStdString(spec["key"].toString());
    slider->setAccessibleName(labelOf(spec["key"].toString()));
    slider->setObjectName(key + QStringLiteral("_slider"));
    row->addWidget(slider, 1);
    row->addWidget(shown);
    return host;
}

QWidget* scheduleEditor(const control::Value& spec, QWidget* parent, Apply apply)
{
    auto* grid = new ScheduleGrid(parent);
    grid->setValue(text(spec["value"]));
    QObject::connect(
        grid, &ScheduleGrid::edited, grid, [apply](const QString& v) { apply(control::Value(v.toStdString())); });
    return grid;
}

QWidget* boolEditor(const control::Value& spec, QWidget* parent, Apply apply)
{
    auto* box = new QCheckBox(parent);
    box->setChecked(spec["value"].toBool());
    QObject::connect(box, &QCheckBox::toggled, box, [apply](bool on) { apply(control::Value(on)); });
    return box;
}

// A size: shown in MiB, GiB or TiB, sent in bytes.
QWidget* sizeEditor(const control::Value& spec, QWidget* parent, Apply apply)
{
    auto* size = new ByteSizeEdit(parent);
    size->setBytes(spec["value"].toInt());
    QObject::connect(size, &ByteSizeEdit::edited, size, [apply](int64_t bytes) { apply(control::Value(bytes)); });
    return size;
}

// Beyond a spin box's range: typed as text, the daemon judges it.
QWidget* wideIntEditor(const control::Value& spec, QWidget* parent, Apply apply)
{
    auto* line = new QLineEdit(parent);
    line->setText(QString::number(spec["value"].toInt()));
    QObject::connect(line, &QLineEdit::editingFinished, line, [line, apply] {
        if (!line->isModified())
            return;
        line->setModified(false);
        bool ok = false;
        const qlonglong number = line->text().trimmed().toLongLong(&ok);
        apply(ok ? control::Value(int64_t(number)) : control::Value(line->text().toStdString()));
    });
    return line;
}

int spinValue(const control::Value& value)
{
    return int(std::clamp<int64_t>(value.toInt(), INT32_MIN, INT32_MAX));
}

QWidget* intEditor(const control::Value& spec, QWidget* parent, Apply apply)
{
    auto* spin = new QSpinBox(parent);
    // Qt's spin box is int-sized; the daemon decides the real rule.
    spin->setRange(int(std::max<int64_t>(spec["min"].toInt(), INT32_MIN)),
        int(std::min<int64_t>(spec["max"].toInt(INT32_MAX), INT32_MAX)));
    spin->setValue(spinValue(spec["value"]));
    spin->setKeyboardTracking(false);
    QObject::connect(
        spin, &QSpinBox::editingFinished, spin, [spin, apply] { apply(control::Value(int64_t(spin->value()))); });
    return spin;
}

// Shown in words ("Automatic", "Balanced"), sent as the daemon's value.
QWidget* choiceEditor(const control::Value& spec, QWidget* parent, Apply apply)
{
    auto* combo = new QComboBox(parent);
    for (const control::Value& c : spec["choices"].items())
        combo->addItem(choiceWords(spec["key"].toString(), text(c)), text(c));
    combo->setCurrentIndex(std::max(0, combo->findData(text(spec["value"]))));
    QObject::connect(combo, &QComboBox::activated, combo,
        [combo, apply](int index) { apply(control::Value(combo->itemData(index).toString().toStdString())); });
    return combo;
}

QWidget* textEditor(const control::Value& spec, QWidget* parent, Apply apply)
{
    auto* line = new QLineEdit(parent);
    line->setText(text(spec["value"]));
    QObject::connect(line, &QLineEdit::editingFinished, line, [line, apply] {
        if (line->isModified())
            apply(control::Value(line->text().toStdString()));
        line->setModified(false);
    });
    return line;
}

} // namespace

QWidget* makeEditor(const control::Value& spec, QWidget* parent, Apply apply)
{
    const std::string key = spec["key"].toString();
    const std::string type = spec["type"].toString();
    if (key == setting::kBusyShareInUse.name || key == setting::kBusyShareIdle.name)
        return shareEditor(spec, parent, std::move(apply));
    if (key == setting::kSchedule.name)
        return scheduleEditor(spec, parent, std::move(apply));
    if (type == setting_type::kBool)
        return boolEditor(spec, parent, std::move(apply));
    // Sizes by the key's unit: every `*_bytes` setting.
    if (type == setting_type::kInt && endsWith(key, "_bytes"))
        return sizeEditor(spec, parent, std::move(apply));
    if (type == setting_type::kInt && (spec["max"].toInt() > INT32_MAX || spec["min"].toInt() < INT32_MIN))
        return wideIntEditor(spec, parent, std::move(apply));
    if (type == setting_type::kInt)
        return intEditor(spec, parent, std::move(apply));
    if (type == setting_type::kChoice)
        return choiceEditor(spec, parent, std::move(apply));
    return textEditor(spec, parent, std::move(apply));
}

void showValue(QWidget* editor, const control::Value& spec)
{
    const control::Value& value = spec["value"];
    const QSignalBlocker quiet(editor);
    if (auto* slider = editor->findChild<QSlider*>()) {
        const QSignalBlocker quietSlider(slider);
        slider->setValue(int(value.toInt()));
        // The label beside it follows valueChanged, blocked here.
        if (auto* shown = editor->findChild<QLabel*>())
            shown->setText(slider->value() == 0 ? tr("pause") : QStringLiteral("%1%").arg(slider->value()));
    } else if (auto* grid = qobject_cast<ScheduleGrid*>(editor)) {
        grid->setValue(text(value));
    } else if (auto* box = qobject_cast<QCheckBox*>(editor)) {
        box->setChecked(value.toBool());
    } else if (auto* size = qobject_cast<ByteSizeEdit*>(editor)) {
        size->setBytes(value.toInt());
    } else if (auto* spin = qobject_cast<QSpinBox*>(editor)) {
        spin->setValue(spinValue(value));
    } else if (auto* combo = qobject_cast<QComboBox*>(editor)) {
        combo->setCurrentIndex(std::max(0, combo->findData(text(value))));
    } else if (auto* line = qobject_cast<QLineEdit*>(editor)) {
        line->setText(value.isInt() ? QString::number(value.toInt()) : text(value));
        line->setModified(false);
    }
}

QString labelOf(const std::string& key)
{
    static const std::map<std::string_view, const char*> labels = {
        {setting::kCpuThreads.name, QT_TRANSLATE_NOOP("Settings", "CPU threads (0: all cores)")},
        {setting::kAutoDownload.name, QT_TRANSLATE_NOOP("Settings", "Download new checkpoints")},
        {setting::kAutoDownloadMaxBytes.name, QT_TRANSLATE_NOOP("Settings", "... up to this size")},
        {setting::kPieceCacheBytes.name, QT_TRANSLATE_NOOP("Settings", "Disk for training data")},
        {setting::kGeneratePausesTraining.name, QT_TRANSLATE_NOOP("Settings", "Pause training while generating text")},
        {setting::kGpuMemoryLimitMib.name, QT_TRANSLATE_NOOP("Settings", "GPU memory limit (MiB, 0: automatic)")},
        {setting::kGpuMemoryFreeMib.name, QT_TRANSLATE_NOOP("Settings", "... else leave free (MiB)")},
        {setting::kBusyShareInUse.name, QT_TRANSLATE_NOOP("Settings", "Work while I use the computer")},
        {setting::kBusyShareIdle.name, QT_TRANSLATE_NOOP("Settings", "Work while the computer is idle")},
        {setting::kPauseWhenInUse.name, QT_TRANSLATE_NOOP("Settings", "Pause while I use the computer")},
        {setting::kInUseMinutes.name, QT_TRANSLATE_NOOP("Settings", "In use = input within (minutes)")},
        {setting::kPausePrograms.name, QT_TRANSLATE_NOOP("Settings", "Pause while these programs run")},
        {setting::kPauseWhenGpuBusy.name,
            QT_TRANSLATE_NOOP("Settings", "Pause while a game or other program uses the GPU")},
        {setting::kMaxGpuTemperatureC.name, QT_TRANSLATE_NOOP("Settings", "Maximum GPU temperature (\u00B0C)")},
        {setting::kMaxGpuPowerW.name, QT_TRANSLATE_NOOP("Settings", "Maximum GPU power (W, 0: no cap)")},
        {setting::kUploadLimitKibS.name, QT_TRANSLATE_NOOP("Settings", "Upload limit (KiB/s, 0: none)")},
        {setting::kDownloadLimitKibS.name, QT_TRANSLATE_NOOP("Settings", "Download limit (KiB/s, 0: none)")},
        {setting::kMonthlyDataCapMib.name, QT_TRANSLATE_NOOP("Settings", "Monthly data cap (MiB, 0: none)")},
        {setting::kGpuDevices.name, QT_TRANSLATE_NOOP("Settings", "GPUs to use")},
    };
    if (auto it = labels.find(key); it != labels.end())
        return tr(it->second);
    QString label = QString::fromStdString(key).replace(QLatin1Char('_'), QLatin1Char(' '));
    return label.left(1).toUpper() + label.mid(1);
}

QString sectionBefore(const std::string& key)
{
    static const std::map<std::string_view, const char*> sections = {
        {setting::kDisplayName.name, QT_TRANSLATE_NOOP("Settings", "General")},
        {setting::kPreset.name, QT_TRANSLATE_NOOP("Settings", "How hard this computer works")},
        {setting::kPauseOnBattery.name, QT_TRANSLATE_NOOP("Settings", "When to pause")},
        {setting::kGpuMemoryLimitMib.name, QT_TRANSLATE_NOOP("Settings", "GPU")},
        {setting::kSchedule.name, QT_TRANSLATE_NOOP("Settings", "Weekly schedule")},
        {setting::kUploadLimitKibS.name, QT_TRANSLATE_NOOP("Settings", "Network")},
    };
    auto it = sections.find(key);
    return it == sections.end() ? QString() : tr(it->second);
}

bool needsNvml(const std::string& key)
{
    for (std::string_view nvml : {setting::kMaxGpuTemperatureC.name, setting::kMaxGpuPowerW.name,
             setting::kPauseWhenGpuBusy.name, setting::kGpuMemoryLimitMib.name, setting::kGpuMemoryFreeMib.name})
        if (key == nvml)
            return true;
    return false;
}

} // namespace crowdtrain::ui::settings
