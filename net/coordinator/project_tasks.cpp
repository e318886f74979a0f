// The open tasks of a ProjectRuntime on disk, so that a coordinator restart
// does not throw away the work in flight: each task handed out is recorded
// under STATE/tasks/ before the volunteer hears of it, and forgotten when it
// ends. After a restart the tasks of the open round come back with the same
// ids, ranges, holders and deadlines, and their uploads resume after the
// last whole chunk on disk.

#include "net/coordinator/project_runtime.h"

#include "engine/atomic_file.h"
#include "net/coordinator/file_slices.h"

#include <nlohmann/json.hpp>
#include <set>

namespace crowdtrain::coordinator {
namespace {

std::string taskFileName(uint64_t taskId)
{
    return "t" + std::to_string(taskId) + ".json";
}

} // namespace

std::filesystem::path ProjectRuntime::tasksDir() const
{
    return m_store->dir() / "tasks";
}

Status ProjectRuntime::recordOpenTask(const TaskState& task)
{
    const Lease& lease = task.lease;
    const nlohmann::json record = {{"round", m_version + 1}, {"task", lease.id}, {"key", lease.publicKey},
        {"epoch", lease.epoch}, {"range", lease.range}, {"deadline_ms", lease.deadlineMs}};
    return engine::writeFileAtomically(tasksDir() / taskFileName(lease.id), record.dump());
}

void ProjectRuntime::forgetOpenTask(uint64_t taskId)
{
    std::error_code ec;
    std::filesystem::remove(tasksDir() / taskFileName(taskId), ec);
}

Status ProjectRuntime::restoreOpenTasks()
{
    std::set<std::filesystem::path> uploadsInUse;
    for (const auto& entry : std::filesystem::directory_iterator(tasksDir())) {
        const auto path = entry.path();
        if (path.extension() != ".json" || path.filename().string().starts_with(".")) {
            std::filesystem::remove(path); // a temporary of an interrupted write
            continue;
        }
        auto text = engine::readWholeFile(path);
        const nlohmann::json record = text ? nlohmann::json::parse(*text, nullptr, false) : nlohmann::json();
        const bool wellFormed = record.is_object() && record.value("round", int64_t(-1)) == m_version + 1
            && record.contains("task") && record["task"].is_number_unsigned() && record.contains("key")
            && record["key"].is_string() && record.contains("epoch") && record["epoch"].is_number_unsigned()
            && record.contains("range") && record["range"].is_number_unsigned() && record.contains("deadline_ms")
            && record["deadline_ms"].is_number_integer();
        Result<Lease> lease = Error::make("stale_lease", "not a task of the open round");
        if (wellFormed)
            lease = m_plan->restoreLease(
                Lease{record["task"].get<uint64_t>(), record["key"].get<std::string>(), record["epoch"].get<uint64_t>(),
                    record["range"].get<uint32_t>(), {}, record["deadline_ms"].get<int64_t>()});
        if (!lease) {
            // Of a closed round, or its range was accepted (the record is
            // removed just after the acceptance is durable): nothing to resume.
            std::filesystem::remove(path);
            continue;
        }
        TaskState task{
            *lease, taskTokens(), 0, 0, uploadsDir() / ("task-" + std::to_string(lease->id) + ".part"), nullptr};
        if (Status s = resumeUpload(task); !s)
            return s;
        uploadsInUse.insert(task.uploadFile);
        m_tasks.emplace(lease->id, std::move(task));
    }
    for (const auto& entry : std::filesystem::directory_iterator(uploadsDir()))
        if (!uploadsInUse.contains(entry.path()))
            std::filesystem::remove(entry.path());
    return Status::success();
}

// The chunks a volunteer sent before the restart stay: the whole ones are
// hashed and inspected again, a torn last one is cut off, and the volunteer
// is told to go on from there (upload_chunk answers the next index).
Status ProjectRuntime::resumeUpload(TaskState& task)
{
    std::error_code ec;
    const uint64_t onDisk
        = std::filesystem::exists(task.uploadFile, ec) ? std::filesystem::file_size(task.uploadFile, ec) : 0;
    if (ec)
        return Error::make("io_error", "cannot read " + task.uploadFile.string() + ": " + ec.message());
    const uint64_t expected = uint64_t(diloco::encodedBytes(m_codec, m_parameters));
    const uint64_t chunk = net::kDefaultChunkBytes;
    const uint64_t keep = onDisk >= expected ? expected : onDisk / chunk * chunk;
    if (keep == 0) {
        std::filesystem::remove(task.uploadFile, ec);
        return Status::success();
    }
    std::filesystem::resize_file(task.uploadFile, keep, ec);
    if (ec)
        return Error::make("io_error", "cannot truncate " + task.uploadFile.string() + ": " + ec.message());
    auto checks = std::make_shared<UploadChecks>(m_codec, m_parameters);
    const Status read = forEachSlice(task.uploadFile, [&](std::string_view slice) {
        checks->sha.update(slice);
        if (checks->inspected)
            checks->inspected = checks->inspector.feed(slice);
        return Status::success();
    });
    if (!read)
        return read;
    task.checks = std::move(checks);
    task.receivedBytes = keep;
    task.nextChunk = net::chunkCountFor(keep, chunk);
    return Status::success();
}

} // namespace crowdtrain::coordinator
