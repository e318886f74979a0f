#pragma once

// What this machine does now: the state in words with pause and snooze,
// six tiles (loss, speed, busy share, round, tasks, device) and three
// charts (the project's loss, volunteers online, this machine's speed and
// busy share, GPU temperature where NVML reads it). Fed by `status`,
// `metrics` and `machine_history` replies and by `progress`, `state` and
// `metrics` events; charts redraw at most once a second, and not while
// nobody looks. GUI thread only.

#include "ui/page.h"

class QLabel;
class QPushButton;
class QTimer;

namespace crowdtrain::ui {

class SeriesChart;

class DashboardPage : public Page {
    Q_OBJECT

public:
    enum Tile { kLoss, kSpeed, kBusy, kRound, kWork, kDevice, kTiles };

    explicit DashboardPage(Link& link, QWidget* parent = nullptr);
    void onEvent(const QString& type, const control::Value& body) override;

    SeriesChart* lossChart() const { return m_loss; }
    SeriesChart* volunteersChart() const { return m_volunteers; }
    SeriesChart* machineChart() const { return m_machine; }
    QString stateText() const;
    QString detailText() const;
    QString tileText(Tile tile) const;
    // A tile's tooltip: the device tile's is the memory planner's choice
    // and why (status' memory_plan), "" when the daemon reports none.
    QString tileToolTip(Tile tile) const;
    // The advice shown when the machine's GPU lacks its core ("" when hidden).
    QString coreAdvice() const;
    QPushButton* pauseButton() const { return m_pause; }

protected:
    void load() override;

private:
    void buildCharts();
    void showStatus(const control::Value& status);
    void showTiles(const control::Value& status);
    void addMetricRows(const control::Value& rows);
    void addMachineRows(const control::Value& rows);
    void addTemperature(double t, const control::Value& celsius);
    void flush();

    QLabel* m_state;
    QLabel* m_coreAdvice = nullptr;
    QLabel* m_detail;
    QLabel* m_tiles[kTiles];
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

} // namespace crowdtrain::ui
