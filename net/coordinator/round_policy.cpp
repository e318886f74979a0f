#include "net/coordinator/round_policy.h"

#include <algorithm>
#include <cstdio>
#include <vector>

namespace crowdtrain::coordinator {

RoundPolicy::RoundPolicy(
    const ProjectSpec& spec, const RoundState& round, TaskBoard& tasks, const DataPlan& plan, int64_t wrapUpGraceMs)
    : m_spec(spec)
    , m_round(round)
    , m_tasks(tasks)
    , m_plan(plan)
    , m_wrapUpGraceMs(wrapUpGraceMs)
{ }

Result<const OpenTask*> RoundPolicy::handOut(const std::string& key, bool ahead, int64_t nowMs)
{
    if (ahead)
        return handOutAhead(key, nowMs);
    if (const OpenTask* held = m_tasks.heldBy(key))
        return held;
    if (m_wrapUp.active || workHandedOut(key)) {
        // A volunteer that delivered in this round asks for more and there
        // is none: rather than let it wait for the slowest, the round wraps up.
        if (!m_wrapUp.active && m_tasks.outstandingTokens() > 0 && mayWrapUp(key))
            startWrapUp(key);
        waitsForWork(key, nowMs);
        return nullptr;
    }
    if (m_wrapUp.silentKeys.contains(key) || (capped(key) && othersAreWorking(key, nowMs)))
        return nullptr;
    auto task = m_tasks.lease(key, m_round.openRound(), nowMs);
    if (!task)
        return task.error();
    if (!*task)
        waitsForWork(key, nowMs);
    else
        m_waiting.erase(key);
    return static_cast<const OpenTask*>(*task);
}

// Work for the next round, trained while this one closes: at most one such
// task per key and the next round's target in all.
Result<const OpenTask*> RoundPolicy::handOutAhead(const std::string& key, int64_t nowMs)
{
    if (const OpenTask* held = m_tasks.aheadHeldBy(key)) {
        // Asked again: it has trained it and waits for the open round to
        // close. If it delivered in that round, the round wraps up rather
        // than keep it waiting; if the round is short of hands (a task
        // refused or lost) and it did not, it gives the task back and takes
        // the open round's work.
        if (mayWrapUp(key)) {
            if (!m_wrapUp.active)
                startWrapUp(key);
        } else if (!delivered(key) && !m_wrapUp.active && !workHandedOut(key)) {
            endTask(held->lease.id, true);
            return nullptr;
        }
        return held;
    }
    if (capped(key))
        return nullptr;
    if (!(m_wrapUp.active || workHandedOut(key)))
        return nullptr; // the open round still has work: submit, then ask for it
    if (int64_t(m_tasks.aheadTokens()) >= m_round.target())
        return nullptr;
    auto task = m_tasks.lease(key, m_round.openRound(), nowMs, true);
    if (!task)
        return task.error();
    return static_cast<const OpenTask*>(*task);
}

void RoundPolicy::startWrapUp(const std::string& key)
{
    m_wrapUp.active = true;
    m_wrapUp.graceMs = std::max(m_wrapUpGraceMs, m_tasks.paceOf(key));
}

bool RoundPolicy::offersWork(const std::string& key) const
{
    return !m_wrapUp.active && !workHandedOut(key) && m_plan.canLease();
}

bool RoundPolicy::workHandedOut(const std::string& key) const
{
    // An established key does not count the new keys' open tasks.
    const bool countsEveryTask = !m_isNew || isNew(key);
    int64_t tokens = m_round.acceptedTokens();
    for (const auto& [id, task] : m_tasks.tasks())
        if (!task.ahead && (countsEveryTask || !isNew(task.lease.publicKey)))
            tokens += int64_t(task.tokens);
    return tokens >= m_round.target();
}

bool RoundPolicy::establishedHoldsTask() const
{
    return std::any_of(m_tasks.tasks().begin(), m_tasks.tasks().end(),
        [&](const auto& entry) { return !entry.second.ahead && !isNew(entry.second.lease.publicKey); });
}

bool RoundPolicy::mayWrapUp(const std::string& key) const
{
    return m_spec.round.wrapUp && delivered(key) && !(isNew(key) && establishedHoldsTask());
}

bool RoundPolicy::delivered(const std::string& key) const
{
    const auto& accepted = m_round.accepted();
    return std::any_of(
        accepted.begin(), accepted.end(), [&](const AcceptedSubmission& a) { return a.record.publicKey == key; });
}

bool RoundPolicy::capped(const std::string& key) const
{
    auto it = m_rejections.find(key);
    return it != m_rejections.end() && it->second >= kMaxRejectionsPerKeyPerRound;
}

// Only open tasks count: submissions already accepted from other keys do
// not bring the round any nearer its close, so a capped key waiting on them
// would wait for good once their senders are gone (an attack that got two
// tasks accepted, then stopped).
bool RoundPolicy::othersAreWorking(const std::string& key, int64_t nowMs) const
{
    for (const auto& [id, task] : m_tasks.tasks())
        if (task.lease.publicKey != key && !capped(task.lease.publicKey))
            return true;
    for (const auto& [other, atMs] : m_waiting)
        if (other != key && !capped(other) && nowMs - atMs <= m_wrapUpGraceMs)
            return true;
    return false;
}

void RoundPolicy::endTask(uint64_t taskId, bool returnRange, bool keepWrapUp)
{
    auto it = m_tasks.tasks().find(taskId);
    const std::string holder = it == m_tasks.tasks().end() ? std::string() : it->second.lease.publicKey;
    m_tasks.drop(taskId, returnRange);
    // A task that ends without an acceptance (rejected, expired, its holder
    // gone) may leave the round short of work (as its holder counts it): hand
    // out tasks again, and wrap up again once there is enough.
    if (m_wrapUp.active && !keepWrapUp && !workHandedOut(holder))
        m_wrapUp.active = m_wrapUp.announced = false;
}

void RoundPolicy::endTasksOf(const std::string& key)
{
    for (uint64_t id : m_tasks.idsHeldBy(key))
        endTask(id, true);
}

std::optional<net::RoundWrapUpEvent> RoundPolicy::tick(int64_t nowMs)
{
    if (m_wrapUp.active && m_wrapUp.announced && nowMs - m_wrapUp.atMs > m_wrapUp.graceMs)
        dropSilentHolders(nowMs);
    if (!m_wrapUp.active || m_wrapUp.announced)
        return std::nullopt;
    m_wrapUp.announced = true;
    m_wrapUp.atMs = nowMs;
    return net::RoundWrapUpEvent{uint64_t(m_round.openRound()), uint64_t(m_round.version())};
}

void RoundPolicy::restored(int64_t nowMs, int64_t reconnectMs)
{
    for (const auto& [id, task] : m_tasks.tasks())
        m_restored.insert(id);
    m_restoredUntilMs = nowMs + reconnectMs + m_wrapUpGraceMs;
}

void RoundPolicy::dropSilentHolders(int64_t nowMs)
{
    std::vector<uint64_t> silent;
    for (const auto& [id, task] : m_tasks.tasks()) {
        const bool reconnecting = task.lastUploadMs == 0 && nowMs < m_restoredUntilMs && m_restored.contains(id);
        if (!task.ahead && !reconnecting
            && (task.lastUploadMs < m_wrapUp.atMs || nowMs - task.lastUploadMs > m_wrapUp.graceMs))
            silent.push_back(id);
    }
    for (uint64_t id : silent) {
        m_wrapUp.silentKeys.insert(m_tasks.tasks().at(id).lease.publicKey);
        std::fprintf(stderr, "%s: round %lld wraps up without task %llu (its holder sent nothing for %.1f s)\n",
            m_spec.name.c_str(), static_cast<long long>(m_round.openRound()), static_cast<unsigned long long>(id),
            double(m_wrapUp.graceMs) / 1000.0);
        endTask(id, true, true);
    }
}

bool RoundPolicy::roundDue() const
{
    // A round that wrapped up closes with the tokens its volunteers trained
    // in the time the first one took, which may fall short of the target.
    return !m_round.accepted().empty() && m_tasks.outstandingTokens() == 0
        && (m_round.acceptedTokens() >= m_round.target() || m_wrapUp.active);
}

void RoundPolicy::roundClosed()
{
    m_wrapUp = WrapUp{};
    m_rejections.clear();
    m_waiting.clear();
}

} // namespace crowdtrain::coordinator
