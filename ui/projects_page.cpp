#include "ui/daemon_link.h"
#include "ui/format.h"
#include "ui/pages.h"

#include <QCoreApplication>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSplitter>
#include <QTextBrowser>
#include <QTreeWidget>
#include <QVBoxLayout>

namespace crowdtrain::ui {
namespace {

enum Column { kName, kModel, kProgress, kVolunteers, kValLoss, kCheckpoint, kColumns };
constexpr int kHubRole = Qt::UserRole;
constexpr int kProjectRole = Qt::UserRole + 1;

QString modelText(const control::Value& project)
{
    const control::Value& m = project["model"];
    return QCoreApplication::translate("ProjectsPage", "%1 parameters · %2 layers × %3")
        .arg(formatCount(double(project["parameters"].toUInt())))
        .arg(m["n_layer"].toUInt())
        .arg(m["n_embd"].toUInt());
}

} // namespace

ProjectsPage::ProjectsPage(DaemonLink& link, QWidget* parent)
    : Page(link, parent)
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
    m_tree = new QTreeWidget(split);
    m_tree->setAccessibleName(tr("Projects of the followed hubs"));
    m_tree->setColumnCount(kColumns);
    m_tree->setHeaderLabels(
        {tr("Project"), tr("Model"), tr("Progress"), tr("Volunteers"), tr("Validation loss"), tr("Newest checkpoint")});
    m_tree->header()->setSectionResizeMode(kModel, QHeaderView::Stretch);
    m_tree->setRootIsDecorated(true);
    m_tree->setUniformRowHeights(true);
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
    connect(refresh, &QPushButton::clicked, this, [this, refresh] {
        control::Value body = control::Value::map();
        body.set("refresh", true);
        refresh->setEnabled(false);
        emit message(tr("Asking the hubs for their projects..."));
        send(
            QStringLiteral("catalog"), body,
            [this, refresh](const DaemonReply& reply) {
                refresh->setEnabled(true);
                if (reply.ok)
                    showCatalog(reply.body);
                else
                    emit message(reply.message);
            },
            20000);
    });
    connect(m_tree, &QTreeWidget::currentItemChanged, this, &ProjectsPage::showDetail);
    connect(m_join, &QPushButton::clicked, this, &ProjectsPage::joinSelected);
    connect(m_leave, &QPushButton::clicked, this, &ProjectsPage::leave);
}

void ProjectsPage::load()
{
    fetch(QStringLiteral("catalog"), control::Value::map(), [this](const DaemonReply& reply) {
        if (reply.ok)
            showCatalog(reply.body);
    });
}

void ProjectsPage::showCatalog(const control::Value& catalog)
{
    m_catalog = catalog;
    m_joinedHub = text(m_catalog["joined_hub"]);
    m_joinedProject = text(m_catalog["joined_project"]);
    const QString selectedHub = m_tree->currentItem() ? m_tree->currentItem()->data(0, kHubRole).toString() : QString();
    const QString selectedProject
        = m_tree->currentItem() ? m_tree->currentItem()->data(0, kProjectRole).toString() : QString();
    m_tree->clear();
    QTreeWidgetItem* select = nullptr;
    for (const control::Value& hub : m_catalog["hubs"].items()) {
        const QString link = text(hub["link"]);
        auto* hubItem = new QTreeWidgetItem(m_tree);
        QString label = link == QLatin1String("demo") ? tr("Local demo") : text(hub["label"]);
        if (!hub["reachable"].toBool() && link != QLatin1String("demo"))
            label += tr(" — unreachable, last seen %1").arg(formatAgo(hub["last_seen_ms"].toUInt()));
        hubItem->setText(kName, label);
        hubItem->setData(0, kHubRole, link);
        hubItem->setFirstColumnSpanned(true);
        QFont bold = hubItem->font(0);
        bold.setBold(true);
        hubItem->setFont(0, bold);
        for (const control::Value& project : hub["projects"].items()) {
            const QString name = text(project["name"]);
            auto* item = new QTreeWidgetItem(hubItem);
            const bool joined = link == m_joinedHub && name == m_joinedProject;
            item->setText(kName, joined ? tr("%1 (joined)").arg(name) : name);
            item->setData(0, kHubRole, link);
            item->setData(0, kProjectRole, name);
            item->setText(kModel, modelText(project));
            item->setText(kVolunteers, QString::number(project["volunteers_online"].toUInt()));
            item->setText(kValLoss, formatLoss(project["val_loss"]));
            item->setText(kCheckpoint,
                project["newest_checkpoint"].isNil() ? tr("none yet")
                                                     : tr("round %1").arg(project["newest_checkpoint"].toUInt()));
            auto* bar = new QProgressBar(m_tree);
            const double goal = double(project["token_goal"].toUInt());
            const double done = double(project["tokens_trained"].toUInt());
            bar->setRange(0, 1000);
            bar->setValue(goal > 0 ? int(std::min(1.0, done / goal) * 1000) : 0);
            bar->setFormat(goal > 0 ? tr("%1 of %2 tokens").arg(formatCount(done), formatCount(goal))
                                    : tr("%1 tokens").arg(formatCount(done)));
            bar->setAccessibleName(tr("Progress of %1").arg(name));
            m_tree->setItemWidget(item, kProgress, bar);
            if ((link == selectedHub && name == selectedProject) || (!select && joined))
                select = item;
        }
        hubItem->setExpanded(true);
    }
    for (int c = kName; c < kColumns; ++c)
        if (c != kModel)
            m_tree->resizeColumnToContents(c);
    m_tree->setColumnWidth(kProgress, std::max(m_tree->columnWidth(kProgress), 200));
    if (!select && m_tree->topLevelItemCount() > 0 && m_tree->topLevelItem(0)->childCount() > 0)
        select = m_tree->topLevelItem(0)->child(0);
    if (select)
        m_tree->setCurrentItem(select);
    showDetail();
}

void ProjectsPage::onEvent(const QString& type, const control::Value& body)
{
    (void)body;
    // The catalog is asked for again when the page is shown (MainWindow::showPage).
    if (type == QLatin1String("state") && isVisible())
        reload();
}

void ProjectsPage::showDetail()
{
    QTreeWidgetItem* item = m_tree->currentItem();
    const QString hub = item ? item->data(0, kHubRole).toString() : QString();
    const QString name = item ? item->data(0, kProjectRole).toString() : QString();
    m_unfollow->setEnabled(!hub.isEmpty() && hub != QLatin1String("demo"));
    const bool joined = !name.isEmpty() && hub == m_joinedHub && name == m_joinedProject;
    m_join->setEnabled(!name.isEmpty() && !joined);
    m_leave->setEnabled(!m_joinedProject.isEmpty());
    if (name.isEmpty()) {
        m_detail->setHtml(tr("<p>Select a project to see what it trains and on what terms.</p>"));
        return;
    }
    for (const control::Value& h : m_catalog["hubs"].items()) {
        if (text(h["link"]) != hub)
            continue;
        for (const control::Value& p : h["projects"].items()) {
            if (text(p["name"]) != name)
                continue;
            const control::Value& m = p["model"];
            const QString access = text(p["checkpoint_access"]);
            const QString who = access == QLatin1String("participants") ? tr("volunteers who contributed")
                : access == QLatin1String("nobody")                     ? tr("nobody until the release")
                                                                        : tr("everyone");
            m_detail->setHtml(
                tr("<h3>%1</h3><p>%2</p>"
                   "<p><b>Model:</b> GPT-2 style, %3 parameters, %4 layers, %5 heads, width %6, "
                   "context %7 tokens, vocabulary %8.</p>"
                   "<p><b>Progress:</b> round %9, %10 tokens trained%11.</p>"
                   "<p><b>License:</b> %12. <b>Checkpoints may be downloaded by:</b> %13.</p>")
                    .arg(name.toHtmlEscaped(), text(p["description"]).toHtmlEscaped(),
                        formatCount(double(p["parameters"].toUInt())), QString::number(m["n_layer"].toUInt()),
                        QString::number(m["n_head"].toUInt()), QString::number(m["n_embd"].toUInt()),
                        QString::number(m["block_size"].toUInt()), QString::number(m["vocab_size"].toUInt()),
                        QString::number(p["round"].toUInt()), formatCount(double(p["tokens_trained"].toUInt())),
                        p["token_goal"].toUInt() > 0
                            ? tr(" of a goal of %1").arg(formatCount(double(p["token_goal"].toUInt())))
                            : QString(),
                        text(p["license"]).isEmpty() ? tr("not stated") : text(p["license"]).toHtmlEscaped(), who));
            return;
        }
    }
}

void ProjectsPage::follow()
{
    const QString link = m_hubLink->text().trimmed();
    if (link.isEmpty())
        return;
    control::Value body = control::Value::map();
    body.set("link", link.toStdString());
    send(
        QStringLiteral("follow"), body,
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
    QTreeWidgetItem* item = m_tree->currentItem();
    if (!item)
        return;
    control::Value body = control::Value::map();
    body.set("link", item->data(0, kHubRole).toString().toStdString());
    send(QStringLiteral("unfollow"), body, [this](const DaemonReply& reply) {
        emit message(reply.ok ? tr("Removed the hub.") : reply.message);
        reload();
    });
}

void ProjectsPage::joinSelected()
{
    QTreeWidgetItem* item = m_tree->currentItem();
    if (!item || item->data(0, kProjectRole).toString().isEmpty())
        return;
    control::Value body = control::Value::map();
    body.set("hub", item->data(0, kHubRole).toString().toStdString());
    body.set("project", item->data(0, kProjectRole).toString().toStdString());
    const QString name = item->data(0, kProjectRole).toString();
    m_join->setEnabled(false);
    emit message(tr("Joining %1...").arg(name));
    send(
        QStringLiteral("join"), body,
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
        QStringLiteral("leave"), control::Value::map(),
        [this](const DaemonReply& reply) {
            emit message(reply.ok ? tr("Left the project; nothing trains until you join one.") : reply.message);
            reload();
        },
        15000);
}

} // namespace crowdtrain::ui
