#pragma once

// The followed hubs and their projects as a tree: a hub per top-level row,
// its projects below (name, model, progress as a bar through
// ProgressDelegate, volunteers, validation loss, newest checkpoint). Fed by
// the `catalog` reply: hubs are matched by link and projects by name, so a
// refresh inserts, removes and changes only what differs (selection and
// expansion stay). GUI thread only.

#include "net/control/value.h"

#include <QAbstractItemModel>

#include <memory>
#include <vector>

namespace crowdtrain::ui {

class CatalogModel : public QAbstractItemModel {
    Q_OBJECT

public:
    enum Column { kName, kModel, kProgress, kVolunteers, kValLoss, kCheckpoint, kColumns };
    // Every row: its hub's link; project rows: the project's name ("" on hub rows).
    static constexpr int kHubRole = Qt::UserRole;
    static constexpr int kProjectRole = Qt::UserRole + 1;

    using QAbstractItemModel::QAbstractItemModel;
    ~CatalogModel() override;

    QModelIndex index(int row, int column, const QModelIndex& parent = {}) const override;
    QModelIndex parent(const QModelIndex& child) const override;
    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role) const override;

    void setCatalog(const control::Value& catalog);
    const QString& joinedHub() const { return m_joinedHub; }
    const QString& joinedProject() const { return m_joinedProject; }
    // The project at `index` (a project row), else nullptr.
    const control::Value* project(const QModelIndex& index) const;
    // The project row of hub `link` and project `name` (invalid when absent).
    QModelIndex find(const QString& link, const QString& name) const;

private:
    struct Hub {
        QString link;
        control::Value value; // the hub's entry, its projects included
        std::vector<control::Value> projects;
    };

    void setHub(int row, const control::Value& hub);
    void setProjects(Hub& hub, const QModelIndex& parent, std::vector<control::Value> wanted);
    QVariant hubData(const Hub& hub, int column, int role) const;
    QVariant projectData(const Hub& hub, const control::Value& project, int column, int role) const;
    void markJoined(const QString& hub, const QString& project);

    std::vector<std::unique_ptr<Hub>> m_hubs;
    QString m_joinedHub;
    QString m_joinedProject;
};

} // namespace crowdtrain::ui
