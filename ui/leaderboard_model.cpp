#include "ui/leaderboard_model.h"

#include "ui/format.h"

namespace crowdtrain::ui {

int LeaderboardModel::rowCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : int(m_rows.size());
}

int LeaderboardModel::columnCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : kColumns;
}

QVariant LeaderboardModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal)
        return {};
    // Others may train on a GPU or a CPU: the hub does not say which.
    if (role == Qt::ToolTipRole && section == kHours)
        return tr("Hours of training on the volunteer's GPU or CPU");
    if (role != Qt::DisplayRole)
        return {};
    const QString names[]
        = {tr("Rank"), tr("Volunteer"), tr("Tokens"), tr("Compute-hours"), tr("Accepted"), tr("Rejected")};
    return section >= 0 && section < kColumns ? names[section] : QVariant();
}

QVariant LeaderboardModel::data(const QModelIndex& index, int role) const
{
    if (role != Qt::DisplayRole || index.row() < 0 || index.row() >= int(m_rows.size()))
        return {};
    const control::Value& c = m_rows[std::size_t(index.row())];
    switch (index.column()) {
    case kRank:
        return QString::number(index.row() + 1);
    case kVolunteer: {
        QString name = volunteerName(text(c["display_name"]), text(c["public_key"]));
        if (c["public_key"].toString() == m_me)
            name += tr(" (you)");
        return name;
    }
    case kTokens:
        return formatCount(double(c["tokens"].toUInt()));
    case kHours:
        return formatHours(c["gpu_hours"].toDouble());
    case kAccepted:
        return QString::number(c["rounds_accepted"].toUInt());
    case kRejected:
        return QString::number(c["rounds_rejected"].toUInt());
    default:
        return {};
    }
}

void LeaderboardModel::setBoard(const control::Value& board, const std::string& me)
{
    const std::vector<control::Value>& wanted = board.items();
    const bool meChanged = me != m_me;
    m_me = me;
    const int common = int(std::min(wanted.size(), m_rows.size()));
    for (int row = 0; row < common; ++row) {
        if (!meChanged && m_rows[std::size_t(row)] == wanted[std::size_t(row)])
            continue;
        m_rows[std::size_t(row)] = wanted[std::size_t(row)];
        emit dataChanged(index(row, 0), index(row, kColumns - 1));
    }
    if (wanted.size() > m_rows.size()) {
        beginInsertRows({}, common, int(wanted.size()) - 1);
        m_rows.insert(m_rows.end(), wanted.begin() + common, wanted.end());
        endInsertRows();
    } else if (wanted.size() < m_rows.size()) {
        beginRemoveRows({}, common, int(m_rows.size()) - 1);
        m_rows.resize(wanted.size());
        endRemoveRows();
    }
}

void LeaderboardModel::clear()
{
    setBoard(control::Value::array(), m_me);
}

} // namespace crowdtrain::ui
