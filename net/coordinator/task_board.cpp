#include "net/coordinator/task_board.h"
#include "net/wire/error_codes.h"

#include "core/file_io.h"

#include <charconv>
#include <nlohmann/json.hpp>
#include <set>

namespace crowdtrain::coordinator {
namespace {

// Lease ids are reserved in blocks: one ledger write per this many tasks.
constexpr uint64_t kLeaseIdBlock = 1024;
constexpr const char* kLeaseIdsReservedKey = "lease_ids_reserved";

std::string taskFileName(uint64_t taskId)
{
    return "t" + std::to_string(taskId) + ".json";
}

} // namespace

TaskBoard::TaskBoard(ProjectStore& store, DataPlan& plan, uint64_t taskTokens, std::function<void()> beforeRecord)
    : m_store(store)
    , m_plan(plan)
    , m_taskTokens(taskTokens)
    , m_beforeRecord(std::move(beforeRecord))
{ }

std::filesystem::path TaskBoard::tasksDir() const
{
    return m_store.dir() / "tasks";
}
std::filesystem::path TaskBoard::uploadsDir() const
{
    return m_store.dir() / "uploads";
}
std::filesystem::path TaskBoard::uploadFileOf(uint64_t taskId) const
{
    return uploadsDir() / ("task-" + std::to_string(taskId) + ".part");
}

Status TaskBoard::open()
{
    std::filesystem::create_directories(uploadsDir()); // restore() keeps the uploads of open tasks
    std::filesystem::create_directories(tasksDir());
    auto reserved = m_store.ledger().meta(kLeaseIdsReservedKey);
    if (!reserved)
        return reserved.error();
    if (*reserved) {
        uint64_t ceiling = 0;
        const std::string& text = **reserved;
        if (std::from_chars(text.data(), text.data() + text.size(), ceiling).ec != std::errc())
            return Error::make(
                net::errc::kStateCorrupt, "the ledger's " + std::string(kLeaseIdsReservedKey) + " is not a number");
        m_plan.skipLeaseIdsBelow(ceiling);
        m_leaseIdCeiling = ceiling;
    }
    return Status::success();
}

Status TaskBoard::reserveLeaseId()
{
    if (m_plan.nextLeaseId() < m_leaseIdCeiling)
        return Status::success();
    const uint64_t ceiling = m_plan.nextLeaseId() + kLeaseIdBlock;
    if (Status s = m_store.ledger().setMeta(kLeaseIdsReservedKey, std::to_string(ceiling)); !s)
        return s;
    m_leaseIdCeiling = ceiling;
    return Status::success();
}

std::shared_future<Status> TaskBoard::record(const OpenTask& task, int64_t round)
{
    const Lease& lease = task.lease;
    const nlohmann::json record = {{"round", round}, {"task", lease.id}, {"key", lease.publicKey},
        {"epoch", lease.epoch}, {"range", lease.range}, {"deadline_ms", lease.deadlineMs}};
    return m_files
        ->post([file = tasksDir() / taskFileName(lease.id), bytes = record.dump(), before = m_beforeRecord] {
            if (before)
                before();
            return core::writeFileAtomic(file, bytes);
        })
        .share();
}

void TaskBoard::removeLater(std::vector<std::filesystem::path> files)
{
    m_files->post([files = std::move(files)] {
        std::error_code ec;
        for (const auto& file : files)
            std::filesystem::remove(file, ec);
    });
}

Result<OpenTask*> TaskBoard::lease(const std::string& key, int64_t round, int64_t nowMs, bool ahead)
{
    if (!m_plan.canLease())
        return static_cast<OpenTask*>(nullptr);
    if (Status s = reserveLeaseId(); !s)
        return s.error();
    auto lease = m_plan.lease(key, nowMs);
    if (!lease)
        return static_cast<OpenTask*>(nullptr);
    OpenTask task{*lease, m_taskTokens, 0, 0, uploadFileOf(lease->id), nullptr, 0, 0, ahead, nowMs};
    // Recorded before the volunteer hears of it, so that a restart keeps it
    // (one leased ahead is recorded for its own round, so a restart before
    // that round opens drops it).
    task.recorded = record(task, ahead ? round + 1 : round);
    auto [it, inserted] = m_tasks.emplace(lease->id, std::move(task));
    return &it->second;
}

Status TaskBoard::settleRecord(uint64_t taskId)
{
    auto it = m_tasks.find(taskId);
    if (it == m_tasks.end() || !it->second.recorded.valid())
        return Status::success();
    const Status recorded = it->second.recorded.get();
    it->second.recorded = {};
    return recorded;
}

OpenTask* TaskBoard::find(uint64_t taskId, const std::string& key)
{
    auto it = m_tasks.find(taskId);
    return it == m_tasks.end() || it->second.lease.publicKey != key ? nullptr : &it->second;
}

const OpenTask* TaskBoard::heldBy(const std::string& key) const
{
    for (const auto& [id, task] : m_tasks)
        if (task.lease.publicKey == key && !task.ahead)
            return &task;
    return nullptr;
}

const OpenTask* TaskBoard::aheadHeldBy(const std::string& key) const
{
    for (const auto& [id, task] : m_tasks)
        if (task.lease.publicKey == key && task.ahead)
            return &task;
    return nullptr;
}

std::vector<uint64_t> TaskBoard::idsHeldBy(const std::string& key) const
{
    std::vector<uint64_t> ids;
    for (const auto& [id, task] : m_tasks)
        if (task.lease.publicKey == key)
            ids.push_back(id);
    return ids;
}

void TaskBoard::drop(uint64_t taskId, bool returnRange)
{
    auto it = m_tasks.find(taskId);
    if (it == m_tasks.end() || it->second.accepting)
        return;
    removeLater({it->second.uploadFile, tasksDir() / taskFileName(taskId)});
    if (returnRange)
        m_plan.releaseLease(taskId);
    m_tasks.erase(it);
}

void TaskBoard::forget(uint64_t taskId)
{
    if (auto it = m_tasks.find(taskId); it != m_tasks.end()) {
        const OpenTask& task = it->second;
        if (task.leasedMs > 0 && task.firstUploadMs >= task.leasedMs)
            m_paceMs[task.lease.publicKey] = task.firstUploadMs - task.leasedMs;
        m_tasks.erase(it);
    }
    removeLater({tasksDir() / taskFileName(taskId)});
}

std::vector<uint64_t> TaskBoard::expire(int64_t nowMs)
{
    std::vector<uint64_t> ids;
    for (const Lease& expired : m_plan.expire(nowMs))
        ids.push_back(expired.id);
    return ids;
}

int64_t TaskBoard::paceOf(const std::string& key) const
{
    auto it = m_paceMs.find(key);
    return it == m_paceMs.end() ? 0 : it->second;
}

uint64_t TaskBoard::outstandingTokens() const
{
    uint64_t tokens = 0;
    for (const auto& [id, task] : m_tasks)
        tokens += task.ahead ? 0 : task.tokens;
    return tokens;
}

uint64_t TaskBoard::aheadTokens() const
{
    uint64_t tokens = 0;
    for (const auto& [id, task] : m_tasks)
        tokens += task.ahead ? task.tokens : 0;
    return tokens;
}

std::vector<uint64_t> TaskBoard::promoteAhead()
{
    std::vector<uint64_t> dropped;
    for (const auto& [id, task] : m_tasks)
        if (task.ahead)
            if (const OpenTask* old = heldBy(task.lease.publicKey))
                dropped.push_back(old->lease.id);
    for (uint64_t id : dropped)
        drop(id, true);
    for (auto& [id, task] : m_tasks)
        task.ahead = false;
    m_paceMs.clear();
    return dropped;
}

Status TaskBoard::restore(int64_t round, const std::function<Status(OpenTask&)>& resume)
{
    std::set<std::filesystem::path> uploadsInUse;
    for (const auto& entry : std::filesystem::directory_iterator(tasksDir())) {
        const auto path = entry.path();
        if (path.extension() != ".json" || path.filename().string().starts_with(".")) {
            std::filesystem::remove(path); // a temporary of an interrupted write
            continue;
        }
        auto text = core::readFile(path);
        const nlohmann::json record = text ? nlohmann::json::parse(*text, nullptr, false) : nlohmann::json();
        // A task outlives the round it was leased in when that round closes
        // without it: it belongs to the open round now. One leased ahead
        // (recorded for a later round) does not survive.
        const int64_t recordRound = record.is_object() ? record.value("round", int64_t(-1)) : -1;
        const bool wellFormed = record.is_object() && recordRound >= 0 && recordRound <= round
            && record.contains("task") && record["task"].is_number_unsigned() && record.contains("key")
            && record["key"].is_string() && record.contains("epoch") && record["epoch"].is_number_unsigned()
            && record.contains("range") && record["range"].is_number_unsigned() && record.contains("deadline_ms")
            && record["deadline_ms"].is_number_integer();
        Result<Lease> lease = Error::make(net::errc::kStaleLease, "not a task of the open round");
        if (wellFormed)
            lease = m_plan.restoreLease(
                Lease{record["task"].get<uint64_t>(), record["key"].get<std::string>(), record["epoch"].get<uint64_t>(),
                    record["range"].get<uint32_t>(), {}, record["deadline_ms"].get<int64_t>()});
        if (!lease) {
            // Of a closed round, or its range was accepted (the record is
            // removed just after the acceptance is durable): nothing to resume.
            std::filesystem::remove(path);
            continue;
        }
        OpenTask task{*lease, m_taskTokens, 0, 0, uploadFileOf(lease->id), nullptr, 0};
        if (Status s = resume(task); !s)
            return s;
        uploadsInUse.insert(task.uploadFile);
        m_tasks.emplace(lease->id, std::move(task));
    }
    for (const auto& entry : std::filesystem::directory_iterator(uploadsDir()))
        if (!uploadsInUse.contains(entry.path()))
            std::filesystem::remove(entry.path());
    return Status::success();
}

} // namespace crowdtrain::coordinator
