#pragma once

// The service's recent log lines (`log` reply), then each `log` event as it
// comes; the last 1000 lines are kept. "Copy all" puts them on the
// clipboard. GUI thread only.

#include "ui/page.h"

class QPlainTextEdit;

namespace crowdtrain::ui {

class LogPage : public Page {
    Q_OBJECT

public:
    explicit LogPage(Link& link, QWidget* parent = nullptr);
    void onEvent(const QString& type, const control::Value& body) override;
    void append(const QString& line);
    QString text() const;

protected:
    void load() override;

private:
    QPlainTextEdit* m_text;
};

} // namespace crowdtrain::ui
