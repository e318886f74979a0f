#pragma once

// The joined project's checkpoints as a table, newest first: round, tokens,
// validation loss, size, date, state (a progress bar while downloading,
// through ProgressDelegate). Fed by the `checkpoints` reply (setList: rows
// are matched by round, so a reload inserts, removes and changes only the
// rows that differ) and by `download` events (applyProgress: one row in
// place). GUI thread only.

#include "net/control/control_names.h"
#include "net/control/value.h"

#include <QAbstractTableModel>

#include <optional>
#include <vector>

namespace crowdtrain::ui {

class CheckpointModel : public QAbstractTableModel {
    Q_OBJECT

public:
    enum Column { kRound, kTokens, kValLoss, kSize, kDate, kState, kColumns };
    // The row's round (qulonglong) and its state ("ready", "downloading", ...).
    static constexpr int kRoundRole = Qt::UserRole + 1;
    static constexpr int kStateRole = Qt::UserRole + 2;
    enum class Progress { Updated, StateChanged, Unknown };

    using QAbstractTableModel::QAbstractTableModel;

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role) const override;

    // The reply's project and checkpoints (oldest first, as the daemon sends them).
    void setList(const control::Value& list);
    // A `download` event: its row changes in place. Unknown: not in the
    // list (or another project's), so the list should be asked for again.
    Progress applyProgress(const control::Value& event);

    // A checkpoint's state (nullopt: a word this app does not know).
    static std::optional<control::DownloadState> stateOf(const control::Value& checkpoint);

    const QString& project() const { return m_project; }
    // The checkpoint at `row`, or of `round` (nullptr when absent).
    const control::Value* at(int row) const;
    const control::Value* find(uint64_t round) const;
    int rowOf(uint64_t round) const;
    bool anyReady() const;

private:
    QString m_project;
    std::vector<control::Value> m_rows; // newest first
};

} // namespace crowdtrain::ui
