#include "ui/catalog_model.h"

#include "ui/format.h"
#include "ui/progress_delegate.h"

#include <QFont>

#include <algorithm>

namespace crowdtrain::ui {
namespace {

QString nameOf(const control::Value& project)
{
    return text(project["name"]);
}

QString modelText(const control::Value& project)
{
    const control::Value& m = project["model"];
    return CatalogModel::tr("%1 parameters · %2 layers × %3")
        .arg(formatCount(double(project["parameters"].toUInt())))
        .arg(m["n_layer"].toUInt())
        .arg(m["n_embd"].toUInt());
}

QString progressText(const control::Value& project)
{
    const double goal = double(project["token_goal"].toUInt());
    const double done = double(project["tokens_trained"].toUInt());
    return goal > 0 ? CatalogModel::tr("%1 of %2 tokens").arg(formatCount(done), formatCount(goal))
                    : CatalogModel::tr("%1 tokens").arg(formatCount(done));
}

int progressPermille(const control::Value& project)
{
    const double goal = double(project["token_goal"].toUInt());
    const double done = double(project["tokens_trained"].toUInt());
    return goal > 0 ? int(std::min(1.0, done / goal) * 1000) : 0;
}

} // namespace

CatalogModel::~CatalogModel() = default;

QModelIndex CatalogModel::index(int row, int column, const QModelIndex& parent) const
{
    if (row < 0 || column < 0 || column >= kColumns)
        return {};
    if (!parent.isValid())
        return row < int(m_hubs.size()) ? createIndex(row, column, nullptr) : QModelIndex();
    if (parent.internalPointer() || parent.row() >= int(m_hubs.size()))
        return {}; // projects have no children
    Hub* hub = m_hubs[std::size_t(parent.row())].get();
    return row < int(hub->projects.size()) ? createIndex(row, column, hub) : QModelIndex();
}

QModelIndex CatalogModel::parent(const QModelIndex& child) const
{
    // A project's index holds its hub (stable while the hub is listed).
    const auto* hub = static_cast<const Hub*>(child.internalPointer());
    if (!child.isValid() || !hub)
        return {};
    for (std::size_t i = 0; i < m_hubs.size(); ++i)
        if (m_hubs[i].get() == hub)
            return createIndex(int(i), 0, nullptr);
    return {};
}

int CatalogModel::rowCount(const QModelIndex& parent) const
{
    if (!parent.isValid())
        return int(m_hubs.size());
    if (parent.internalPointer() || parent.column() != 0 || parent.row() >= int(m_hubs.size()))
        return 0;
    return int(m_hubs[std::size_t(parent.row())]->projects.size());
}

int CatalogModel::columnCount(const QModelIndex&) const
{
    return kColumns;
}

QVariant CatalogModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return {};
    const QString names[] = {
        tr("Project"), tr("Model"), tr("Progress"), tr("Volunteers"), tr("Validation loss"), tr("Newest checkpoint")};
    return section >= 0 && section < kColumns ? names[section] : QVariant();
}

QVariant CatalogModel::data(const QModelIndex& index, int role) const
{
    if (!index.isValid())
        return {};
    if (const auto* hub = static_cast<const Hub*>(index.internalPointer())) {
        if (index.row() >= int(hub->projects.size()))
            return {};
        return projectData(*hub, hub->projects[std::size_t(index.row())], index.column(), role);
    }
    if (index.row() >= int(m_hubs.size()))
        return {};
    return hubData(*m_hubs[std::size_t(index.row())], index.column(), role);
}

QVariant CatalogModel::hubData(const Hub& hub, int column, int role) const
{
    if (role == kHubRole)
        return hub.link;
    if (role == kProjectRole)
        return QString();
    if (role == Qt::FontRole && column == kName) {
        QFont bold;
        bold.setBold(true);
        return bold;
    }
    if (role != Qt::DisplayRole || column != kName)
        return {};
    const bool demo = hub.link == qname(control::kDemoHub);
    QString label = demo ? tr("Local demo") : text(hub.value["label"]);
    if (!hub.value["reachable"].toBool() && !demo)
        label += tr(" — unreachable, last seen %1").arg(formatAgo(hub.value["last_seen_ms"].toUInt()));
    return label;
}

QVariant CatalogModel::projectData(const Hub& hub, const control::Value& p, int column, int role) const
{
    const QString name = nameOf(p);
    if (role == kHubRole)
        return hub.link;
    if (role == kProjectRole)
        return name;
    if (role == kProgressRole)
        return column == kProgress ? QVariant(progressPermille(p)) : QVariant();
    if (role == Qt::AccessibleTextRole && column == kProgress)
        return tr("Progress of %1").arg(name);
    if (role != Qt::DisplayRole)
        return {};
    switch (column) {
    case kName:
        return hub.link == m_joinedHub && name == m_joinedProject ? tr("%1 (joined)").arg(name) : name;
    case kModel:
        return modelText(p);
    case kProgress:
        return progressText(p);
    case kVolunteers:
        return QString::number(p["volunteers_online"].toUInt());
    case kValLoss:
        return formatLoss(p["val_loss"]);
    case kCheckpoint:
        return p["newest_checkpoint"].isNil() ? tr("none yet") : tr("round %1").arg(p["newest_checkpoint"].toUInt());
    default:
        return {};
    }
}

void CatalogModel::setCatalog(const control::Value& catalog)
{
    const std::vector<control::Value> hubs = catalog["hubs"].items();
    auto listed = [&hubs](const QString& link) {
        return std::any_of(hubs.begin(), hubs.end(), [&](const control::Value& h) { return text(h["link"]) == link; });
    };
    for (int row = int(m_hubs.size()) - 1; row >= 0; --row) {
        if (listed(m_hubs[std::size_t(row)]->link))
            continue;
        beginRemoveRows({}, row, row);
        m_hubs.erase(m_hubs.begin() + row);
        endRemoveRows();
    }
    for (std::size_t i = 0; i < hubs.size(); ++i)
        setHub(int(i), hubs[i]);
    markJoined(text(catalog["joined_hub"]), text(catalog["joined_project"]));
}

void CatalogModel::setHub(int row, const control::Value& value)
{
    const QString link = text(value["link"]);
    auto found = std::find_if(m_hubs.begin() + row, m_hubs.end(), [&](const auto& h) { return h->link == link; });
    if (found == m_hubs.end()) {
        beginInsertRows({}, row, row);
        auto hub = std::make_unique<Hub>();
        hub->link = link;
        m_hubs.insert(m_hubs.begin() + row, std::move(hub));
        endInsertRows();
    } else if (const int from = int(found - m_hubs.begin()); from != row) {
        // Listed in another order: moved, its projects along.
        beginMoveRows({}, from, from, {}, row);
        std::rotate(m_hubs.begin() + row, m_hubs.begin() + from, m_hubs.begin() + from + 1);
        endMoveRows();
    }
    Hub& hub = *m_hubs[std::size_t(row)];
    control::Value head = value;
    head.set("projects", control::Value::array());
    if (!(head == hub.value)) {
        hub.value = std::move(head);
        emit dataChanged(index(row, 0), index(row, kColumns - 1));
    }
    setProjects(hub, index(row, 0), value["projects"].items());
}

void CatalogModel::setProjects(Hub& hub, const QModelIndex& parent, std::vector<control::Value> wanted)
{
    auto& rows = hub.projects;
    for (int row = int(rows.size()) - 1; row >= 0; --row) {
        const QString name = nameOf(rows[std::size_t(row)]);
        if (std::any_of(wanted.begin(), wanted.end(), [&](const control::Value& p) { return nameOf(p) == name; }))
            continue;
        beginRemoveRows(parent, row, row);
        rows.erase(rows.begin() + row);
        endRemoveRows();
    }
    for (std::size_t i = 0; i < wanted.size(); ++i) {
        const int row = int(i);
        const QString name = nameOf(wanted[i]);
        auto found
            = std::find_if(rows.begin() + row, rows.end(), [&](const control::Value& p) { return nameOf(p) == name; });
        if (found == rows.end()) {
            beginInsertRows(parent, row, row);
            rows.insert(rows.begin() + row, std::move(wanted[i]));
            endInsertRows();
            continue;
        }
        if (const int from = int(found - rows.begin()); from != row) {
            beginMoveRows(parent, from, from, parent, row);
            std::rotate(rows.begin() + row, rows.begin() + from, rows.begin() + from + 1);
            endMoveRows();
        }
        if (rows[i] == wanted[i])
            continue;
        rows[i] = std::move(wanted[i]);
        emit dataChanged(index(row, 0, parent), index(row, kColumns - 1, parent));
    }
}

void CatalogModel::markJoined(const QString& hub, const QString& project)
{
    if (hub == m_joinedHub && project == m_joinedProject)
        return;
    const QModelIndex before = find(m_joinedHub, m_joinedProject);
    m_joinedHub = hub;
    m_joinedProject = project;
    for (const QModelIndex& changed : {before, find(hub, project)})
        if (changed.isValid())
            emit dataChanged(changed, changed.siblingAtColumn(kName));
}

const control::Value* CatalogModel::project(const QModelIndex& index) const
{
    const auto* hub = index.isValid() ? static_cast<const Hub*>(index.internalPointer()) : nullptr;
    if (!hub || index.row() >= int(hub->projects.size()))
        return nullptr;
    return &hub->projects[std::size_t(index.row())];
}

QModelIndex CatalogModel::find(const QString& link, const QString& name) const
{
    for (std::size_t h = 0; h < m_hubs.size(); ++h) {
        if (m_hubs[h]->link != link)
            continue;
        const auto& projects = m_hubs[h]->projects;
        for (std::size_t p = 0; p < projects.size(); ++p)
            if (nameOf(projects[p]) == name)
                return createIndex(int(p), 0, m_hubs[h].get());
    }
    return {};
}

} // namespace crowdtrain::ui
