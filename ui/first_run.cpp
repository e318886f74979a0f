#include "ui/first_run.h"

#include "ui/catalog_model.h"
#include "ui/format.h"
#include "ui/link.h"
#include "ui/project_list_model.h"

#include <QButtonGroup>
#include <QCheckBox>
#include <QLabel>
#include <QLineEdit>
#include <QListView>
#include <QMessageBox>
#include <QRadioButton>
#include <QTimer>
#include <QVBoxLayout>

namespace crowdtrain::ui {

ProjectChoicePage::ProjectChoicePage(QWidget* parent)
    : QWizardPage(parent)
    , m_catalog(new CatalogModel(this))
    , m_projects(new ProjectListModel(m_catalog, this))
{
    setTitle(tr("Choose a project"));
    setSubTitle(tr("The local demo trains a small model on this computer in a minute; "
                   "you can add other projects later with their hub link."));
    auto* layout = new QVBoxLayout(this);
    m_waiting = new QLabel(tr("Starting the Crowdtrain service\u2026"), this);
    m_waiting->setWordWrap(true);
    m_waiting->setAccessibleName(tr("Service state"));
    m_list = new QListView(this);
    m_list->setModel(m_projects);
    m_list->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_list->setAccessibleName(tr("Projects"));
    m_list->setWordWrap(true);
    m_list->setTextElideMode(Qt::ElideNone);
    m_list->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    m_list->setSpacing(3);
    m_notNow = new QCheckBox(tr("Not now: I will choose a project later on the Projects page"), this);
    m_notNow->setAccessibleName(tr("Choose no project now"));
    layout->addWidget(m_waiting);
    layout->addWidget(m_list, 1);
    layout->addWidget(m_notNow);
    connect(m_list->selectionModel(), &QItemSelectionModel::selectionChanged, this, &QWizardPage::completeChanged);
    connect(m_notNow, &QCheckBox::toggled, this, [this](bool on) {
        m_list->setDisabled(on);
        emit completeChanged();
    });
}

bool ProjectChoicePage::isComplete() const
{
    return m_notNow->isChecked() || m_list->selectionModel()->hasSelection();
}

void ProjectChoicePage::focusFirstChoice()
{
    (m_list->isEnabled() ? static_cast<QWidget*>(m_list) : m_notNow)->setFocus(Qt::OtherFocusReason);
}

void ProjectChoicePage::setWaiting(const QString& why)
{
    m_waiting->setText(why);
    m_waiting->setVisible(!why.isEmpty());
}

void ProjectChoicePage::setCatalog(const control::Value& catalog)
{
    const bool wasEmpty = m_projects->rowCount() == 0;
    m_catalog->setCatalog(catalog);
    m_loaded = true;
    setWaiting(m_projects->rowCount() == 0 ? tr("The service lists no project yet.") : QString());
    if (wasEmpty && !m_list->selectionModel()->hasSelection()) {
        const QModelIndex demo = m_projects->firstOfHub(qname(control::kDemoHub));
        if (const QModelIndex chosen = demo.isValid() ? demo : m_projects->index(0, 0); chosen.isValid())
            m_list->selectionModel()->setCurrentIndex(chosen, QItemSelectionModel::ClearAndSelect);
    }
    emit completeChanged();
}

FirstRunWizard::FirstRunWizard(Link& link, QWidget* parent)
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
    setPage(kWelcome, welcome);

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
    setPage(kWho, who);

    m_projectPage = new ProjectChoicePage(this);
    setPage(kProject, m_projectPage);
    // QWizard focuses a page's first focusable child, or its buttons when
    // that child is disabled; currentIdChanged comes after it did.
    connect(this, &QWizard::currentIdChanged, this, [this](int id) {
        if (id == kProject)
            m_projectPage->focusFirstChoice();
    });

    auto* how = new QWizardPage(this);
    how->setTitle(tr("How hard may your computer work?"));
    how->setSubTitle(tr("You can change this at any time under Settings."));
    auto* hl = new QVBoxLayout(how);
    m_presets = new QButtonGroup(how);
    const QString presets[][2]
        = {{QString(qname(control::setting::kPresetQuiet)),
               tr("Quiet \u2014 a quarter of the time while you use the computer, cooler and quieter")},
            {QString(qname(control::setting::kPresetBalanced)),
                tr("Balanced \u2014 half the time while you use the computer, fully when idle")},
            {QString(qname(control::setting::kPresetMaximum)), tr("Maximum \u2014 as fast as it can, always")}};
    for (int i = 0; i < 3; ++i) {
        auto* radio = new QRadioButton(presets[i][1], how);
        radio->setProperty("preset", presets[i][0]);
        m_presets->addButton(radio, i);
        hl->addWidget(radio);
    }
    m_presets->button(1)->setChecked(true);
    hl->addStretch(1);
    m_progress = new QLabel(how);
    m_progress->setWordWrap(true);
    m_progress->setAccessibleName(tr("What Finish is doing"));
    hl->addWidget(m_progress);
    setPage(kHow, how);

    // Until the service answers (it may be starting right now), ask again
    // every second; at once when the link attaches.
    m_retry = new QTimer(this);
    m_retry->setInterval(1000);
    connect(m_retry, &QTimer::timeout, this, &FirstRunWizard::loadProjects);
    connect(&m_link, &Link::attachedChanged, this, [this](bool attached) {
        if (attached)
            loadProjects();
    });
    connect(&m_link, &Link::startFailed, this, [this](const QString& why) {
        if (!m_projectPage->loaded())
            m_projectPage->setWaiting(why);
        m_startFailed = true;
    });
    m_retry->start();
    loadProjects();
}

QListView* FirstRunWizard::projectList() const
{
    return m_projectPage->list();
}

void FirstRunWizard::loadProjects()
{
    if (m_projectPage->loaded()) {
        m_retry->stop();
        return;
    }
    // (A failed start keeps its words until a service answers.)
    if (!m_link.attached() && !m_startFailed)
        m_projectPage->setWaiting(tr("Starting the Crowdtrain service\u2026"));
    if (m_asking)
        return;
    m_asking = true;
    m_link.request(
        qname(control::request::kCatalog), control::Value::map(), this,
        [this](const DaemonReply& reply) {
            m_asking = false;
            if (!reply.ok || m_projectPage->loaded())
                return;
            m_projectPage->setCatalog(reply.body);
            m_retry->stop();
        },
        3000);
}

void FirstRunWizard::accept()
{
    if (m_busy)
        return;
    m_busy = true;
    m_error.clear();
    button(QWizard::FinishButton)->setEnabled(false);
    button(QWizard::BackButton)->setEnabled(false);
    m_progress->setText(tr("Saving your choices\u2026"));
    setName();
}

void FirstRunWizard::fail(const DaemonReply& reply)
{
    m_busy = false;
    m_error = reply.message.isEmpty() ? tr("The Crowdtrain service refused (%1).").arg(reply.code) : reply.message;
    m_progress->setText(QStringLiteral("<span style=\"color:#c03030\">%1</span>").arg(m_error.toHtmlEscaped()));
    button(QWizard::FinishButton)->setEnabled(true);
    button(QWizard::BackButton)->setEnabled(true);
    emit failed();
}

void FirstRunWizard::setName()
{
    control::Value name = control::Value::map();
    name.set("key", control::setting::kDisplayName.name);
    name.set("value", m_anonymous->isChecked() ? std::string() : m_name->text().trimmed().toStdString());
    m_link.request(qname(control::request::kSettingsSet), name, this, [this](const DaemonReply& reply) {
        if (!reply.ok)
            return fail(reply);
        setPreset();
    });
}

void FirstRunWizard::setPreset()
{
    QAbstractButton* chosen = m_presets->checkedButton();
    if (!chosen)
        return join();
    control::Value preset = control::Value::map();
    preset.set("key", control::setting::kPreset.name);
    preset.set("value", chosen->property("preset").toString().toStdString());
    m_link.request(qname(control::request::kSettingsSet), preset, this, [this](const DaemonReply& reply) {
        // A daemon without presets says unknown_setting.
        if (!reply.ok && reply.code != qname(control::errc::kUnknownSetting))
            return fail(reply);
        join();
    });
}

void FirstRunWizard::join()
{
    const QModelIndexList chosen = projectList()->selectionModel()->selectedRows();
    if (m_projectPage->notNowBox()->isChecked() || chosen.isEmpty()) {
        m_busy = false;
        QWizard::accept();
        return;
    }
    const QString project = chosen.first().data(CatalogModel::kProjectRole).toString();
    control::Value body = control::Value::map();
    body.set("hub", chosen.first().data(CatalogModel::kHubRole).toString().toStdString());
    body.set("project", project.toStdString());
    m_progress->setText(tr("Joining %1\u2026").arg(project));
    m_link.request(
        qname(control::request::kJoin), body, this,
        [this](const DaemonReply& reply) {
            if (!reply.ok)
                return fail(reply);
            m_busy = false;
            QWizard::accept();
        },
        30000);
}

} // namespace crowdtrain::ui
