#pragma once

// The main window's pages. Each page reads the daemon through the
// DaemonLink it is given: reload() fetches what the page shows (on
// attaching and when it is opened), onEvent() applies the daemon's events.
// GUI thread only.

#include "net/control/value.h"

#include <QWidget>

class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QProgressBar;
class QPushButton;
class QTableWidget;
class QTreeWidget;
class QFormLayout;
class QDoubleSpinBox;
class QSpinBox;
class QTimer;
class QTextBrowser;

namespace crowdtrain::ui {

class DaemonLink;
class SeriesChart;
class ScheduleGrid;

class Page : public QWidget {
    Q_OBJECT

public:
    Page(DaemonLink& link, QWidget* parent)
        : QWidget(parent)
        , m_link(link)
    { }
    virtual void reload() { }
    virtual void onEvent(const QString& type, const control::Value& body)
    {
        (void)type;
        (void)body;
    }

signals:
    // Plain words for the window's status bar.
    void message(const QString& text);

protected:
    DaemonLink& m_link;
};

class DashboardPage : public Page {
    Q_OBJECT

public:
    explicit DashboardPage(DaemonLink& link, QWidget* parent = nullptr);
    void reload() override;
    void onEvent(const QString& type, const control::Value& body) override;

    SeriesChart* lossChart() const { return m_loss; }
    SeriesChart* volunteersChart() const { return m_volunteers; }
    SeriesChart* machineChart() const { return m_machine; }
    QString stateText() const;

private:
    void showStatus(const control::Value& status);
    void addMetricRows(const control::Value& rows);
    void addTemperature(double t, const control::Value& celsius);
    void flush();

    QLabel* m_state;
    QLabel* m_detail;
    QLabel* m_tiles[6];
    QPushButton* m_pause;
    QPushButton* m_snooze;
    SeriesChart* m_loss;
    SeriesChart* m_volunteers;
    SeriesChart* m_machine;
    QTimer* m_cadence;
    bool m_dirty = false;
    bool m_paused = false;
    QString m_project;
    uint64_t m_lastRound = 0;
    bool m_haveRows = false;
    uint64_t m_lastMachineMs = 0;
    int m_temperatureSeries = -1; // added with the first GPU temperature
};

class ProjectsPage : public Page {
    Q_OBJECT

public:
    explicit ProjectsPage(DaemonLink& link, QWidget* parent = nullptr);
    void reload() override;
    void onEvent(const QString& type, const control::Value& body) override;

private:
    void showDetail();
    void follow();
    void unfollow();
    void joinSelected();
    void leave();

    QLineEdit* m_hubLink;
    QTreeWidget* m_tree;
    QTextBrowser* m_detail;
    QPushButton* m_join;
    QPushButton* m_leave;
    QPushButton* m_unfollow;
    control::Value m_catalog;
    QString m_joinedHub;
    QString m_joinedProject;
};

class CheckpointsPage : public Page {
    Q_OBJECT

public:
    explicit CheckpointsPage(DaemonLink& link, QWidget* parent = nullptr);
    void reload() override;
    void onEvent(const QString& type, const control::Value& body) override;
    QPlainTextEdit* output() const { return m_output; }
    QTableWidget* table() const { return m_table; }
    void generate();

private:
    void act(const QString& request);
    void showSelection();
    uint64_t selectedRound() const;

    QTableWidget* m_table;
    QTextBrowser* m_samples;
    QPushButton* m_buttons[6];
    QLineEdit* m_prompt;
    QDoubleSpinBox* m_temperature;
    QSpinBox* m_length;
    QPushButton* m_generate;
    QPlainTextEdit* m_output;
    control::Value m_list;
    uint64_t m_generation = 0;
};

class ContributionsPage : public Page {
    Q_OBJECT

public:
    explicit ContributionsPage(DaemonLink& link, QWidget* parent = nullptr);
    void reload() override;

private:
    QLabel* m_summary;
    QTableWidget* m_board;
};

class SettingsPage : public Page {
    Q_OBJECT

public:
    explicit SettingsPage(DaemonLink& link, QWidget* parent = nullptr);
    void reload() override;
    // Sends one setting; on refusal shows the daemon's message and reverts.
    bool apply(const QString& key, const control::Value& value);
    QLabel* errorLabel() const { return m_error; }
    QWidget* editorFor(const QString& key) const;

private:
    void build(const control::Value& described);

    QFormLayout* m_form = nullptr;
    QWidget* m_formHost = nullptr;
    QLabel* m_error;
    std::map<QString, QWidget*> m_editors;
    QString m_gpuUnavailable; // why the GPU limits do nothing here ("" with NVML)
};

class LogPage : public Page {
    Q_OBJECT

public:
    explicit LogPage(DaemonLink& link, QWidget* parent = nullptr);
    void reload() override;
    void onEvent(const QString& type, const control::Value& body) override;
    void append(const QString& line);

private:
    QPlainTextEdit* m_text;
};

} // namespace crowdtrain::ui
