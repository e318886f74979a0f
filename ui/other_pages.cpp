// The contributions and log pages (the settings page: settings_page.cpp).
#include "ui/daemon_link.h"
#include "ui/format.h"
#include "ui/pages.h"

#include <QApplication>
#include <QClipboard>
#include <QCoreApplication>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QTableWidget>
#include <QVBoxLayout>

namespace crowdtrain::ui {

// ---- Contributions

ContributionsPage::ContributionsPage(DaemonLink& link, QWidget* parent)
    : Page(link, parent)
{
    auto* layout = new QVBoxLayout(this);
    m_summary = new QLabel(tr("Join a project to see your contribution."), this);
    m_summary->setWordWrap(true);
    m_summary->setTextFormat(Qt::RichText);
    m_summary->setAccessibleName(tr("Your contribution"));
    layout->addWidget(m_summary);
    m_board = new QTableWidget(0, 6, this);
    m_board->setAccessibleName(tr("Leaderboard"));
    m_board->setHorizontalHeaderLabels(
        {tr("Rank"), tr("Volunteer"), tr("Tokens"), tr("Compute-hours"), tr("Accepted"), tr("Rejected")});
    // Others may train on a GPU or a CPU: the hub does not say which.
    m_board->horizontalHeaderItem(3)->setToolTip(tr("Hours of training on the volunteer's GPU or CPU"));
    m_board->horizontalHeader()->setSectionResizeMode(1, QHeaderView::Stretch);
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
    fetch(QStringLiteral("status"), control::Value::map(), [this](const DaemonReply& status) {
        if (status.ok)
            m_device = text(status.body.has("device_in_use") ? status.body["device_in_use"] : status.body["device"]);
        fetch(
            QStringLiteral("contributions"), control::Value::map(),
            [this](const DaemonReply& reply) { showReply(reply); }, 15000);
    });
}

void ContributionsPage::showReply(const DaemonReply& reply)
{
    if (!reply.ok) {
        m_summary->setText(reply.code == QLatin1String("not_joined") ? tr("Join a project to see your contribution.")
                                                                     : reply.message.toHtmlEscaped());
        m_board->setRowCount(0);
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
    const auto& board = b["leaderboard"].items();
    m_board->setRowCount(int(board.size()));
    const std::string me = mine["public_key"].toString();
    for (std::size_t i = 0; i < board.size(); ++i) {
        const control::Value& c = board[i];
        QString name = volunteerName(text(c["display_name"]), text(c["public_key"]));
        if (c["public_key"].toString() == me)
            name += tr(" (you)");
        const QString cells[] = {QString::number(i + 1), name, formatCount(double(c["tokens"].toUInt())),
            formatHours(c["gpu_hours"].toDouble()), QString::number(c["rounds_accepted"].toUInt()),
            QString::number(c["rounds_rejected"].toUInt())};
        for (int col = 0; col < 6; ++col)
            m_board->setItem(int(i), col, new QTableWidgetItem(cells[col]));
    }
    m_board->resizeColumnsToContents();
    m_board->horizontalHeader()->setSectionResizeMode(1, QHeaderView::Stretch);
}

// ---- Log

LogPage::LogPage(DaemonLink& link, QWidget* parent)
    : Page(link, parent)
{
    auto* layout = new QVBoxLayout(this);
    m_text = new QPlainTextEdit(this);
    m_text->setReadOnly(true);
    m_text->setMaximumBlockCount(1000);
    m_text->setAccessibleName(tr("The Crowdtrain service's log"));
    QFont mono = QFontDatabase::systemFont(QFontDatabase::FixedFont);
    m_text->setFont(mono);
    layout->addWidget(m_text, 1);
    auto* copy = new QPushButton(tr("Copy all"), this);
    connect(copy, &QPushButton::clicked, this, [this] { QApplication::clipboard()->setText(m_text->toPlainText()); });
    auto* row = new QHBoxLayout;
    row->addStretch(1);
    row->addWidget(copy);
    layout->addLayout(row);
}

void LogPage::load()
{
    fetch(QStringLiteral("log"), control::Value::map(), [this](const DaemonReply& reply) {
        if (!reply.ok)
            return;
        m_text->clear();
        for (const control::Value& line : reply.body["lines"].items())
            m_text->appendPlainText(text(line));
    });
}

void LogPage::onEvent(const QString& type, const control::Value& body)
{
    if (type == QLatin1String("log"))
        append(text(body["line"]));
}

void LogPage::append(const QString& line)
{
    m_text->appendPlainText(line);
}

} // namespace crowdtrain::ui
