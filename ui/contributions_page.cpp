#include "ui/contributions_page.h"

#include "ui/format.h"
#include "ui/leaderboard_model.h"

#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLocale>
#include <QPushButton>
#include <QTableView>
#include <QVBoxLayout>

namespace crowdtrain::ui {

ContributionsPage::ContributionsPage(Link& link, QWidget* parent)
    : Page(link, parent)
    , m_model(new LeaderboardModel(this))
{
    auto* layout = new QVBoxLayout(this);
    m_summary = new QLabel(tr("Join a project to see your contribution."), this);
    m_summary->setWordWrap(true);
    m_summary->setTextFormat(Qt::RichText);
    m_summary->setAccessibleName(tr("Your contribution"));
    layout->addWidget(m_summary);
    m_board = new QTableView(this);
    m_board->setModel(m_model);
    m_board->setAccessibleName(tr("Leaderboard"));
    m_board->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    m_board->horizontalHeader()->setSectionResizeMode(LeaderboardModel::kVolunteer, QHeaderView::Stretch);
    m_board->verticalHeader()->setVisible(false);
    m_board->setEditTriggers(QAbstractItemView::NoEditTriggers);
    layout->addWidget(m_board, 1);
    auto* refresh = new QPushButton(tr("Refresh"), this);
    connect(refresh, &QPushButton::clicked, this, &ContributionsPage::reload);
    auto* row = new QHBoxLayout;
    row->addStretch(1);
    row->addWidget(refresh);
    layout->addLayout(row);
}

void ContributionsPage::load()
{
    // The device first: the hours are named for what did them.
    fetch(qname(control::request::kStatus), control::Value::map(), [this](const DaemonReply& status) {
        if (status.ok)
            m_device = text(status.body.has("device_in_use") ? status.body["device_in_use"] : status.body["device"]);
        fetch(
            qname(control::request::kContributions), control::Value::map(),
            [this](const DaemonReply& reply) { showReply(reply); }, 15000);
    });
}

void ContributionsPage::showReply(const DaemonReply& reply)
{
    if (!reply.ok) {
        m_summary->setText(reply.code == qname(control::errc::kNotJoined)
                ? tr("Join a project to see your contribution.")
                : reply.message.toHtmlEscaped());
        m_model->clear();
        return;
    }
    const control::Value& b = reply.body;
    const control::Value& mine = b["mine"];
    m_summary->setText(
        tr("<h3>Your contribution to %1</h3>"
           "<p><b>%2</b> tokens trained · <b>%3</b> %9 · <b>%4</b> tasks accepted, "
           "<b>%5</b> rejected</p><p>Your share of the project: <b>%6%</b> · rank <b>%7</b> of %8 "
           "volunteers</p>")
            .arg(text(b["project"]).toHtmlEscaped(), formatCount(double(mine["tokens"].toUInt())),
                formatHours(mine["gpu_hours"].toDouble()), QString::number(mine["rounds_accepted"].toUInt()),
                QString::number(mine["rounds_rejected"].toUInt()),
                QLocale().toString(100.0 * b["share"].toDouble(), 'f', 2), QString::number(b["rank"].toUInt()),
                QString::number(b["contributors"].toUInt()), computeHoursName(m_device).toHtmlEscaped()));
    m_model->setBoard(b["leaderboard"], mine["public_key"].toString());
}

} // namespace crowdtrain::ui
