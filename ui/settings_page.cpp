#include "ui/settings_page.h"

#include "ui/format.h"
#include "ui/settings_editors.h"

#include <QApplication>
#include <QCheckBox>
#include <QDesktopServices>
#include <QDir>
#include <QFile>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QScrollArea>
#include <QStandardPaths>
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

QString sentence(const QString& words)
{
    return words.left(1).toUpper() + words.mid(1);
}

} // namespace

SettingsPage::SettingsPage(Link& link, QWidget* parent)
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
    fetch(qname(control::request::kStatus), control::Value::map(), [this](const DaemonReply& status) {
        if (status.ok) {
            const control::Value& gpu = status.body["limits"]["gpu"];
            m_gpuUnavailable = gpu["available"].toBool() ? QString() : text(gpu["why"]);
            m_coreAdvice = text(status.body["core_advice"]);
        }
        fetch(qname(control::request::kSettingsGet), control::Value::map(), [this](const DaemonReply& reply) {
            if (reply.ok)
                showSettings(reply.body["described"]);
        });
    });
}

void SettingsPage::apply(const QString& key, const control::Value& value)
{
    control::Value body = control::Value::map();
    body.set("key", key.toStdString());
    body.set("value", value);
    send(qname(control::request::kSettingsSet), body, [this, key](const DaemonReply& reply) {
        if (!reply.ok) {
            // The daemon's words, never a silent clamp; the editor shows the value kept.
            m_error->setText(reply.message);
            m_error->show();
            reload();
            emit applied(key, false);
            return;
        }
        m_error->hide();
        emit message(tr("Saved %1.").arg(settings::labelOf(key.toStdString())));
        // A preset changes other keys.
        if (key == qname(control::setting::kPreset))
            reload();
        emit applied(key, true);
    });
}

void SettingsPage::showSettings(const control::Value& described)
{
    if (!sameForm(described)) {
        build(described);
        return;
    }
    // The same settings: the editors stay (focus, scroll position), their values follow.
    for (const control::Value& spec : described.items()) {
        QWidget* editor = m_editors.at(QString::fromStdString(spec["key"].toString()));
        settings::showValue(editor, spec);
        editor->setToolTip(descriptionOf(spec));
    }
}

bool SettingsPage::sameForm(const control::Value& described) const
{
    if (m_gpuUnavailable != m_builtGpuUnavailable || m_coreAdvice != m_builtCoreAdvice
        || described.size() != m_keys.size())
        return false;
    for (std::size_t i = 0; i < m_keys.size(); ++i)
        if (described.at(i)["key"].toString() != m_keys[i])
            return false;
    return !m_keys.empty();
}

void SettingsPage::build(const control::Value& described)
{
    while (m_form->rowCount() > 0)
        m_form->removeRow(0);
    m_editors.clear();
    m_keys.clear();
    m_builtGpuUnavailable = m_gpuUnavailable;
    m_builtCoreAdvice = m_coreAdvice;
    for (const control::Value& spec : described.items()) {
        addSection(spec["key"].toString());
        addSetting(spec);
    }
    addAppRows();
}

void SettingsPage::addSection(const std::string& key)
{
    const QString section = settings::sectionBefore(key);
    if (section.isEmpty())
        return;
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
    if (key == control::setting::kGpuMemoryLimitMib.name && !m_coreAdvice.isEmpty()) {
        // A GPU without its core: the one command that adds it.
        auto* advice = new QLabel(m_coreAdvice, m_formHost);
        advice->setWordWrap(true);
        advice->setTextInteractionFlags(Qt::TextSelectableByMouse);
        advice->setAccessibleName(tr("GPU core advice"));
        m_form->addRow(advice);
    }
    if (key == control::setting::kGpuMemoryLimitMib.name && !m_gpuUnavailable.isEmpty()) {
        // Said once, in words, above the greyed GPU limits.
        auto* why = new QLabel(sentence(m_gpuUnavailable) + QLatin1Char('.'), m_formHost);
        why->setWordWrap(true);
        why->setEnabled(false);
        m_form->addRow(why);
    }
}

QString SettingsPage::descriptionOf(const control::Value& spec) const
{
    if (settings::needsNvml(spec["key"].toString()) && !m_gpuUnavailable.isEmpty())
        return sentence(m_gpuUnavailable);
    return text(spec["description"]);
}

void SettingsPage::addSetting(const control::Value& spec)
{
    const std::string key = spec["key"].toString();
    const QString qkey = QString::fromStdString(key);
    QWidget* editor
        = settings::makeEditor(spec, m_formHost, [this, qkey](const control::Value& value) { apply(qkey, value); });
    // Shown, so a volunteer knows the limit exists, but greyed with the reason.
    if (settings::needsNvml(key) && !m_gpuUnavailable.isEmpty())
        editor->setEnabled(false);
    const QString description = descriptionOf(spec);
    editor->setAccessibleName(settings::labelOf(key));
    editor->setToolTip(description);
    editor->setObjectName(qkey);
    m_editors[qkey] = editor;
    m_keys.push_back(key);
    auto* label = new QLabel(settings::labelOf(key), m_formHost);
    label->setToolTip(description);
    label->setEnabled(editor->isEnabled());
    label->setBuddy(editor);
    m_form->addRow(label, editor);
}

void SettingsPage::addAppRows()
{
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
