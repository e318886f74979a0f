#include "ui/projects_page.h"

#include "ui/catalog_model.h"
#include "ui/format.h"
#include "ui/progress_delegate.h"

#include <QHBoxLayout>
#include <QHeaderView>
#include <QLineEdit>
#include <QPushButton>
#include <QSplitter>
#include <QTextBrowser>
#include <QTreeView>
#include <QVBoxLayout>

namespace crowdtrain::ui {
namespace {

QString detailHtml(const control::Value& p)
{
    const control::Value& m = p["model"];
    const QString access = text(p["checkpoint_access"]);
    const QString who = access == QLatin1String("participants") ? ProjectsPage::tr("volunteers who contributed")
        : access == QLatin1String("nobody")                     ? ProjectsPage::tr("nobody until the release")
                                                                : ProjectsPage::tr("everyone");
    return ProjectsPage::tr("<h3>%1</h3><p>%2</p>"
                            "<p><b>Model:</b> GPT-2 style, %3 parameters, %4 layers, %5 heads, width %6, "
                            "context %7 tokens, vocabulary %8.</p>"
                            "<p><b>Progress:</b> round %9, %10 tokens trained%11.</p>"
                            "<p><b>License:</b> %12. <b>Checkpoints may be downloaded by:</b> %13.</p>")
        .arg(text(p["name"]).toHtmlEscaped(), text(p["description"]).toHtmlEscaped(),
            formatCount(double(p["parameters"].toUInt())), QString::number(m["n_layer"].toUInt()),
            QString::number(m["n_head"].toUInt()), QString::number(m["n_embd"].toUInt()),
            QString::number(m["block_size"].toUInt()), QString::number(m["vocab_size"].toUInt()),
            QString::number(p["round"].toUInt()), formatCount(double(p["tokens_trained"].toUInt())),
            p["token_goal"].toUInt() > 0
                ? ProjectsPage::tr(" of a goal of %1").arg(formatCount(double(p["token_goal"].toUInt())))
                : QString(),
            text(p["license"]).isEmpty() ? ProjectsPage::tr("not stated") : text(p["license"]).toHtmlEscaped(), who);
}

} // namespace

ProjectsPage::ProjectsPage(Link& link, QWidget* parent)
    : Page(link, parent)
    , m_model(new CatalogModel(this))
{
    auto* layout = new QVBoxLayout(this);
    auto* add = new QHBoxLayout;
    m_hubLink = new QLineEdit(this);
    m_hubLink->setPlaceholderText(tr("Paste a hub link: crowdtrain://host:port/key"));
    m_hubLink->setAccessibleName(tr("Hub link"));
    auto* follow = new QPushButton(tr("Add hub"), this);
    m_unfollow = new QPushButton(tr("Remove hub"), this);
    auto* refresh = new QPushButton(tr("Refresh"), this);
    add->addWidget(m_hubLink, 1);
    add->addWidget(follow);
    add->addWidget(m_unfollow);
    add->addWidget(refresh);
    layout->addLayout(add);

    auto* split = new QSplitter(Qt::Vertical, this);
    buildTree(split);
    auto* lower = new QWidget(split);
    auto* lowerLayout = new QVBoxLayout(lower);
    lowerLayout->setContentsMargins(0, 0, 0, 0);
    m_detail = new QTextBrowser(lower);
    m_detail->setAccessibleName(tr("Project details"));
    m_detail->setOpenExternalLinks(false);
    auto* buttons = new QHBoxLayout;
    m_join = new QPushButton(tr("Join"), lower);
    m_join->setAccessibleName(tr("Join the selected project"));
    m_leave = new QPushButton(tr("Leave"), lower);
    buttons->addStretch(1);
    buttons->addWidget(m_join);
    buttons->addWidget(m_leave);
    lowerLayout->addWidget(m_detail, 1);
    lowerLayout->addLayout(buttons);
    split->setStretchFactor(0, 3);
    split->setStretchFactor(1, 2);
    layout->addWidget(split, 1);

    connect(follow, &QPushButton::clicked, this, &ProjectsPage::follow);
    connect(m_hubLink, &QLineEdit::returnPressed, this, &ProjectsPage::follow);
    connect(m_unfollow, &QPushButton::clicked, this, &ProjectsPage::unfollow);
    connect(refresh, &QPushButton::clicked, this, [this, refresh] { this->refresh(refresh); });
    connect(m_join, &QPushButton::clicked, this, &ProjectsPage::joinSelected);
    connect(m_leave, &QPushButton::clicked, this, &ProjectsPage::leave);
    showDetail();
}

void ProjectsPage::buildTree(QWidget* parent)
{
    m_tree = new QTreeView(parent);
    m_tree->setModel(m_model);
    m_tree->setItemDelegate(new ProgressDelegate(m_tree));
    m_tree->setAccessibleName(tr("Projects of the followed hubs"));
    m_tree->setRootIsDecorated(true);
    m_tree->setUniformRowHeights(true);
    m_tree->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_tree->header()->setSectionResizeMode(QHeaderView::ResizeToContents);
    m_tree->header()->setSectionResizeMode(CatalogModel::kModel, QHeaderView::Stretch);
    m_tree->header()->setMinimumSectionSize(60);
    // A hub's row is its name across the columns; new hubs open.
    connect(m_model, &QAbstractItemModel::rowsInserted, this, [this](const QModelIndex& parent, int first, int last) {
        if (parent.isValid())
            return;
        for (int row = first; row <= last; ++row) {
            m_tree->setFirstColumnSpanned(row, {}, true);
            m_tree->expand(m_model->index(row, 0));
        }
    });
    connect(m_tree->selectionModel(), &QItemSelectionModel::currentChanged, this, &ProjectsPage::showDetail);
    connect(m_model, &QAbstractItemModel::dataChanged, this, &ProjectsPage::showDetail);
}

void ProjectsPage::load()
{
    fetch(qname(control::request::kCatalog), control::Value::map(), [this](const DaemonReply& reply) {
        if (reply.ok)
            showCatalog(reply.body);
    });
}

void ProjectsPage::refresh(QPushButton* button)
{
    control::Value body = control::Value::map();
    body.set("refresh", true);
    button->setEnabled(false);
    emit message(tr("Asking the hubs for their projects..."));
    send(
        qname(control::request::kCatalog), body,
        [this, button](const DaemonReply& reply) {
            button->setEnabled(true);
            if (reply.ok)
                showCatalog(reply.body);
            else
                emit message(reply.message);
        },
        20000);
}

void ProjectsPage::showCatalog(const control::Value& catalog)
{
    // Rows are matched by hub and name: the current row stays where it was.
    m_model->setCatalog(catalog);
    if (!m_model->project(m_tree->currentIndex())) {
        QModelIndex select = m_model->find(m_model->joinedHub(), m_model->joinedProject());
        if (!select.isValid() && m_model->rowCount() > 0)
            select = m_model->index(0, 0, m_model->index(0, 0));
        if (select.isValid())
            m_tree->setCurrentIndex(select);
    }
    m_tree->header()->resizeSection(
        CatalogModel::kProgress, std::max(m_tree->header()->sectionSize(CatalogModel::kProgress), 200));
    showDetail();
}

void ProjectsPage::onEvent(const QString& type, const control::Value& body)
{
    (void)body;
    // The catalog is asked for again when the page is shown (MainWindow::showPage).
    if (type == qname(control::event::kState) && isVisible())
        reload();
}

void ProjectsPage::showDetail()
{
    const QModelIndex current = m_tree->currentIndex();
    const QString hub = current.data(CatalogModel::kHubRole).toString();
    const control::Value* project = m_model->project(current);
    const QString name = project ? text((*project)["name"]) : QString();
    m_unfollow->setEnabled(!hub.isEmpty() && hub != qname(control::kDemoHub));
    const bool joined = project && hub == m_model->joinedHub() && name == m_model->joinedProject();
    m_join->setEnabled(project && !joined);
    m_leave->setEnabled(!m_model->joinedProject().isEmpty());
    m_detail->setHtml(
        project ? detailHtml(*project) : tr("<p>Select a project to see what it trains and on what terms.</p>"));
}

void ProjectsPage::follow()
{
    const QString link = m_hubLink->text().trimmed();
    if (link.isEmpty())
        return;
    control::Value body = control::Value::map();
    body.set("link", link.toStdString());
    send(
        qname(control::request::kFollow), body,
        [this](const DaemonReply& reply) {
            if (!reply.ok) {
                emit message(reply.message);
                return;
            }
            m_hubLink->clear();
            emit message(tr("Added the hub %1.").arg(text(reply.body["link"])));
            reload();
        },
        15000);
}

void ProjectsPage::unfollow()
{
    const QString hub = m_tree->currentIndex().data(CatalogModel::kHubRole).toString();
    if (hub.isEmpty())
        return;
    control::Value body = control::Value::map();
    body.set("link", hub.toStdString());
    send(qname(control::request::kUnfollow), body, [this](const DaemonReply& reply) {
        emit message(reply.ok ? tr("Removed the hub.") : reply.message);
        reload();
    });
}

void ProjectsPage::joinSelected()
{
    const QModelIndex current = m_tree->currentIndex();
    const control::Value* project = m_model->project(current);
    if (!project)
        return;
    const QString name = text((*project)["name"]);
    control::Value body = control::Value::map();
    body.set("hub", current.data(CatalogModel::kHubRole).toString().toStdString());
    body.set("project", name.toStdString());
    m_join->setEnabled(false);
    emit message(tr("Joining %1...").arg(name));
    send(
        qname(control::request::kJoin), body,
        [this, name](const DaemonReply& reply) {
            emit message(reply.ok ? tr("Joined %1: training starts in a moment.").arg(name) : reply.message);
            reload();
        },
        30000);
}

void ProjectsPage::leave()
{
    m_leave->setEnabled(false);
    send(
        qname(control::request::kLeave), control::Value::map(),
        [this](const DaemonReply& reply) {
            emit message(reply.ok ? tr("Left the project; nothing trains until you join one.") : reply.message);
            reload();
        },
        15000);
}

} // namespace crowdtrain::ui
