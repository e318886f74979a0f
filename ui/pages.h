#pragma once

// The main window's pages. Each page reads the daemon through the
// DaemonLink it is given, never waiting on it: reload() asks for what the
// page shows (on attaching and when it is opened) and the replies update
// the page when they come; reloads asked for while one is in flight are
// coalesced into one more. onEvent() applies the daemon's events.
// GUI thread only.

#include "net/control/value.h"
#include "ui/daemon_link.h"

#include <QWidget>

#include <map>
#include <vector>

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
    // Asks for the page's data; while a reload is in flight, one more is
    // sent after it (any number of calls meanwhile count as one).
    void reload();
    // Whether a reload's requests are in flight.
    bool loading() const { return m_loading > 0; }
    virtual void onEvent(const QString& type, const control::Value& body)
    {
        (void)type;
        (void)body;
    }

signals:
    // Plain words for the window's status bar.
    void message(const QString& text);
    // A reload's replies have all been applied.
    void loaded();

protected:
    // Sends the requests of one reload through fetch().
    virtual void load() { }
    // A request of the reload in progress; `done` runs on its reply.
    void fetch(const QString& type, const control::Value& body, DaemonLink::Handler done,
        int timeoutMs = DaemonLink::kDefaultTimeoutMs);
    // An action (pause, join, ...): `done` runs on its reply.
    void send(const QString& type, const control::Value& body, DaemonLink::Handler done,
        int timeoutMs = DaemonLink::kDefaultTimeoutMs);

    DaemonLink& m_link;

private:
    void fetched();

    int m_loading = 0;
    bool m_again = false;
};

class DashboardPage : public Page {
    Q_OBJECT

public:
    explicit DashboardPage(DaemonLink& link, QWidget* parent = nullptr);
    void onEvent(const QString& type, const control::Value& body) override;

    SeriesChart* lossChart() const { return m_loss; }
    SeriesChart* volunteersChart() const { return m_volunteers; }
    SeriesChart* machineChart() const { return m_machine; }
    QString stateText() const;

protected:
    void load() override;

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
    bool m_joined = false; // the last status named a project
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
    void onEvent(const QString& type, const control::Value& body) override;

protected:
    void load() override;

private:
    void showCatalog(const control::Value& catalog);
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
    void onEvent(const QString& type, const control::Value& body) override;
    QPlainTextEdit* output() const { return m_output; }
    QTableWidget* table() const { return m_table; }
    QPushButton* generateButton() const { return m_generate; }
    void generate();

protected:
    void load() override;

private:
    void showList(const control::Value& list);
    void showState(int row, const control::Value& checkpoint);
    void showProgress(const control::Value& event);
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
    QString m_project;
    std::vector<control::Value> m_items; // the checkpoints, oldest first
    uint64_t m_generation = 0;
    bool m_generating = false; // from Generate until the last piece
    bool m_awaitingId = false; // the generate request awaits its reply
    std::vector<control::Value> m_early; // generated events that came before it
};

class ContributionsPage : public Page {
    Q_OBJECT

public:
    explicit ContributionsPage(DaemonLink& link, QWidget* parent = nullptr);

protected:
    void load() override;

private:
    void showReply(const DaemonReply& reply);

    QLabel* m_summary;
    QString m_device; // where this machine trains ("cpu", "cuda:0"), for the hours' name
    QTableWidget* m_board;
};

class SettingsPage : public Page {
    Q_OBJECT

public:
    explicit SettingsPage(DaemonLink& link, QWidget* parent = nullptr);
    // Sends one setting; on refusal shows the daemon's message and reverts.
    void apply(const QString& key, const control::Value& value);
    QLabel* errorLabel() const { return m_error; }
    QWidget* editorFor(const QString& key) const;

signals:
    // The daemon's answer to apply().
    void applied(const QString& key, bool ok);

protected:
    void load() override;

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
    void onEvent(const QString& type, const control::Value& body) override;
    void append(const QString& line);

protected:
    void load() override;

private:
    QPlainTextEdit* m_text;
};

} // namespace crowdtrain::ui
