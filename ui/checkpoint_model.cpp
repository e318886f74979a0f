#include "ui/checkpoint_model.h"

#include "ui/format.h"
#include "ui/progress_delegate.h"

namespace crowdtrain::ui {
namespace {

uint64_t roundOf(const control::Value& c)
{
    return c["round"].toUInt();
}

using control::DownloadState;

QString stateWords(const control::Value& c)
{
    switch (CheckpointModel::stateOf(c).value_or(DownloadState::Queued)) {
    case DownloadState::Remote:
        return CheckpointModel::tr("on the hub");
    case DownloadState::Ready:
        if (c["seeding"].toBool())
            return CheckpointModel::tr(
                "downloaded, verified; sharing with %n peer(s), %1 sent", "", int(c["seed_peers"].toInt()))
                .arg(formatBytes(double(c["uploaded_bytes"].toUInt())));
        return CheckpointModel::tr("downloaded, verified");
    case DownloadState::Downloading:
        if (c.has("from_peers_bytes"))
            return CheckpointModel::tr(
                "downloading, %1/s from %n peer(s) (%2 from peers, %3 from the hub)", "", int(c["peers"].toInt()))
                .arg(formatBytes(c["bytes_per_second"].toDouble()))
                .arg(formatBytes(double(c["from_peers_bytes"].toUInt())))
                .arg(formatBytes(double(c["from_hub_bytes"].toUInt())));
        return CheckpointModel::tr("downloading, %1/s").arg(formatBytes(c["bytes_per_second"].toDouble()));
    case DownloadState::Waiting:
        return CheckpointModel::tr("will retry: %1").arg(text(c["error"]));
    case DownloadState::Failed:
        return CheckpointModel::tr("failed: %1").arg(text(c["error"]));
    case DownloadState::Queued:
    case DownloadState::Paused:
    case DownloadState::Cancelling:
    case DownloadState::Cancelled:
        break;
    }
    return text(c["state"]);
}

// Downloads in progress show a bar.
bool hasBar(const control::Value& c)
{
    const auto state = CheckpointModel::stateOf(c);
    return state == DownloadState::Downloading || state == DownloadState::Paused || state == DownloadState::Queued;
}

int permille(const control::Value& c)
{
    const double total = std::max(1.0, double(c["bytes"].toUInt()));
    return int(1000.0 * double(c["done_bytes"].toUInt()) / total);
}

} // namespace

std::optional<control::DownloadState> CheckpointModel::stateOf(const control::Value& checkpoint)
{
    return control::parseDownloadState(checkpoint["state"].toString());
}

int CheckpointModel::rowCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : int(m_rows.size());
}

int CheckpointModel::columnCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : kColumns;
}

QVariant CheckpointModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return {};
    switch (section) {
    case kRound:
        return tr("Round");
    case kTokens:
        return tr("Tokens");
    case kValLoss:
        return tr("Validation loss");
    case kSize:
        return tr("Size");
    case kDate:
        return tr("Published");
    case kState:
        return tr("State");
    default:
        return {};
    }
}

QVariant CheckpointModel::data(const QModelIndex& index, int role) const
{
    const control::Value* c = at(index.row());
    if (!c)
        return {};
    if (role == kRoundRole)
        return QVariant::fromValue<qulonglong>(roundOf(*c));
    if (role == kStateRole)
        return QString::fromStdString((*c)["state"].toString());
    if (role == kProgressRole)
        return index.column() == kState && hasBar(*c) ? QVariant(permille(*c)) : QVariant();
    if (role != Qt::DisplayRole)
        return {};
    switch (index.column()) {
    case kRound:
        return QString::number(roundOf(*c));
    case kTokens:
        return formatCount(double((*c)["tokens"].toUInt()));
    case kValLoss:
        return formatLoss((*c)["val_loss"]);
    case kSize:
        return formatBytes(double((*c)["bytes"].toUInt()));
    case kDate:
        return formatTime((*c)["created_ms"].toUInt());
    case kState:
        return hasBar(*c) ? stateWords(*c) + QStringLiteral(" %1%").arg(permille(*c) / 10) : stateWords(*c);
    default:
        return {};
    }
}

void CheckpointModel::setList(const control::Value& list)
{
    m_project = text(list["project"]);
    std::vector<control::Value> wanted = list["checkpoints"].items();
    std::reverse(wanted.begin(), wanted.end());
    std::stable_sort(wanted.begin(), wanted.end(),
        [](const control::Value& a, const control::Value& b) { return roundOf(a) > roundOf(b); });
    // Rows no longer listed go first; the rest is then an ordered
    // subsequence of `wanted`, so one pass inserts and updates in place.
    for (int row = int(m_rows.size()) - 1; row >= 0; --row) {
        const uint64_t round = roundOf(m_rows[std::size_t(row)]);
        const bool kept = std::any_of(
            wanted.begin(), wanted.end(), [round](const control::Value& c) { return roundOf(c) == round; });
        if (kept)
            continue;
        beginRemoveRows({}, row, row);
        m_rows.erase(m_rows.begin() + row);
        endRemoveRows();
    }
    for (std::size_t i = 0; i < wanted.size(); ++i) {
        const int row = int(i);
        if (i < m_rows.size() && roundOf(m_rows[i]) == roundOf(wanted[i])) {
            if (m_rows[i] == wanted[i])
                continue;
            m_rows[i] = std::move(wanted[i]);
            emit dataChanged(index(row, 0), index(row, kColumns - 1));
            continue;
        }
        beginInsertRows({}, row, row);
        m_rows.insert(m_rows.begin() + row, std::move(wanted[i]));
        endInsertRows();
    }
}

CheckpointModel::Progress CheckpointModel::applyProgress(const control::Value& event)
{
    if (text(event["project"]) != m_project)
        return Progress::Unknown;
    const int row = rowOf(event["round"].toUInt());
    if (row < 0)
        return Progress::Unknown;
    control::Value& entry = m_rows[std::size_t(row)];
    const bool stateChanged = entry["state"].toString() != event["state"].toString();
    for (const char* key :
        {"state", "done_bytes", "bytes_per_second", "error", "peers", "from_peers_bytes", "from_hub_bytes"})
        if (event.has(key))
            entry.set(key, event[key]);
    emit dataChanged(index(row, kState), index(row, kState));
    return stateChanged ? Progress::StateChanged : Progress::Updated;
}

const control::Value* CheckpointModel::at(int row) const
{
    return row >= 0 && row < int(m_rows.size()) ? &m_rows[std::size_t(row)] : nullptr;
}

const control::Value* CheckpointModel::find(uint64_t round) const
{
    return at(rowOf(round));
}

int CheckpointModel::rowOf(uint64_t round) const
{
    for (std::size_t i = 0; i < m_rows.size(); ++i)
        if (roundOf(m_rows[i]) == round)
            return int(i);
    return -1;
}

bool CheckpointModel::anyReady() const
{
    return std::any_of(
        m_rows.begin(), m_rows.end(), [](const control::Value& c) { return stateOf(c) == DownloadState::Ready; });
}

} // namespace crowdtrain::ui
