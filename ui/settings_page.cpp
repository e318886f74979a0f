// The settings page: built from the daemon's described settings.
#include "ui/byte_size_edit.h"
#include "ui/daemon_link.h"
#include "ui/format.h"
#include "ui/pages.h"
#include "ui/schedule_grid.h"

#include <QApplication>
#include <QCheckBox>
#include <QComboBox>
#include <QCoreApplication>
#include <QDesktopServices>
#include <QDir>
#include <QFile>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QScrollArea>
#include <QSlider>
#include <QSpinBox>
#include <QStandardPaths>
#include <QTimer>
#include <QUrl>
#include <QVBoxLayout>

namespace crowdtrain::ui {

namespace {

QString autostartFile()
{
    return QStandardPaths::writableLocation(QStandardPaths::GenericConfigLocation)
        + QStringLiteral("/autostart/crowdtrain.desktop");
}

bool setStartAtLogin(bool on)
{
    if (!on)
        return !QFile::exists(autostartFile()) || QFile::remove(autostartFile());
    QDir().mkpath(QFileInfo(autostartFile()).path());
    QFile file(autostartFile());
    if (!file.open(QIODevice::WriteOnly | QIODevice::Truncate))
        return false;
    file.write("[Desktop Entry]\nType=Application\nName=Crowdtrain\nExec=");
    file.write(QApplication::applicationFilePath().toUtf8());
    file.write(" --hidden\nIcon=crowdtrain\nX-GNOME-Autostart-enabled=true\n");
    return true;
}

// "busy_share_in_use" -> "Busy share in use"
QString labelOf(const std::string& key)
{
    static const std::map<std::string, const char*> labels = {
        {"cpu_threads", QT_TRANSLATE_NOOP("Settings", "CPU threads (0: all cores)")},
        {"auto_download", QT_TRANSLATE_NOOP("Settings", "Download new checkpoints")},
        {"auto_download_max_bytes", QT_TRANSLATE_NOOP("Settings", "... up to this size")},
        {"piece_cache_bytes", QT_TRANSLATE_NOOP("Settings", "Disk for training data")},
        {"generate_pauses_training", QT_TRANSLATE_NOOP("Settings", "Pause training while generating text")},
        {"gpu_memory_limit_mib", QT_TRANSLATE_NOOP("Settings", "GPU memory limit (MiB, 0: automatic)")},
        {"gpu_memory_free_mib", QT_TRANSLATE_NOOP("Settings", "... else leave free (MiB)")},
        {"busy_share_in_use", QT_TRANSLATE_NOOP("Settings", "Work while I use the computer")},
        {"busy_share_idle", QT_TRANSLATE_NOOP("Settings", "Work while the computer is idle")},
        {"pause_when_in_use", QT_TRANSLATE_NOOP("Settings", "Pause while I use the computer")},
        {"in_use_minutes", QT_TRANSLATE_NOOP("Settings", "In use = input within (minutes)")},
        {"pause_programs", QT_TRANSLATE_NOOP("Settings", "Pause while these programs run")},
        {"pause_when_gpu_busy", QT_TRANSLATE_NOOP("Settings", "Pause while a game or other program uses the GPU")},
        {"max_gpu_temperature_c", QT_TRANSLATE_NOOP("Settings", "Maximum GPU temperature (\u00B0C)")},
        {"max_gpu_power_w", QT_TRANSLATE_NOOP("Settings", "Maximum GPU power (W, 0: no cap)")},
        {"upload_limit_kib_s", QT_TRANSLATE_NOOP("Settings", "Upload limit (KiB/s, 0: none)")},
        {"download_limit_kib_s", QT_TRANSLATE_NOOP("Settings", "Download limit (KiB/s, 0: none)")},
        {"monthly_data_cap_mib", QT_TRANSLATE_NOOP("Settings", "Monthly data cap (MiB, 0: none)")},
        {"gpu_devices", QT_TRANSLATE_NOOP("Settings", "GPUs to use")},
    };
    if (auto it = labels.find(key); it != labels.end())
        return QCoreApplication::translate("Settings", it->second);
    QString label = QString::fromStdString(key).replace(QLatin1Char('_'), QLatin1Char(' '));
    return label.left(1).toUpper() + label.mid(1);
}

// The heading a section starts with, at its first key.
QString sectionBefore(const std::string& key)
{
    if (key == "display_name")
        return QCoreApplication::translate("Settings", "General");
    if (key == "preset")
        return QCoreApplication::translate("Settings", "How hard this computer works");
    if (key == "pause_on_battery")
        return QCoreApplication::translate("Settings", "When to pause");
    if (key == "gpu_memory_limit_mib")
        return QCoreApplication::translate("Settings", "GPU");
    if (key == "schedule")
        return QCoreApplication::translate("Settings", "Weekly schedule");
    if (key == "upload_limit_kib_s")
        return QCoreApplication::translate("Settings", "Network");
    return {};
}

// A choice as people read it: "auto" -> "Automatic", "balanced" -> "Balanced".
QString choiceWords(const std::string& key, const QString& choice)
{
    if (key == "device")
        return deviceWords(choice);
    return choice.left(1).toUpper() + choice.mid(1);
}

// The settings that need NVML (an NVIDIA driver) to mean anything.
bool needsNvml(const std::string& key)
{
    return key == "max_gpu_temperature_c" || key == "max_gpu_power_w" || key == "pause_when_gpu_busy"
        || key == "gpu_memory_limit_mib" || key == "gpu_memory_free_mib";
}

} // namespace

SettingsPage::SettingsPage(DaemonLink& link, QWidget* parent)
    : Page(link, parent)
{
    auto* layout = new QVBoxLayout(this);
    m_error = new QLabel(this);
    m_error->setWordWrap(true);
    m_error->setAccessibleName(tr("Settings error"));
    QPalette warn = m_error->palette();
    warn.setColor(QPalette::WindowText, QColor(0xc0, 0x30, 0x30));
    m_error->setPalette(warn);
    m_error->hide();
    layout->addWidget(m_error);
    auto* scroll = new QScrollArea(this);
    scroll->setWidgetResizable(true);
    scroll->setFrameShape(QFrame::NoFrame);
    m_formHost = new QWidget(scroll);
    m_form = new QFormLayout(m_formHost);
    m_form->setFieldGrowthPolicy(QFormLayout::ExpandingFieldsGrow);
    scroll->setWidget(m_formHost);
    layout->addWidget(scroll, 1);
}

QWidget* SettingsPage::editorFor(const QString& key) const
{
    auto it = m_editors.find(key);
    return it == m_editors.end() ? nullptr : it->second;
}

void SettingsPage::load()
{
    // The GPU's availability first: it decides which editors are greyed.
    fetch(QStringLiteral("status"), control::Value::map(), [this](const DaemonReply& status) {
        if (status.ok) {
            const control::Value& gpu = status.body["limits"]["gpu"];
            m_gpuUnavailable = gpu["available"].toBool() ? QString() : text(gpu["why"]);
        }
        fetch(QStringLiteral("settings_get"), control::Value::map(), [this](const DaemonReply& reply) {
            if (reply.ok)
                build(reply.body["described"]);
        });
    });
}

void SettingsPage::apply(const QString& key, const control::Value& value)
{
    control::Value body = control::Value::map();
    body.set("key", key.toStdString());
    body.set("value", value);
    send(QStringLiteral("settings_set"), body, [this, key](const DaemonReply& reply) {
        if (!reply.ok) {
            // The daemon's words, never a silent clamp; the editor shows the value kept.
            m_error->setText(reply.message);
            m_error->show();
            reload();
            emit applied(key, false);
            return;
        }
        m_error->hide();
        emit message(tr("Saved %1.").arg(labelOf(key.toStdString())));
        // A preset changes other keys.
        if (key == QLatin1String("preset"))
            reload();
        emit applied(key, true);
    });
}

void SettingsPage::build(const control::Value& described)
{
    while (m_form->rowCount() > 0)
        m_form->removeRow(0);
    m_editors.clear();
    for (const control::Value& spec : described.items()) {
        const std::string key = spec["key"].toString();
        const QString qkey = QString::fromStdString(key);
        const std::string type = spec["type"].toString();
        const control::Value& value = spec["value"];
        QWidget* editor = nullptr;
        if (const QString section = sectionBefore(key); !section.isEmpty()) {
            if (m_form->rowCount() > 0) {
                auto* gap = new QWidget(m_formHost);
                gap->setFixedHeight(fontMetrics().height() / 2);
                m_form->addRow(gap);
            }
            auto* heading = new QLabel(section, m_formHost);
            QFont bold = heading->font();
            bold.setBold(true);
            heading->setFont(bold);
            m_form->addRow(heading);
            if (key == "gpu_memory_limit_mib" && !m_gpuUnavailable.isEmpty()) {
                // Said once, in words, above the greyed GPU limits.
                auto* why = new QLabel(
                    m_gpuUnavailable.left(1).toUpper() + m_gpuUnavailable.mid(1) + QLatin1Char('.'), m_formHost);
                why->setWordWrap(true);
                why->setEnabled(false);
                m_form->addRow(why);
            }
        }
        if (key.rfind("busy_share_", 0) == 0) {
            // A share of the time: a slider with its value beside it.
            auto* host = new QWidget(m_formHost);
            auto* row = new QHBoxLayout(host);
            row->setContentsMargins(0, 0, 0, 0);
            auto* slider = new QSlider(Qt::Horizontal, host);
            slider->setRange(int(spec["min"].toInt()), int(spec["max"].toInt()));
            slider->setSingleStep(5);
            slider->setPageStep(25);
            slider->setTickInterval(25);
            slider->setTickPosition(QSlider::TicksBelow);
            slider->setValue(int(value.toInt()));
            auto* shown = new QLabel(host);
            shown->setMinimumWidth(shown->fontMetrics().horizontalAdvance(QStringLiteral("100% ")));
            auto show = [shown](int v) {
                shown->setText(
                    v == 0 ? QCoreApplication::translate("Settings", "pause") : QStringLiteral("%1%").arg(v));
            };
            show(slider->value());
            connect(slider, &QSlider::valueChanged, shown, show);
            auto send = [this, qkey, slider] {
                if (!slider->isSliderDown())
                    apply(qkey, control::Value(int64_t(slider->value())));
            };
            connect(slider, &QSlider::sliderReleased, this, send);
            connect(slider, &QSlider::actionTriggered, this, [send](int) {
                QTimer::singleShot(0, send); // keyboard and page clicks: after the value moved
            });
            slider->setAccessibleName(labelOf(key));
            slider->setObjectName(qkey + QStringLiteral("_slider"));
            row->addWidget(slider, 1);
            row->addWidget(shown);
            editor = host;
        } else if (key == "schedule") {
            auto* grid = new ScheduleGrid(m_formHost);
            grid->setValue(text(value));
            connect(grid, &ScheduleGrid::edited, this,
                [this, qkey](const QString& v) { apply(qkey, control::Value(v.toStdString())); });
            editor = grid;
        } else if (type == "bool") {
            auto* box = new QCheckBox(m_formHost);
            box->setChecked(value.toBool());
            connect(box, &QCheckBox::toggled, this, [this, qkey](bool on) { apply(qkey, control::Value(on)); });
            editor = box;
        } else if (type == "int" && key.size() > 6 && key.compare(key.size() - 6, 6, "_bytes") == 0) {
            // A size: shown in MiB, GiB or TiB, sent in bytes.
            auto* size = new ByteSizeEdit(m_formHost);
            size->setBytes(value.toInt());
            connect(
                size, &ByteSizeEdit::edited, this, [this, qkey](int64_t bytes) { apply(qkey, control::Value(bytes)); });
            editor = size;
        } else if (type == "int" && (spec["max"].toInt() > INT32_MAX || spec["min"].toInt() < INT32_MIN)) {
            // Beyond a spin box's range (byte counts): typed as text, the daemon judges it.
            auto* line = new QLineEdit(m_formHost);
            line->setText(QString::number(value.toInt()));
            connect(line, &QLineEdit::editingFinished, this, [this, qkey, line] {
                if (!line->isModified())
                    return;
                line->setModified(false);
                bool ok = false;
                const qlonglong number = line->text().trimmed().toLongLong(&ok);
                if (ok)
                    apply(qkey, control::Value(int64_t(number)));
                else
                    apply(qkey, control::Value(line->text().toStdString()));
            });
            editor = line;
        } else if (type == "int") {
            auto* spin = new QSpinBox(m_formHost);
            // Qt's spin box is int-sized; the daemon decides the real rule.
            spin->setRange(int(std::max<int64_t>(spec["min"].toInt(), INT32_MIN)),
                int(std::min<int64_t>(spec["max"].toInt(INT32_MAX), INT32_MAX)));
            spin->setValue(int(std::clamp<int64_t>(value.toInt(), INT32_MIN, INT32_MAX)));
            spin->setKeyboardTracking(false);
            connect(spin, &QSpinBox::editingFinished, this,
                [this, qkey, spin] { apply(qkey, control::Value(int64_t(spin->value()))); });
            editor = spin;
        } else if (type == "choice") {
            // Shown in words ("Automatic", "Balanced"), sent as the daemon's value.
            auto* combo = new QComboBox(m_formHost);
            for (const control::Value& c : spec["choices"].items())
                combo->addItem(choiceWords(key, text(c)), text(c));
            combo->setCurrentIndex(std::max(0, combo->findData(text(value))));
            connect(combo, &QComboBox::activated, this, [this, qkey, combo](int index) {
                apply(qkey, control::Value(combo->itemData(index).toString().toStdString()));
            });
            editor = combo;
        } else {
            auto* line = new QLineEdit(m_formHost);
            line->setText(text(value));
            connect(line, &QLineEdit::editingFinished, this, [this, qkey, line] {
                if (line->isModified())
                    apply(qkey, control::Value(line->text().toStdString()));
                line->setModified(false);
            });
            editor = line;
        }
        QString description = text(spec["description"]);
        if (needsNvml(key) && !m_gpuUnavailable.isEmpty()) {
            // Shown, so a volunteer knows the limit exists, but greyed with the reason.
            editor->setEnabled(false);
            description = m_gpuUnavailable.left(1).toUpper() + m_gpuUnavailable.mid(1);
        }
        editor->setAccessibleName(labelOf(key));
        editor->setToolTip(description);
        editor->setObjectName(qkey);
        m_editors[qkey] = editor;
        auto* label = new QLabel(labelOf(key), m_formHost);
        label->setToolTip(description);
        label->setEnabled(editor->isEnabled());
        label->setBuddy(editor);
        m_form->addRow(label, editor);
    }
    // The app's own setting.
    auto* login = new QCheckBox(tr("Start Crowdtrain when I log in"), m_formHost);
    login->setObjectName(QStringLiteral("start_at_login"));
    login->setChecked(QFile::exists(autostartFile()));
    connect(login, &QCheckBox::toggled, this, [this](bool on) {
        if (!setStartAtLogin(on))
            emit message(tr("Could not change %1.").arg(autostartFile()));
    });
    m_form->addRow(tr("Start at login"), login);
    // Where the service keeps this volunteer's identity, training data and
    // checkpoints (XDG data folder; shown, not moved).
    const QString data
        = QStandardPaths::writableLocation(QStandardPaths::GenericDataLocation) + QStringLiteral("/crowdtrain");
    auto* dataRow = new QWidget(m_formHost);
    auto* dataLayout = new QHBoxLayout(dataRow);
    dataLayout->setContentsMargins(0, 0, 0, 0);
    auto* dataPath = new QLabel(data, dataRow);
    dataPath->setTextInteractionFlags(Qt::TextSelectableByMouse);
    auto* open = new QPushButton(tr("Open"), dataRow);
    open->setAccessibleName(tr("Open the data folder"));
    connect(open, &QPushButton::clicked, this, [data] { QDesktopServices::openUrl(QUrl::fromLocalFile(data)); });
    dataLayout->addWidget(dataPath, 1);
    dataLayout->addWidget(open);
    m_form->addRow(tr("Data folder"), dataRow);
}

} // namespace crowdtrain::ui
