#include "ui/checkpoints_page.h"

#include "ui/checkpoint_model.h"
#include "ui/format.h"
#include "ui/progress_delegate.h"

#include <QDesktopServices>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QSplitter>
#include <QTableView>
#include <QTextBrowser>
#include <QUrl>
#include <QVBoxLayout>

namespace crowdtrain::ui {

CheckpointsPage::CheckpointsPage(Link& link, QWidget* parent)
    : Page(link, parent)
    , m_model(new CheckpointModel(this))
{
    auto* layout = new QVBoxLayout(this);
    auto* split = new QSplitter(Qt::Vertical, this);
    split->addWidget(buildTable(split));
    auto* bottom = new QWidget(split);
    auto* bottomLayout = new QHBoxLayout(bottom);
    bottomLayout->setContentsMargins(0, 0, 0, 0);
    auto* samplesBox = new QGroupBox(tr("What the model wrote at this checkpoint"), bottom);
    auto* samplesLayout = new QVBoxLayout(samplesBox);
    m_samples = new QTextBrowser(samplesBox);
    m_samples->setAccessibleName(tr("The project's prompts and the checkpoint's continuations"));
    samplesLayout->addWidget(m_samples);
    bottomLayout->addWidget(samplesBox, 1);
    bottomLayout->addWidget(buildTryIt(bottom), 1);
    split->addWidget(bottom);
    split->setStretchFactor(0, 1);
    split->setStretchFactor(1, 1);
    layout->addWidget(split);

    connect(m_table->selectionModel(), &QItemSelectionModel::selectionChanged, this, &CheckpointsPage::showSelection);
    // A row whose state changes (a download ends) changes what the buttons allow.
    connect(m_model, &QAbstractItemModel::dataChanged, this, &CheckpointsPage::showSelection);
    const std::string_view requests[] = {control::request::kDownload, control::request::kDownloadPause,
        control::request::kDownloadResume, control::request::kDownloadCancel, control::request::kCheckpointDelete};
    for (int i = kDownload; i <= kDelete; ++i)
        connect(
            m_buttons[i], &QPushButton::clicked, this, [this, request = QString(qname(requests[i]))] { act(request); });
    connect(m_buttons[kOpen], &QPushButton::clicked, this, [this] {
        const control::Value* c = m_model->find(selectedRound());
        if (c && c->has("folder"))
            QDesktopServices::openUrl(QUrl::fromLocalFile(text((*c)["folder"])));
    });
    connect(m_generate, &QPushButton::clicked, this, &CheckpointsPage::generate);
    connect(m_prompt, &QLineEdit::returnPressed, this, &CheckpointsPage::generate);
    // A service that dies mid-generation sends no last piece.
    connect(&m_link, &Link::attachedChanged, this, [this](bool attached) {
        if (!attached && m_generating && !m_awaitingId) {
            m_generating = false;
            showSelection();
        }
    });
}

QWidget* CheckpointsPage::buildTable(QWidget* parent)
{
    auto* top = new QWidget(parent);
    auto* topLayout = new QVBoxLayout(top);
    topLayout->setContentsMargins(0, 0, 0, 0);
    m_table = new QTableView(top);
    m_table->setModel(m_model);
    m_table->setItemDelegate(new ProgressDelegate(m_table));
    m_table->setAccessibleName(tr("Checkpoints of the joined project"));
    m_table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    m_table->horizontalHeader()->setSectionResizeMode(CheckpointModel::kState, QHeaderView::Stretch);
    m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_table->setSelectionMode(QAbstractItemView::SingleSelection);
    m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_table->verticalHeader()->setVisible(false);
    topLayout->addWidget(m_table, 1);
    auto* buttons = new QHBoxLayout;
    const QString names[] = {tr("Download"), tr("Pause"), tr("Resume"), tr("Cancel"), tr("Delete"), tr("Open folder")};
    for (int i = 0; i < kButtons; ++i) {
        m_buttons[i] = new QPushButton(names[i], top);
        buttons->addWidget(m_buttons[i]);
    }
    buttons->addStretch(1);
    topLayout->addLayout(buttons);
    return top;
}

QWidget* CheckpointsPage::buildTryIt(QWidget* parent)
{
    auto* tryBox = new QGroupBox(tr("Try it"), parent);
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
    return tryBox;
}

uint64_t CheckpointsPage::selectedRound() const
{
    const auto rows = m_table->selectionModel()->selectedRows();
    if (rows.isEmpty())
        return 0;
    return rows.first().data(CheckpointModel::kRoundRole).toULongLong();
}

void CheckpointsPage::selectRound(uint64_t round)
{
    const int row = m_model->rowOf(round);
    if (row >= 0)
        m_table->selectRow(row);
}

void CheckpointsPage::load()
{
    fetch(
        qname(control::request::kCheckpoints), control::Value::map(),
        [this](const DaemonReply& reply) {
            if (reply.ok)
                showList(reply.body);
        },
        15000);
}

void CheckpointsPage::showList(const control::Value& list)
{
    // Rows are matched by round: the selection stays on its checkpoint.
    m_model->setList(list);
    if (selectedRound() == 0 && m_model->rowCount() > 0) {
        // The newest downloaded one, else the newest.
        int row = 0;
        for (int r = 0; r < m_model->rowCount(); ++r)
            if (CheckpointModel::stateOf(*m_model->at(r)) == control::DownloadState::Ready) {
                row = r;
                break;
            }
        m_table->selectRow(row);
    }
    showSelection();
}

void CheckpointsPage::showProgress(const control::Value& event)
{
    // One row changes in place; a new state (done, failed) changes what
    // the buttons allow, and the list is asked for again.
    switch (m_model->applyProgress(event)) {
    case CheckpointModel::Progress::Updated:
        break;
    case CheckpointModel::Progress::StateChanged:
    case CheckpointModel::Progress::Unknown:
        if (text(event["project"]) == m_model->project())
            reload();
        break;
    }
}

void CheckpointsPage::onEvent(const QString& type, const control::Value& body)
{
    if (type == qname(control::event::kGenerated)) {
        onGenerated(body);
    } else if (type == qname(control::event::kDownload)) {
        if (isVisible())
            showProgress(body);
    } else if (type == qname(control::event::kCheckpointPublished) || type == qname(control::event::kSamples)) {
        // Shown pages follow at once; a hidden one reloads when shown
        // (MainWindow::showPage), the tray says what was published.
        if (isVisible())
            reload();
    }
}

void CheckpointsPage::onGenerated(const control::Value& piece)
{
    if (m_awaitingId) {
        // The reply with the id is still on its way: keep the pieces.
        m_early.push_back(piece);
        return;
    }
    if (piece["id"].toUInt() != m_generation)
        return;
    m_output->moveCursor(QTextCursor::End);
    m_output->insertPlainText(text(piece["text"]));
    if (piece["done"].toBool()) {
        m_generating = false;
        showSelection();
        if (!text(piece["error"]).isEmpty())
            emit message(text(piece["error"]));
    }
}

void CheckpointsPage::showSelection()
{
    using control::DownloadState;
    const control::Value* chosen = m_model->find(selectedRound());
    const std::optional<DownloadState> state = chosen ? CheckpointModel::stateOf(*chosen) : std::nullopt;
    auto in = [&state](std::initializer_list<DownloadState> states) {
        return state && std::find(states.begin(), states.end(), *state) != states.end();
    };
    m_buttons[kDownload]->setEnabled(in({DownloadState::Remote, DownloadState::Failed}));
    m_buttons[kPause]->setEnabled(in({DownloadState::Downloading, DownloadState::Queued, DownloadState::Waiting}));
    m_buttons[kResume]->setEnabled(in({DownloadState::Paused}));
    m_buttons[kCancel]->setEnabled(in({DownloadState::Downloading, DownloadState::Paused, DownloadState::Waiting}));
    m_buttons[kDelete]->setEnabled(in({DownloadState::Ready}));
    m_buttons[kOpen]->setEnabled(in({DownloadState::Ready}));
    m_generate->setEnabled(in({DownloadState::Ready}) && !m_generating);
    m_output->setPlaceholderText(in({DownloadState::Ready})
            ? tr("Write the start of a text above and press Generate: this checkpoint continues it.")
            : m_model->anyReady() ? tr("Select a downloaded checkpoint to generate text from it.")
                                  : tr("Download a checkpoint, then generate text from it here."));
    showSamples(chosen);
}

void CheckpointsPage::showSamples(const control::Value* chosen)
{
    if (!chosen) {
        m_samples->setHtml(tr("<p>No checkpoint yet: the project publishes one every few rounds.</p>"));
        return;
    }
    const uint64_t round = (*chosen)["round"].toUInt();
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
    if (round == 0 && m_model->rowCount() == 0)
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
    if (m_generating)
        return;
    control::Value body = control::Value::map();
    body.set("round", selectedRound());
    body.set("prompt", m_prompt->text().toStdString());
    body.set("temperature", m_temperature->value());
    body.set("max_tokens", m_length->value());
    m_generating = true;
    m_awaitingId = true;
    m_early.clear();
    m_generate->setEnabled(false);
    m_output->setPlainText(m_prompt->text());
    send(qname(control::request::kGenerate), body, [this](const DaemonReply& reply) {
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
            onGenerated(piece);
    });
}

} // namespace crowdtrain::ui
