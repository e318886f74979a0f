#pragma once

// The joined project's checkpoints: the table (CheckpointModel, progress
// bars by ProgressDelegate) with download, pause, resume, cancel, delete
// and open; the selected checkpoint's samples; "Try it", which streams
// generated text (`generate`, then `generated` events). GUI thread only.

#include "ui/page.h"

#include <vector>

class QDoubleSpinBox;
class QLineEdit;
class QPlainTextEdit;
class QPushButton;
class QSpinBox;
class QTableView;
class QTextBrowser;

namespace crowdtrain::ui {

class CheckpointModel;

class CheckpointsPage : public Page {
    Q_OBJECT

public:
    enum Button { kDownload, kPause, kResume, kCancel, kDelete, kOpen, kButtons };

    explicit CheckpointsPage(Link& link, QWidget* parent = nullptr);
    void onEvent(const QString& type, const control::Value& body) override;
    CheckpointModel* model() const { return m_model; }
    QTableView* table() const { return m_table; }
    QPlainTextEdit* output() const { return m_output; }
    QTextBrowser* samples() const { return m_samples; }
    QPushButton* button(Button which) const { return m_buttons[which]; }
    QPushButton* generateButton() const { return m_generate; }
    QLineEdit* prompt() const { return m_prompt; }
    void generate();
    // From Generate until the last piece of its text came.
    bool generating() const { return m_generating; }
    uint64_t selectedRound() const;
    void selectRound(uint64_t round);

protected:
    void load() override;

private:
    QWidget* buildTable(QWidget* parent);
    QWidget* buildTryIt(QWidget* parent);
    void showList(const control::Value& list);
    void showProgress(const control::Value& event);
    void onGenerated(const control::Value& piece);
    void act(const QString& request);
    void showSelection();
    void showSamples(const control::Value* chosen);

    CheckpointModel* m_model;
    QTableView* m_table;
    QTextBrowser* m_samples;
    QPushButton* m_buttons[kButtons];
    QLineEdit* m_prompt;
    QDoubleSpinBox* m_temperature;
    QSpinBox* m_length;
    QPushButton* m_generate;
    QPlainTextEdit* m_output;
    uint64_t m_generation = 0;
    bool m_generating = false; // from Generate until the last piece
    bool m_awaitingId = false; // the generate request awaits its reply
    std::vector<control::Value> m_early; // generated events that came before it
};

} // namespace crowdtrain::ui
