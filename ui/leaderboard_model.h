#pragma once

// The joined project's leaderboard as a table: rank, volunteer (anonymous
// ones by a tag of their key; "(you)" on this machine's row), tokens,
// compute-hours, tasks accepted and rejected. Fed by the `contributions`
// reply; rows are ranks, so a refresh changes only the rows that differ and
// adds or drops rows at the end. GUI thread only.

#include "net/control/value.h"

#include <QAbstractTableModel>

#include <vector>

namespace crowdtrain::ui {

class LeaderboardModel : public QAbstractTableModel {
    Q_OBJECT

public:
    enum Column { kRank, kVolunteer, kTokens, kHours, kAccepted, kRejected, kColumns };

    using QAbstractTableModel::QAbstractTableModel;

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role) const override;

    // The reply's leaderboard, best first; `me`: this volunteer's public key.
    void setBoard(const control::Value& board, const std::string& me);
    void clear();

private:
    std::vector<control::Value> m_rows;
    std::string m_me;
};

} // namespace crowdtrain::ui
