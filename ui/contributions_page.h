#pragma once

// This volunteer's contribution to the joined project (tokens, hours named
// for the device that did them, tasks, share and rank) and the project's
// leaderboard (LeaderboardModel). GUI thread only.

#include "ui/page.h"

class QLabel;
class QTableView;

namespace crowdtrain::ui {

class LeaderboardModel;

class ContributionsPage : public Page {
    Q_OBJECT

public:
    explicit ContributionsPage(Link& link, QWidget* parent = nullptr);
    LeaderboardModel* model() const { return m_model; }
    QLabel* summary() const { return m_summary; }

protected:
    void load() override;

private:
    void showReply(const DaemonReply& reply);

    LeaderboardModel* m_model;
    QLabel* m_summary;
    QString m_device; // where this machine trains ("cpu", "cuda:0"), for the hours' name
    QTableView* m_board;
};

} // namespace crowdtrain::ui
