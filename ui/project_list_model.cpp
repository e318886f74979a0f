#include "ui/project_list_model.h"

#include "ui/catalog_model.h"
#include "ui/format.h"

#include <utility>

namespace crowdtrain::ui {

ProjectListModel::ProjectListModel(CatalogModel* catalog, QObject* parent)
    : QAbstractProxyModel(parent)
{
    setSourceModel(catalog);
    connect(catalog, &QAbstractItemModel::rowsAboutToBeInserted, this, &ProjectListModel::aboutToInsert);
    connect(catalog, &QAbstractItemModel::rowsInserted, this, &ProjectListModel::inserted);
    connect(catalog, &QAbstractItemModel::rowsAboutToBeRemoved, this, &ProjectListModel::aboutToRemove);
    connect(catalog, &QAbstractItemModel::rowsRemoved, this, &ProjectListModel::finish);
    connect(catalog, &QAbstractItemModel::rowsAboutToBeMoved, this, &ProjectListModel::aboutToMove);
    connect(catalog, &QAbstractItemModel::rowsMoved, this, &ProjectListModel::finish);
    connect(catalog, &QAbstractItemModel::dataChanged, this, &ProjectListModel::changed);
    // CatalogModel neither resets nor lays out anew; were it to, the list starts over.
    connect(catalog, &QAbstractItemModel::modelAboutToBeReset, this, &ProjectListModel::beginResetModel);
    connect(catalog, &QAbstractItemModel::modelReset, this, &ProjectListModel::endResetModel);
    connect(catalog, &QAbstractItemModel::layoutAboutToBeChanged, this, &ProjectListModel::beginResetModel);
    connect(catalog, &QAbstractItemModel::layoutChanged, this, &ProjectListModel::endResetModel);
}

const CatalogModel* ProjectListModel::catalog() const
{
    return qobject_cast<const CatalogModel*>(sourceModel());
}

int ProjectListModel::firstRowOf(int hub) const
{
    int row = 0;
    for (int h = 0; h < hub; ++h)
        row += sourceModel()->rowCount(sourceModel()->index(h, 0));
    return row;
}

QModelIndex ProjectListModel::index(int row, int column, const QModelIndex& parent) const
{
    if (parent.isValid() || column != 0 || row < 0 || row >= rowCount())
        return {};
    return createIndex(row, column);
}

QModelIndex ProjectListModel::parent(const QModelIndex&) const
{
    return {};
}

int ProjectListModel::rowCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : firstRowOf(sourceModel()->rowCount());
}

int ProjectListModel::columnCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : 1;
}

QModelIndex ProjectListModel::mapToSource(const QModelIndex& proxyIndex) const
{
    if (!proxyIndex.isValid() || proxyIndex.model() != this)
        return {};
    int row = proxyIndex.row();
    for (int h = 0; h < sourceModel()->rowCount(); ++h) {
        const QModelIndex hub = sourceModel()->index(h, 0);
        const int projects = sourceModel()->rowCount(hub);
        if (row < projects)
            return sourceModel()->index(row, CatalogModel::kName, hub);
        row -= projects;
    }
    return {};
}

QModelIndex ProjectListModel::mapFromSource(const QModelIndex& sourceIndex) const
{
    // Projects' names only: hubs and the other columns are not listed.
    if (!sourceIndex.isValid() || !sourceIndex.parent().isValid() || sourceIndex.column() != CatalogModel::kName)
        return {};
    return index(firstRowOf(sourceIndex.parent().row()) + sourceIndex.row(), 0);
}

QVariant ProjectListModel::data(const QModelIndex& index, int role) const
{
    const QModelIndex source = mapToSource(index);
    const control::Value* project = catalog() ? catalog()->project(source) : nullptr;
    if (!project)
        return {};
    if (role == CatalogModel::kHubRole || role == CatalogModel::kProjectRole)
        return source.data(role);
    if (role != Qt::DisplayRole)
        return {};
    // The name, then what it trains on its own line.
    const bool demo = source.data(CatalogModel::kHubRole).toString() == qname(control::kDemoHub);
    return QString((demo ? tr("Local demo: ") : QString()) + text((*project)["name"]) + QLatin1Char('\n')
        + text((*project)["description"]));
}

QModelIndex ProjectListModel::firstOfHub(const QString& link) const
{
    for (int h = 0; h < sourceModel()->rowCount(); ++h) {
        const QModelIndex hub = sourceModel()->index(h, 0);
        if (hub.data(CatalogModel::kHubRole).toString() == link)
            return mapFromSource(sourceModel()->index(0, CatalogModel::kName, hub));
    }
    return {};
}

void ProjectListModel::aboutToInsert(const QModelIndex& parent, int first, int last)
{
    // A new hub comes empty; its projects follow as inserts of their own.
    if (!parent.isValid())
        return;
    const int at = firstRowOf(parent.row()) + first;
    beginInsertRows({}, at, at + last - first);
    m_pending = Pending::kInsert;
}

void ProjectListModel::inserted(const QModelIndex& parent, int first, int last)
{
    if (parent.isValid())
        return finish();
    // Hubs that came with projects already (not CatalogModel's way): those
    // rows are announced now, after the fact.
    const int at = firstRowOf(first);
    const int count = firstRowOf(last + 1) - at;
    if (count == 0)
        return;
    beginInsertRows({}, at, at + count - 1);
    endInsertRows();
}

void ProjectListModel::aboutToRemove(const QModelIndex& parent, int first, int last)
{
    // A hub goes with its projects.
    const int from = parent.isValid() ? firstRowOf(parent.row()) + first : firstRowOf(first);
    const int to = parent.isValid() ? firstRowOf(parent.row()) + last : firstRowOf(last + 1) - 1;
    if (to < from)
        return;
    beginRemoveRows({}, from, to);
    m_pending = Pending::kRemove;
}

void ProjectListModel::aboutToMove(const QModelIndex& from, int first, int last, const QModelIndex& to, int row)
{
    // A hub moves with its projects; moves past empty hubs only change nothing here.
    const int start = from.isValid() ? firstRowOf(from.row()) + first : firstRowOf(first);
    const int end = from.isValid() ? firstRowOf(from.row()) + last : firstRowOf(last + 1) - 1;
    const int dest = to.isValid() ? firstRowOf(to.row()) + row : firstRowOf(row);
    if (end < start || (dest >= start && dest <= end + 1))
        return;
    if (beginMoveRows({}, start, end, {}, dest))
        m_pending = Pending::kMove;
}

void ProjectListModel::finish()
{
    const Pending pending = std::exchange(m_pending, Pending::kNone);
    if (pending == Pending::kInsert)
        endInsertRows();
    else if (pending == Pending::kRemove)
        endRemoveRows();
    else if (pending == Pending::kMove)
        endMoveRows();
}

void ProjectListModel::changed(const QModelIndex& topLeft, const QModelIndex& bottomRight)
{
    // A hub's row shows nothing here (its link, the key, never changes).
    const QModelIndex hub = topLeft.parent();
    if (!hub.isValid())
        return;
    const int first = firstRowOf(hub.row());
    emit dataChanged(index(first + topLeft.row(), 0), index(first + bottomRight.row(), 0));
}

} // namespace crowdtrain::ui
