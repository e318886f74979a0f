#include "ui/dashboard_page.h"

#include "ui/format.h"
#include "ui/series_chart.h"

#include <algorithm>

#include <QDateTime>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QTimer>
#include <QVBoxLayout>

namespace crowdtrain::ui {
namespace {

// Chart colours that read on light and dark backgrounds.
const QColor kBlue(0x1f, 0x77, 0xb4);
const QColor kRed(0xd6, 0x27, 0x28);
const QColor kGreen(0x2c, 0xa0, 0x2c);
const QColor kOrange(0xff, 0x7f, 0x0e);

} // namespace

DashboardPage::DashboardPage(Link& link, QWidget* parent)
    : Page(link, parent)
{
    auto* layout = new QVBoxLayout(this);

    auto* head = new QHBoxLayout;
    auto* words = new QVBoxLayout;
    m_state = new QLabel(tr("Connecting to the Crowdtrain service..."), this);
    QFont big = m_state->font();
    big.setPointSizeF(big.pointSizeF() * 1.6);
    big.setBold(true);
    m_state->setFont(big);
    m_state->setAccessibleName(tr("Worker state"));
    m_detail = new QLabel(this);
    m_detail->setWordWrap(true);
    m_detail->setAccessibleName(tr("Worker details"));
    // What this machine's GPU needs installed (status' core_advice).
    m_coreAdvice = new QLabel(this);
    m_coreAdvice->setWordWrap(true);
    m_coreAdvice->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_coreAdvice->setAccessibleName(tr("GPU core advice"));
    m_coreAdvice->hide();
    words->addWidget(m_state);
    words->addWidget(m_detail);
    words->addWidget(m_coreAdvice);
    head->addLayout(words, 1);
    m_pause = new QPushButton(tr("Pause"), this);
    m_pause->setAccessibleName(tr("Pause or resume training"));
    m_snooze = new QPushButton(tr("Snooze 1 hour"), this);
    m_snooze->setAccessibleName(tr("Pause training for one hour"));
    head->addWidget(m_pause);
    head->addWidget(m_snooze);
    layout->addLayout(head);

    auto* tiles = new QGridLayout;
    const QString names[] = {tr("Train loss"), tr("Tokens per second"), tr("Busy share"), tr("Round"),
        tr("Tasks accepted / rejected"), tr("Device")};
    for (int i = 0; i < kTiles; ++i) {
        auto* caption = new QLabel(names[i], this);
        caption->setForegroundRole(QPalette::PlaceholderText);
        m_tiles[i] = new QLabel(QStringLiteral("—"), this);
        QFont f = m_tiles[i]->font();
        f.setPointSizeF(f.pointSizeF() * 1.3);
        m_tiles[i]->setFont(f);
        m_tiles[i]->setAccessibleName(names[i]);
        tiles->addWidget(caption, 0, i);
        tiles->addWidget(m_tiles[i], 1, i);
    }
    layout->addLayout(tiles);

    buildCharts();
    layout->addWidget(m_loss, 3);
    auto* lower = new QHBoxLayout;
    lower->addWidget(m_volunteers, 1);
    lower->addWidget(m_machine, 1);
    layout->addLayout(lower, 2);

    connect(m_pause, &QPushButton::clicked, this, [this] {
        m_pause->setEnabled(false);
        send(m_paused ? qname(control::request::kResume) : qname(control::request::kPause), control::Value::map(),
            [this](const DaemonReply& reply) {
                m_pause->setEnabled(true);
                if (!reply.ok)
                    emit message(reply.message);
                reload();
            });
    });
    connect(m_snooze, &QPushButton::clicked, this, [this] {
        control::Value body = control::Value::map();
        body.set("seconds", 3600);
        send(qname(control::request::kSnooze), body, [this](const DaemonReply& reply) {
            emit message(reply.ok ? tr("Training snoozed for one hour.") : reply.message);
            reload();
        });
    });
    // Charts are redrawn at most once a second, whatever the event rate.
    m_cadence = new QTimer(this);
    m_cadence->setInterval(1000);
    connect(m_cadence, &QTimer::timeout, this, &DashboardPage::flush);
    m_cadence->start();
}

void DashboardPage::buildCharts()
{
    m_loss = new SeriesChart(
        tr("Loss of the project's model"), SeriesChart::XAxis::Number, tr("Tokens trained"), tr("Loss"), this);
    m_loss->addSeries(tr("Train loss (volunteers)"), kBlue);
    m_loss->addSeries(tr("Validation loss"), kRed, false, true);
    m_volunteers
        = new SeriesChart(tr("Volunteers online"), SeriesChart::XAxis::Time, tr("Time"), tr("Volunteers"), this);
    m_volunteers->addSeries(tr("Volunteers"), kGreen);
    m_machine
        = new SeriesChart(tr("This machine"), SeriesChart::XAxis::Time, tr("Time"), tr("Tokens per second"), this);
    m_machine->addSeries(tr("Tokens per second"), kBlue);
    m_machine->addSeries(tr("Busy share (%)"), kOrange, true);
    m_machine->setRightAxisLabel(tr("Busy share (%)"), 0, 105);
    // Before the first point: fixed ranges that fit what comes (a small
    // model's loss, a few volunteers, a CPU's tokens per second) and why
    // the chart is empty.
    m_loss->setEmptyRange(0, 5, 0, 1e6);
    m_volunteers->setEmptyRange(0, 2);
    m_volunteers->setIntegerTicks(true);
    m_machine->setEmptyRange(0, 1000);
    for (SeriesChart* chart : {m_loss, m_volunteers, m_machine}) {
        chart->setEmptyText(tr("No points yet: connecting to the Crowdtrain service"));
        chart->refresh();
    }
}

QString DashboardPage::stateText() const
{
    return m_state->text();
}

QString DashboardPage::detailText() const
{
    return m_detail->text();
}

QString DashboardPage::tileText(Tile tile) const
{
    return m_tiles[tile]->text();
}

QString DashboardPage::tileToolTip(Tile tile) const
{
    return m_tiles[tile]->toolTip();
}

void DashboardPage::load()
{
    fetch(qname(control::request::kStatus), control::Value::map(), [this](const DaemonReply& reply) {
        if (reply.ok)
            showStatus(reply.body);
    });
    control::Value since = control::Value::map();
    since.set("since_round", m_haveRows ? m_lastRound + 1 : 0);
    fetch(qname(control::request::kMetrics), since, [this](const DaemonReply& reply) {
        if (!reply.ok)
            return;
        if (text(reply.body["project"]) != m_project) {
            m_project = text(reply.body["project"]);
            m_loss->clear();
            m_volunteers->clear();
            m_haveRows = false;
            m_lastRound = 0;
        }
        addMetricRows(reply.body["rows"]);
        m_dirty = true;
        flush();
    });
    fetch(qname(control::request::kMachineHistory), control::Value::map(), [this](const DaemonReply& reply) {
        // Without a project the history is idle zeros: the chart says "join" instead.
        if (!reply.ok || !m_joined)
            return;
        addMachineRows(reply.body["rows"]);
        m_dirty = true;
        flush();
    });
}

void DashboardPage::addMachineRows(const control::Value& rows)
{
    for (const control::Value& row : rows.items()) {
        const uint64_t t = row["time_ms"].toUInt();
        if (t <= m_lastMachineMs)
            continue;
        m_lastMachineMs = t;
        m_machine->append(0, double(t) / 1e3, row["tokens_per_second"].toDouble());
        m_machine->append(1, double(t) / 1e3, 100.0 * row["busy_share"].toDouble());
        addTemperature(double(t) / 1e3, row["gpu_temperature_c"]);
    }
}

void DashboardPage::addTemperature(double t, const control::Value& celsius)
{
    if (celsius.isNil())
        return;
    // Only machines with NVML have the series; it shares the right axis (0..105).
    if (m_temperatureSeries < 0) {
        m_temperatureSeries = m_machine->addSeries(tr("GPU temperature (\u00B0C)"), kRed, true);
        m_machine->setRightAxisLabel(tr("Busy share (%), GPU \u00B0C"), 0, 105);
    }
    m_machine->append(m_temperatureSeries, t, celsius.toDouble());
}

void DashboardPage::onEvent(const QString& type, const control::Value& body)
{
    if (type == qname(control::event::kProgress) || type == qname(control::event::kState)) {
        showStatus(body);
        const uint64_t t = uint64_t(QDateTime::currentMSecsSinceEpoch());
        // Nothing trains without a project: no points, the chart says why.
        if (type == qname(control::event::kProgress) && t > m_lastMachineMs && !text(body["project"]).isEmpty()) {
            m_lastMachineMs = t;
            m_machine->append(0, double(t) / 1e3, body["effective_tokens_per_second"].toDouble());
            m_machine->append(1, double(t) / 1e3, 100.0 * body["busy_share"].toDouble());
            addTemperature(double(t) / 1e3, body["limits"]["gpu"]["temperature_c"]);
            m_dirty = true;
        }
    } else if (type == qname(control::event::kMetrics)) {
        if (text(body["project"]) == m_project)
            addMetricRows(body["rows"]);
        else
            reload();
    }
}

void DashboardPage::addMetricRows(const control::Value& rows)
{
    for (const control::Value& row : rows.items()) {
        const uint64_t round = row["round"].toUInt();
        if (m_haveRows && round <= m_lastRound)
            continue;
        m_haveRows = true;
        m_lastRound = round;
        const double tokens = double(row["tokens"].toUInt());
        if (row["train_loss"].isNumber())
            m_loss->append(0, tokens, row["train_loss"].toDouble());
        if (row["val_loss"].isNumber())
            m_loss->append(1, tokens, row["val_loss"].toDouble());
        m_volunteers->append(0, double(row["time_ms"].toUInt()) / 1e3, double(row["volunteers"].toUInt()));
        m_dirty = true;
    }
}

void DashboardPage::flush()
{
    // Points are kept while nobody looks (another page, the window in the
    // tray or minimised); the charts redraw once they are seen again.
    if (!isVisible() || window()->isMinimized())
        return;
    if (!m_dirty) {
        // An empty time chart still shows the last minutes of the clock.
        for (SeriesChart* chart : {m_volunteers, m_machine})
            if (chart->isEmpty())
                chart->refresh();
        return;
    }
    m_dirty = false;
    m_loss->refresh();
    m_volunteers->refresh();
    m_machine->refresh();
    // A budget, not a fixed rate: redraws take at most 1% of a core, so a
    // long history (or a slow machine) redraws less often, never more
    // often than once a second.
    const double drawMs = m_loss->lastReplotMs() + m_volunteers->lastReplotMs() + m_machine->lastReplotMs();
    m_cadence->setInterval(std::clamp(int(drawMs * 100), 1000, 10000));
}

void DashboardPage::showStatus(const control::Value& status)
{
    const QString state = text(status["state"]);
    const auto daemonState = control::parseDaemonState(status["state"].toString());
    const QString reason = text(status["reason"]);
    const QString project = text(status["project"]);
    m_joined = !project.isEmpty();
    m_paused = status["paused"].toBool();
    m_pause->setText(m_paused ? tr("Resume") : tr("Pause"));
    QString headline = state.isEmpty() ? tr("Unknown") : state.left(1).toUpper() + state.mid(1);
    if (!reason.isEmpty())
        headline += QStringLiteral(" — ") + reason;
    m_state->setText(headline);
    QStringList detail;
    if (!project.isEmpty())
        detail << tr("Project %1").arg(project);
    if (status["steps"].toUInt() > 0 && daemonState == control::DaemonState::Training)
        detail << tr("step %1 of %2").arg(status["step"].toUInt()).arg(status["steps"].toUInt());
    if (!text(status["limit"]).isEmpty())
        detail << tr("limit: %1").arg(text(status["limit"]));
    if (!text(status["last_error"]).isEmpty() && daemonState == control::DaemonState::Offline)
        detail << text(status["last_error"]);
    if (project.isEmpty())
        detail << tr("Join a project on the Projects page to start.");
    m_detail->setText(detail.join(QStringLiteral(" · ")));
    const QString advice = text(status["core_advice"]);
    m_coreAdvice->setText(advice);
    m_coreAdvice->setVisible(!advice.isEmpty());
    showTiles(status);
    const QString empty
        = project.isEmpty() ? tr("No points yet: join a project") : tr("No points yet: waiting for the first round");
    m_loss->setEmptyText(empty);
    m_volunteers->setEmptyText(empty);
    m_machine->setEmptyText(
        project.isEmpty() ? tr("No points yet: join a project") : tr("No points yet: waiting for the first step"));
}

QString DashboardPage::coreAdvice() const
{
    return m_coreAdvice->isHidden() ? QString() : m_coreAdvice->text();
}

void DashboardPage::showTiles(const control::Value& status)
{
    m_tiles[kLoss]->setText(status["loss"].toDouble() > 0 ? formatLoss(status["loss"]) : QStringLiteral("—"));
    // The same figure as the machine chart's line (the governor's busy
    // share times the last step's rate), so tile and chart agree.
    m_tiles[kSpeed]->setText(formatCount(status["effective_tokens_per_second"].toDouble()));
    m_tiles[kBusy]->setText(QStringLiteral("%1%").arg(qRound(100.0 * status["busy_share"].toDouble())));
    m_tiles[kRound]->setText(status.has("round") ? QString::number(status["round"].toUInt()) : QStringLiteral("—"));
    m_tiles[kWork]->setText(
        QStringLiteral("%1 / %2").arg(status["accepted"].toUInt()).arg(status["rejected"].toUInt()));
    // Where it trains once known ("CPU", "CUDA:0"), else the setting.
    m_tiles[kDevice]->setText(trainingDeviceWords(
        text(status.has("device_in_use") ? status["device_in_use"] : status["device"]), text(status["parallel_mode"])));
    // How its memory is used, as `crowdtrain-worker status` says it.
    m_tiles[kDevice]->setToolTip(
        status.has("memory_plan") ? tr("Memory: %1").arg(text(status["memory_plan"])) : QString());
}

} // namespace crowdtrain::ui
