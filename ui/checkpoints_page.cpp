#include "ui/daemon_link.h"
#include "ui/format.h"
#include "ui/pages.h"

#include <QCoreApplication>
#include <QDesktopServices>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSpinBox>
#include <QSplitter>
#include <QTableWidget>
#include <QTextBrowser>
#include <QUrl>
#include <QVBoxLayout>

namespace crowdtrain::ui {
namespace {

enum Column { kRound, kTokens, kValLoss, kSize, kDate, kState, kColumns };
enum Button { kDownload, kPause, kResume, kCancel, kDelete, kOpen };

QString stateWords(const control::Value& c)
{
    const std::string state = c["state"].toString();
    if (state == "remote")
        return QCoreApplication::translate("CheckpointsPage", "on the hub");
    if (state == "ready")
        return QCoreApplication::translate("CheckpointsPage", "downloaded, verified");
    if (state == "downloading")
        return QCoreApplication::translate("CheckpointsPage", "downloading, %1/s")
            .arg(formatBytes(c["bytes_per_second"].toDouble()));
    if (state == "waiting")
        return QCoreApplication::translate("CheckpointsPage", "will retry: %1").arg(text(c["error"]));
    if (state == "failed")
        return QCoreApplication::translate("CheckpointsPage", "failed: %1").arg(text(c["error"]));
    return QString::fromStdString(state);
}

} // namespace

CheckpointsPage::CheckpointsPage(DaemonLink& link, QWidget* parent)
    : Page(link, parent)
{
    auto* layout = new QVBoxLayout(this);
    auto* split = new QSplitter(Qt::Vertical, this);

    auto* top = new QWidget(split);
    auto* topLayout = new QVBoxLayout(top);
    topLayout->setContentsMargins(0, 0, 0, 0);
    m_table = new QTableWidget(0, kColumns, top);
    m_table->setAccessibleName(tr("Checkpoints of the joined project"));
    m_table->setHorizontalHeaderLabels(
        {tr("Round"), tr("Tokens"), tr("Validation loss"), tr("Size"), tr("Published"), tr("State")});
    m_table->horizontalHeader()->setSectionResizeMode(kState, QHeaderView::Stretch);
    m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_table->setSelectionMode(QAbstractItemView::SingleSelection);
    m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_table->verticalHeader()->setVisible(false);
    topLayout->addWidget(m_table, 1);
    auto* buttons = new QHBoxLayout;
    const QString names[] = {tr("Download"), tr("Pause"), tr("Resume"), tr("Cancel"), tr("Delete"), tr("Open folder")};
    for (int i = 0; i < 6; ++i) {
        m_buttons[i] = new QPushButton(names[i], top);
        buttons->addWidget(m_buttons[i]);
    }
    buttons->addStretch(1);
    topLayout->addLayout(buttons);

    auto* bottom = new QWidget(split);
    auto* bottomLayout = new QHBoxLayout(bottom);
    bottomLayout->setContentsMargins(0, 0, 0, 0);
    auto* samplesBox = new QGroupBox(tr("What the model wrote at this checkpoint"), bottom);
    auto* samplesLayout = new QVBoxLayout(samplesBox);
    m_samples = new QTextBrowser(samplesBox);
    m_samples->setAccessibleName(tr("The project's prompts and the checkpoint's continuations"));
    samplesLayout->addWidget(m_samples);
    auto* tryBox = new QGroupBox(tr("Try it"), bottom);
    auto* tryLayout = new QVBoxLayout(tryBox);
    auto* form = new QFormLayout;
    m_prompt = new QLineEdit(tryBox);
    m_prompt->setText(tr("The "));
    m_prompt->setAccessibleName(tr("Prompt"));
    m_temperature = new QDoubleSpinBox(tryBox);
    m_temperature->setRange(0.0, 2.0);
    m_temperature->setSingleStep(0.1);
    m_temperature->setValue(0.8);
    m_temperature->setAccessibleName(tr("Temperature"));
    m_length = new QSpinBox(tryBox);
    m_length->setRange(1, 1000);
    m_length->setValue(120);
    m_length->setSuffix(tr(" tokens"));
    m_length->setAccessibleName(tr("Length"));
    form->addRow(tr("Prompt"), m_prompt);
    form->addRow(tr("Temperature"), m_temperature);
    form->addRow(tr("Length"), m_length);
    tryLayout->addLayout(form);
    m_generate = new QPushButton(tr("Generate"), tryBox);
    m_generate->setAccessibleName(tr("Generate text from the selected checkpoint"));
    tryLayout->addWidget(m_generate);
    m_output = new QPlainTextEdit(tryBox);
    m_output->setReadOnly(true);
    m_output->setAccessibleName(tr("Generated text"));
    m_output->setPlaceholderText(tr("Download a checkpoint, then generate text from it here."));
    tryLayout->addWidget(m_output, 1);
    bottomLayout->addWidget(samplesBox, 1);
    bottomLayout->addWidget(tryBox, 1);
    split->setStretchFactor(0, 1);
    split->setStretchFactor(1, 1);
    layout->addWidget(split);

    connect(m_table, &QTableWidget::itemSelectionChanged, this, &CheckpointsPage::showSelection);
    connect(m_buttons[kDownload], &QPushButton::clicked, this, [this] { act(QStringLiteral("download")); });
    connect(m_buttons[kPause], &QPushButton::clicked, this, [this] { act(QStringLiteral("download_pause")); });
    connect(m_buttons[kResume], &QPushButton::clicked, this, [this] { act(QStringLiteral("download_resume")); });
    connect(m_buttons[kCancel], &QPushButton::clicked, this, [this] { act(QStringLiteral("download_cancel")); });
    connect(m_buttons[kDelete], &QPushButton::clicked, this, [this] { act(QStringLiteral("checkpoint_delete")); });
    connect(m_buttons[kOpen], &QPushButton::clicked, this, [this] {
        for (const control::Value& c : m_items)
            if (c["round"].toUInt() == selectedRound() && c.has("folder"))
                QDesktopServices::openUrl(QUrl::fromLocalFile(text(c["folder"])));
    });
    connect(m_generate, &QPushButton::clicked, this, &CheckpointsPage::generate);
    // A service that dies mid-generation sends no last piece.
    connect(&m_link, &DaemonLink::attachedChanged, this, [this](bool attached) {
        if (!attached && m_generating && !m_awaitingId) {
            m_generating = false;
            showSelection();
        }
    });
    connect(m_prompt, &QLineEdit::returnPressed, this, &CheckpointsPage::generate);
}

uint64_t CheckpointsPage::selectedRound() const
{
    const auto rows = m_table->selectionModel()->selectedRows();
    if (rows.isEmpty())
        return 0;
    return m_table->item(rows.first().row(), kRound)->data(Qt::UserRole).toULongLong();
}

void CheckpointsPage::load()
{
    fetch(
        QStringLiteral("checkpoints"), control::Value::map(),
        [this](const DaemonReply& reply) {
            if (reply.ok)
                showList(reply.body);
        },
        15000);
}

void CheckpointsPage::showList(const control::Value& list)
{
    m_project = text(list["project"]);
    m_items = list["checkpoints"].items();
    const uint64_t selected = selectedRound();
    const auto& items = m_items;
    m_table->setRowCount(int(items.size()));
    int selectRow = -1;
    // Newest first.
    for (std::size_t i = 0; i < items.size(); ++i) {
        const control::Value& c = items[items.size() - 1 - i];
        const int row = int(i);
        auto* round = new QTableWidgetItem(QString::number(c["round"].toUInt()));
        round->setData(Qt::UserRole, QVariant::fromValue<qulonglong>(c["round"].toUInt()));
        m_table->setItem(row, kRound, round);
        m_table->setItem(row, kTokens, new QTableWidgetItem(formatCount(double(c["tokens"].toUInt()))));
        m_table->setItem(row, kValLoss, new QTableWidgetItem(formatLoss(c["val_loss"])));
        m_table->setItem(row, kSize, new QTableWidgetItem(formatBytes(double(c["bytes"].toUInt()))));
        m_table->setItem(row, kDate, new QTableWidgetItem(formatTime(c["created_ms"].toUInt())));
        showState(row, c);
        if (c["round"].toUInt() == selected)
            selectRow = row;
    }
    m_table->resizeColumnsToContents();
    m_table->horizontalHeader()->setSectionResizeMode(kState, QHeaderView::Stretch);
    if (selectRow < 0 && !items.empty()) {
        // The newest downloaded one, else the newest.
        selectRow = 0;
        for (std::size_t i = 0; i < items.size(); ++i)
            if (items[items.size() - 1 - i]["state"].toString() == "ready") {
                selectRow = int(i);
                break;
            }
    }
    if (selectRow >= 0)
        m_table->selectRow(selectRow);
    showSelection();
}

void CheckpointsPage::showState(int row, const control::Value& c)
{
    const std::string state = c["state"].toString();
    if (state == "downloading" || state == "paused" || state == "queued") {
        auto* bar = qobject_cast<QProgressBar*>(m_table->cellWidget(row, kState));
        if (!bar) {
            bar = new QProgressBar(m_table);
            bar->setRange(0, 1000);
            m_table->setItem(row, kState, new QTableWidgetItem);
            m_table->setCellWidget(row, kState, bar);
        }
        const double total = std::max(1.0, double(c["bytes"].toUInt()));
        bar->setValue(int(1000.0 * double(c["done_bytes"].toUInt()) / total));
        bar->setFormat(stateWords(c) + QStringLiteral(" %p%"));
    } else {
        m_table->removeCellWidget(row, kState);
        m_table->setItem(row, kState, new QTableWidgetItem(stateWords(c)));
    }
}

void CheckpointsPage::showProgress(const control::Value& event)
{
    // One row changes: its progress in place; a new state (done, failed)
    // changes what the buttons allow, and the list is asked for again.
    const uint64_t round = event["round"].toUInt();
    if (text(event["project"]) != m_project)
        return;
    control::Value* entry = nullptr;
    for (control::Value& c : m_items)
        if (c["round"].toUInt() == round)
            entry = &c;
    int row = -1;
    for (int r = 0; r < m_table->rowCount(); ++r)
        if (m_table->item(r, kRound) && m_table->item(r, kRound)->data(Qt::UserRole).toULongLong() == round)
            row = r;
    if (!entry || row < 0) {
        reload();
        return;
    }
    const bool stateChanged = (*entry)["state"].toString() != event["state"].toString();
    for (const char* key : {"state", "done_bytes", "bytes_per_second", "error"})
        if (event.has(key))
            entry->set(key, event[key]);
    showState(row, *entry);
    if (stateChanged) {
        showSelection();
        reload();
    }
}

void CheckpointsPage::onEvent(const QString& type, const control::Value& body)
{
    if (type == QLatin1String("generated")) {
        if (m_awaitingId) {
            // The reply with the id is still on its way: keep the pieces.
            m_early.push_back(body);
            return;
        }
        if (body["id"].toUInt() != m_generation)
            return;
        m_output->moveCursor(QTextCursor::End);
        m_output->insertPlainText(text(body["text"]));
        if (body["done"].toBool()) {
            m_generating = false;
            showSelection();
            if (!text(body["error"]).isEmpty())
                emit message(text(body["error"]));
        }
    } else if (type == QLatin1String("download")) {
        if (isVisible())
            showProgress(body);
    } else if (type == QLatin1String("checkpoint_published") || type == QLatin1String("samples")) {
        // Shown pages follow at once; a hidden one reloads when shown
        // (MainWindow::showPage), the tray says what was published.
        if (isVisible())
            reload();
    }
}

void CheckpointsPage::showSelection()
{
    const uint64_t round = selectedRound();
    const control::Value* chosen = nullptr;
    for (const control::Value& c : m_items)
        if (c["round"].toUInt() == round)
            chosen = &c;
    const std::string state = chosen ? (*chosen)["state"].toString() : std::string();
    m_buttons[kDownload]->setEnabled(chosen && (state == "remote" || state == "failed"));
    m_buttons[kPause]->setEnabled(state == "downloading" || state == "queued" || state == "waiting");
    m_buttons[kResume]->setEnabled(state == "paused");
    m_buttons[kCancel]->setEnabled(state == "downloading" || state == "paused" || state == "waiting");
    m_buttons[kDelete]->setEnabled(state == "ready");
    m_buttons[kOpen]->setEnabled(state == "ready");
    m_generate->setEnabled(state == "ready" && !m_generating);
    bool anyReady = false;
    for (const control::Value& c : m_items)
        anyReady = anyReady || c["state"].toString() == "ready";
    m_output->setPlaceholderText(state == "ready"
            ? tr("Write the start of a text above and press Generate: this checkpoint continues it.")
            : anyReady ? tr("Select a downloaded checkpoint to generate text from it.")
                       : tr("Download a checkpoint, then generate text from it here."));
    if (!chosen) {
        m_samples->setHtml(tr("<p>No checkpoint yet: the project publishes one every few rounds.</p>"));
        return;
    }
    const control::Value& samples = (*chosen)["samples"];
    if (samples.size() == 0) {
        m_samples->setHtml(tr("<p>This project shows no samples for round %1.</p>").arg(round));
        return;
    }
    QString html = tr("<p>Round %1, validation loss %2:</p>").arg(round).arg(formatLoss((*chosen)["val_loss"]));
    for (const control::Value& s : samples.items())
        html += QStringLiteral("<p><b>%1</b>%2</p>")
                    .arg(text(s["prompt"]).toHtmlEscaped(),
                        text(s["text"]).toHtmlEscaped().replace(QLatin1Char('\n'), QStringLiteral("<br>")));
    m_samples->setHtml(html);
}

void CheckpointsPage::act(const QString& request)
{
    const uint64_t round = selectedRound();
    if (round == 0 && m_table->rowCount() == 0)
        return;
    control::Value body = control::Value::map();
    body.set("round", round);
    send(request, body, [this](const DaemonReply& reply) {
        if (!reply.ok)
            emit message(reply.message);
        reload();
    });
}

void CheckpointsPage::generate()
{
    control::Value body = control::Value::map();
    body.set("round", selectedRound());
    body.set("prompt", m_prompt->text().toStdString());
    body.set("temperature", m_temperature->value());
    body.set("max_tokens", m_length->value());
    if (m_generating)
        return;
    m_generating = true;
    m_awaitingId = true;
    m_early.clear();
    m_generate->setEnabled(false);
    m_output->setPlainText(m_prompt->text());
    send(QStringLiteral("generate"), body, [this](const DaemonReply& reply) {
        m_awaitingId = false;
        if (!reply.ok) {
            m_generating = false;
            m_generate->setEnabled(true);
            emit message(reply.message);
            return;
        }
        m_generation = reply.body["id"].toUInt();
        std::vector<control::Value> early = std::move(m_early);
        m_early.clear();
        for (const control::Value& piece : early)
            onEvent(QStringLiteral("generated"), piece);
    });
}

} // namespace crowdtrain::ui
