#include "ui/log_page.h"

#include "ui/format.h"

#include <QApplication>
#include <QClipboard>
#include <QFontDatabase>
#include <QHBoxLayout>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QVBoxLayout>

namespace crowdtrain::ui {

LogPage::LogPage(Link& link, QWidget* parent)
    : Page(link, parent)
{
    auto* layout = new QVBoxLayout(this);
    m_text = new QPlainTextEdit(this);
    m_text->setReadOnly(true);
    m_text->setMaximumBlockCount(1000);
    m_text->setAccessibleName(tr("The Crowdtrain service's log"));
    m_text->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
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
    fetch(qname(control::request::kLog), control::Value::map(), [this](const DaemonReply& reply) {
        if (!reply.ok)
            return;
        m_text->clear();
        for (const control::Value& line : reply.body["lines"].items())
            m_text->appendPlainText(ui::text(line));
    });
}

void LogPage::onEvent(const QString& type, const control::Value& body)
{
    if (type == qname(control::event::kLog))
        append(ui::text(body["line"]));
}

void LogPage::append(const QString& line)
{
    m_text->appendPlainText(line);
}

QString LogPage::text() const
{
    return m_text->toPlainText();
}

} // namespace crowdtrain::ui
