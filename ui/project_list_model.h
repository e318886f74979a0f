#pragma once

// The projects of a CatalogModel as one list, hub after hub (hub rows are
// not listed): the first-run wizard's choice. A proxy that keeps nothing of
// its own: the catalog's inserts, removals, moves and changes come out as
// the same on the list's rows, so a refresh keeps the selection. A row
// shows the project's name ("Local demo: " before the demo's) and its
// description on a second line; CatalogModel's hub and project roles pass
// through. GUI thread only.

#include <QAbstractProxyModel>

namespace crowdtrain::ui {

class CatalogModel;

class ProjectListModel : public QAbstractProxyModel {
    Q_OBJECT

public:
    explicit ProjectListModel(CatalogModel* catalog, QObject* parent = nullptr);

    QModelIndex index(int row, int column, const QModelIndex& parent = {}) const override;
    QModelIndex parent(const QModelIndex& child) const override;
    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role) const override;
    QModelIndex mapToSource(const QModelIndex& proxyIndex) const override;
    QModelIndex mapFromSource(const QModelIndex& sourceIndex) const override;

    // The first row of the hub `link` (invalid when it lists none).
    QModelIndex firstOfHub(const QString& link) const;

private:
    // The list's row of hub `hub`'s first project (past the last hub: the row count).
    int firstRowOf(int hub) const;
    // The source as a catalog (nullptr once it is gone).
    const CatalogModel* catalog() const;
    void aboutToInsert(const QModelIndex& parent, int first, int last);
    void inserted(const QModelIndex& parent, int first, int last);
    void aboutToRemove(const QModelIndex& parent, int first, int last);
    void aboutToMove(const QModelIndex& from, int first, int last, const QModelIndex& to, int row);
    void changed(const QModelIndex& topLeft, const QModelIndex& bottomRight);
    // Closes what the about-to signal began (nothing when its rows were none).
    void finish();

    enum class Pending { kNone, kInsert, kRemove, kMove } m_pending = Pending::kNone;
};

} // namespace crowdtrain::ui
