#include "ui/first_run.h"

#include "ui/daemon_link.h"
#include "ui/format.h"

#include <QButtonGroup>
#include <QCheckBox>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QMessageBox>
#include <QRadioButton>
#include <QVBoxLayout>

namespace crowdtrain::ui {

FirstRunWizard::FirstRunWizard(DaemonLink& link, QWidget* parent)
    : QWizard(parent)
    , m_link(link)
{
    setWindowTitle(tr("Welcome to Crowdtrain"));
    setWizardStyle(QWizard::ModernStyle);
    setOption(QWizard::NoBackButtonOnStartPage);

    auto* welcome = new QWizardPage(this);
    welcome->setTitle(tr("Lend your computer to train open language models"));
    auto* wl = new QVBoxLayout(welcome);
    auto* intro = new QLabel(tr("<p>Crowdtrain lets your graphics card (or processor) help train public language "
                                "models together with other volunteers. You choose a project, how hard your "
                                "computer may work and when; you can watch the model learn, and download and try "
                                "what it has learned.</p><p><b>Nothing runs until you choose a project.</b> You can "
                                "pause at any time, and closing the window keeps your settings.</p>"),
        welcome);
    intro->setWordWrap(true);
    wl->addWidget(intro);
    addPage(welcome);

    auto* who = new QWizardPage(this);
    who->setTitle(tr("How should others see you?"));
    who->setSubTitle(tr("Leaderboards show this name next to your contribution."));
    auto* nl = new QVBoxLayout(who);
    m_name = new QLineEdit(who);
    m_name->setPlaceholderText(tr("Display name"));
    m_name->setAccessibleName(tr("Display name"));
    m_name->setMaxLength(64);
    m_anonymous = new QCheckBox(tr("Stay anonymous"), who);
    connect(m_anonymous, &QCheckBox::toggled, m_name, &QLineEdit::setDisabled);
    nl->addWidget(m_name);
    nl->addWidget(m_anonymous);
    nl->addStretch(1);
    addPage(who);

    auto* what = new QWizardPage(this);
    what->setTitle(tr("Choose a project"));
    what->setSubTitle(tr("The local demo trains a small model on this computer in a minute; "
                         "you can add other projects later with their hub link."));
    auto* pl = new QVBoxLayout(what);
    m_projects = new QListWidget(what);
    m_projects->setAccessibleName(tr("Projects"));
    pl->addWidget(m_projects);
    addPage(what);

    auto* how = new QWizardPage(this);
    how->setTitle(tr("How hard may your computer work?"));
    how->setSubTitle(tr("You can change this at any time under Settings."));
    auto* hl = new QVBoxLayout(how);
    m_presets = new QButtonGroup(how);
    const QString presets[][2] = {
        {QStringLiteral("quiet"), tr("Quiet — a quarter of the time while you use the computer, cooler and quieter")},
        {QStringLiteral("balanced"), tr("Balanced — half the time while you use the computer, fully when idle")},
        {QStringLiteral("maximum"), tr("Maximum — as fast as it can, always")}};
    for (int i = 0; i < 3; ++i) {
        auto* radio = new QRadioButton(presets[i][1], how);
        radio->setProperty("preset", presets[i][0]);
        m_presets->addButton(radio, i);
        hl->addWidget(radio);
    }
    m_presets->button(1)->setChecked(true);
    hl->addStretch(1);
    addPage(how);

    loadProjects();
}

void FirstRunWizard::loadProjects()
{
    m_projects->clear();
    auto reply = m_link.call(QStringLiteral("catalog"));
    if (!reply.ok)
        return;
    for (const control::Value& hub : reply.body["hubs"].items()) {
        for (const control::Value& project : hub["projects"].items()) {
            const bool demo = hub["link"].toString() == "demo";
            auto* item = new QListWidgetItem((demo ? tr("Local demo: ") : QString()) + text(project["name"])
                    + QStringLiteral(" — ") + text(project["description"]),
                m_projects);
            item->setData(Qt::UserRole, text(hub["link"]));
            item->setData(Qt::UserRole + 1, text(project["name"]));
            if (demo && !m_projects->currentItem())
                m_projects->setCurrentItem(item);
        }
    }
    if (!m_projects->currentItem() && m_projects->count() > 0)
        m_projects->setCurrentRow(0);
}

void FirstRunWizard::accept()
{
    m_error.clear();
    control::Value name = control::Value::map();
    name.set("key", "display_name");
    name.set("value", m_anonymous->isChecked() ? std::string() : m_name->text().trimmed().toStdString());
    if (auto reply = m_link.call(QStringLiteral("settings_set"), name); !reply.ok)
        m_error = reply.message;
    // The preset, where the daemon has presets (a daemon without them says unknown_setting).
    if (QAbstractButton* chosen = m_presets->checkedButton(); m_error.isEmpty() && chosen) {
        control::Value preset = control::Value::map();
        preset.set("key", "preset");
        preset.set("value", chosen->property("preset").toString().toStdString());
        if (auto reply = m_link.call(QStringLiteral("settings_set"), preset);
            !reply.ok && reply.code != QLatin1String("unknown_setting"))
            m_error = reply.message;
    }
    QListWidgetItem* item = m_projects->currentItem();
    if (m_error.isEmpty() && item) {
        control::Value join = control::Value::map();
        join.set("hub", item->data(Qt::UserRole).toString().toStdString());
        join.set("project", item->data(Qt::UserRole + 1).toString().toStdString());
        if (auto reply = m_link.call(QStringLiteral("join"), join, 20000); !reply.ok)
            m_error = reply.message;
    }
    if (!m_error.isEmpty()) {
        QMessageBox::warning(this, windowTitle(), m_error);
        return;
    }
    QWizard::accept();
}

} // namespace crowdtrain::ui
