#pragma once

// The open round's policy: what may be handed out to whom, when the round
// wraps up (and around whom), and when it is due to close.
//
// A round closes once its accepted tokens reach the target and no task is
// out. With round.wrap_up, a volunteer that delivered and finds no work
// left wraps the round up instead of waiting for the slowest: the holders
// hear of it at their next heartbeat and submit what they have; after a
// grace, the tasks of holders that sent nothing are taken back and the
// round closes around them (they get no other task in it). The grace is at
// least the time the volunteer that wrapped the round up took from its
// task's lease to its first upload chunk: a holder in the middle of an inner
// step as slow as a whole task of the fastest volunteer's is still heard.
// Tasks restored at a restart are spared that until their holders have had
// the longest reconnect backoff to come back (they cannot hear of a wrap-up
// before).
// A key whose
// submissions were rejected on their payload kMaxRejectionsPerKeyPerRound
// times gets no other task in the round while another key holds one or
// waits for one (asked, or heartbeated without a task, within the grace):
// a capped key asks again the moment it is refused, and when it took the
// round's last task before the waiting keys' next heartbeat every time, two
// such keys shut four honest ones out of a round for 9 minutes (the
// 60-round attack bench, session 29).
// Keys are free, so with the spec's trust defences new keys never take the
// established keys' work (docs/architecture.md "Trust and Sybils"): an
// established key does not count the new keys' open tasks as work handed
// out (it gets a task beside them), and a new key that delivered does not
// wrap the round up while an established key holds a task. Tasks held by
// keys that are then refused otherwise left the honest keys without work,
// and rounds closed short: at 4 hostile keys of 8 the honest ones trained
// 14% fewer tokens and the validation loss ended 1.85% above the clean run
// (the 60-round attack bench, session 29).
// The new keys' tasks beside them are cut by the wrap-up like any other.
// Tasks "ahead" (for the round after the open one) are leased while the
// open round closes.
//
// Used from the coordinator's loop thread only (as ProjectRuntime is).

#include "core/result.h"
#include "net/coordinator/data_plan.h"
#include "net/coordinator/project_spec.h"
#include "net/coordinator/round_state.h"
#include "net/coordinator/task_board.h"
#include "net/wire/events.h"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>

namespace crowdtrain::coordinator {

class RoundPolicy {
public:
    // `wrapUpGraceMs`: how long holders have at least to start uploading
    // after a wrap-up is announced.
    RoundPolicy(const ProjectSpec& spec, const RoundState& round, TaskBoard& tasks, const DataPlan& plan,
        int64_t wrapUpGraceMs);

    // The task `key` may train now (for the round after the open one when
    // `ahead`): the one it holds, a new lease, or nullptr (ask again later).
    Result<const OpenTask*> handOut(const std::string& key, bool ahead, int64_t nowMs);
    // Whether `key`, holding no task, would get one now.
    bool offersWork(const std::string& key) const;
    bool wrappingUp() const { return m_wrapUp.active; }
    // A submission of `key` was rejected on its payload.
    void payloadRejected(const std::string& key) { ++m_rejections[key]; }
    // `key` holds no task and waits for one (it heartbeated, or asked and
    // got none).
    void waitsForWork(const std::string& key, int64_t nowMs) { m_waiting[key] = nowMs; }
    // Which keys are new (no earned trust) while the trust defences are on.
    // Without it, every key counts alike.
    void setNewKeys(std::function<bool(const std::string&)> isNew) { m_isNew = std::move(isNew); }

    // Ends a task that was not accepted; unless `keepWrapUp`, a wrap-up is
    // called off when the round is left short of work.
    void endTask(uint64_t taskId, bool returnRange, bool keepWrapUp = false);
    void endTasksOf(const std::string& key);

    // The coordinator (re)started at `nowMs` holding the open tasks that
    // TaskBoard::restore brought back: a wrap-up takes none of them back as
    // silent, before it has had an upload, until `reconnectMs` after the
    // start plus the grace.
    void restored(int64_t nowMs, int64_t reconnectMs);

    // After the wrap-up's grace, drops the silent holders' tasks; the
    // wrap-up to announce, once.
    std::optional<net::RoundWrapUpEvent> tick(int64_t nowMs);
    bool roundDue() const;
    // Whether tick() has a round to close or a wrap-up to announce now.
    bool tickDue() const { return roundDue() || (m_wrapUp.active && !m_wrapUp.announced); }
    // The round closed: the next one starts with no wrap-up and no rejections.
    void roundClosed();

    static constexpr int kMaxRejectionsPerKeyPerRound = 3;

private:
    // Accepted plus outstanding tokens, as `key` counts them, reach the
    // round's target: no new task for it.
    bool workHandedOut(const std::string& key) const;
    bool isNew(const std::string& key) const { return m_isNew && m_isNew(key); }
    bool establishedHoldsTask() const;
    // `key` delivered in the round, and its asking again wraps it up.
    bool mayWrapUp(const std::string& key) const;
    bool delivered(const std::string& key) const;
    bool capped(const std::string& key) const;
    // Another key, not itself at the cap, holds an open task in this round
    // or waits for one (so the cap can never shut every key out, nor hold a
    // round open).
    bool othersAreWorking(const std::string& key, int64_t nowMs) const;
    Result<const OpenTask*> handOutAhead(const std::string& key, int64_t nowMs);
    // `key`, which delivered, wraps the round up.
    void startWrapUp(const std::string& key);
    void dropSilentHolders(int64_t nowMs);

    const ProjectSpec& m_spec;
    const RoundState& m_round;
    TaskBoard& m_tasks;
    const DataPlan& m_plan;
    const int64_t m_wrapUpGraceMs;
    std::function<bool(const std::string&)> m_isNew;
    std::set<uint64_t> m_restored; // task ids brought back at the start
    int64_t m_restoredUntilMs = 0;

    struct WrapUp {
        bool active = false; // the open round asks its task holders to submit now
        bool announced = false; // round_wrap_up was published
        int64_t atMs = 0; // when it was
        // How long holders have to start uploading from then: the grace, or
        // the pace of the key that started it (TaskBoard::paceOf) if longer.
        int64_t graceMs = 0;
        // Keys whose task was taken back because they stayed silent through
        // the wrap-up: they get no other task in this round.
        std::set<std::string> silentKeys;
    };
    WrapUp m_wrapUp;
    // The open round's rejections on the payload, by key.
    std::map<std::string, int> m_rejections;
    // When each key without a task last showed it waits for one.
    std::map<std::string, int64_t> m_waiting;
};

} // namespace crowdtrain::coordinator
