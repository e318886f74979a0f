#include "net/daemon/checkpoint_folders.h"

#include "core/file_io.h"
#include "net/control/utf8_text.h"
#include "net/daemon/state_file.h"

#include "net/wire/error_codes.h"
#include "net/wire/text_checks.h"

#include <nlohmann/json.hpp>

#include <charconv>

namespace crowdtrain::daemon {

namespace {

using json = nlohmann::json;

constexpr const char* kJobFile = "job.json";

// The job.json this class writes: {hub: text, project: name, round: uint, paused?: bool}.
std::string jobProblem(const json& job)
{
    for (const std::string& why :
        {expectString(job, "hub"), expectString(job, "project"), expectUnsigned(job, "round")})
        if (!why.empty())
            return why;
    if (!net::isProjectName(job["project"].get<std::string>()))
        return "\"project\" is not a project name";
    if (job.contains("paused") && !job["paused"].is_boolean())
        return "\"paused\" is not true or false";
    return "";
}

} // namespace

CheckpointFolders::CheckpointFolders(std::filesystem::path root, std::function<void(const std::string&)> notice)
    : m_root(std::move(root))
    , m_notice(std::move(notice))
{ }

std::filesystem::path CheckpointFolders::folderOf(const std::string& project, uint64_t round) const
{
    return m_root / project / ("round-" + std::to_string(round));
}

std::filesystem::path CheckpointFolders::partOf(const std::string& project, uint64_t round) const
{
    return m_root / project / (".round-" + std::to_string(round) + ".part");
}

std::filesystem::path CheckpointFolders::samplesFileOf(const std::string& project, uint64_t round) const
{
    return m_root / project / "samples" / ("round-" + std::to_string(round) + ".json");
}

void CheckpointFolders::noticeOnce(const std::filesystem::path& path, const std::string& text) const
{
    std::lock_guard lock(m_noticedMutex);
    if (m_noticed.insert(path.string()).second && m_notice)
        m_notice(text);
}

std::optional<uint64_t> CheckpointFolders::roundOf(
    const std::filesystem::path& path, std::string_view prefix, std::string_view suffix) const
{
    const std::string name = path.filename().string();
    std::optional<uint64_t> round;
    if (name.size() > prefix.size() + suffix.size() && name.starts_with(prefix) && name.ends_with(suffix)) {
        const std::string_view digits
            = std::string_view(name).substr(prefix.size(), name.size() - prefix.size() - suffix.size());
        uint64_t value = 0;
        const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
        // Exactly as std::to_string writes it: digits only, no leading zero.
        if (error == std::errc() && end == digits.data() + digits.size() && (digits.size() == 1 || digits[0] != '0'))
            round = value;
    }
    if (!round)
        noticeOnce(path,
            "skipped " + path.string() + ": not a name the daemon writes (" + std::string(prefix) + "<round>"
                + std::string(suffix) + ")");
    return round;
}

Status CheckpointFolders::contained(const std::filesystem::path& path) const
{
    std::error_code ec;
    const std::filesystem::path root = std::filesystem::weakly_canonical(m_root, ec);
    const std::filesystem::path resolved = ec ? path : std::filesystem::weakly_canonical(path, ec);
    if (!ec) {
        auto r = root.begin();
        auto p = resolved.begin();
        for (; r != root.end() && p != resolved.end() && *r == *p; ++r, ++p) { }
        if (r == root.end() && p != resolved.end())
            return Status::success();
    }
    return Error::make(net::errc::kIoError,
        path.string() + " resolves outside the checkpoints folder " + m_root.string() + "; refused");
}

std::vector<SavedDownload> CheckpointFolders::savedDownloads() const
{
    std::vector<SavedDownload> jobs;
    std::error_code ec;
    for (const auto& project : std::filesystem::directory_iterator(m_root, ec)) {
        const std::string projectName = project.path().filename().string();
        if (!project.is_directory(ec) || !net::isProjectName(projectName)) {
            noticeOnce(
                project.path(), "skipped " + project.path().string() + ": not a project folder the daemon writes");
            continue;
        }
        std::error_code inner;
        for (const auto& entry : std::filesystem::directory_iterator(project.path(), inner)) {
            const std::string name = entry.path().filename().string();
            if (!name.starts_with(".round-") || !name.ends_with(".part"))
                continue;
            const auto round = roundOf(entry.path(), ".round-", ".part");
            if (!round)
                continue;
            std::string why;
            const auto job = readStateFile(
                entry.path() / kJobFile, 1 << 16,
                [&](const json& root) {
                    if (std::string problem = jobProblem(root); !problem.empty())
                        return problem;
                    if (root["project"].get<std::string>() != projectName || root["round"].get<uint64_t>() != *round)
                        return std::string("it names another checkpoint than its folder");
                    return std::string();
                },
                why);
            if (!why.empty() && m_notice)
                m_notice(why);
            if (job)
                jobs.push_back({(*job)["hub"].get<std::string>(), projectName, *round, job->value("paused", false)});
        }
    }
    return jobs;
}

Status CheckpointFolders::writeJob(const SavedDownload& job) const
{
    json text = {{"hub", job.link}, {"project", job.project}, {"round", job.round}};
    if (job.paused)
        text["paused"] = true;
    return core::writeFileAtomic(partOf(job.project, job.round) / kJobFile, text.dump());
}

std::optional<uint64_t> CheckpointFolders::newestLocal(const std::string& project) const
{
    std::optional<uint64_t> newest;
    std::error_code ec;
    if (!net::isProjectName(project))
        return newest;
    for (const auto& entry : std::filesystem::directory_iterator(m_root / project, ec)) {
        const std::string name = entry.path().filename().string();
        if (!name.starts_with("round-") || !std::filesystem::exists(entry.path() / "model.safetensors", ec))
            continue;
        const auto round = roundOf(entry.path(), "round-", "");
        if (round && (!newest || *round > *newest))
            newest = round;
    }
    return newest;
}

control::Value CheckpointFolders::local() const
{
    control::Value list = control::Value::array();
    std::error_code ec;
    for (const auto& project : std::filesystem::directory_iterator(m_root, ec)) {
        if (!net::isProjectName(project.path().filename().string()))
            continue; // savedDownloads() gave the notice
        std::error_code inner;
        for (const auto& entry : std::filesystem::directory_iterator(project.path(), inner)) {
            const std::string name = entry.path().filename().string();
            if (!name.starts_with("round-"))
                continue;
            const auto round = roundOf(entry.path(), "round-", "");
            if (!round)
                continue;
            control::Value item = control::Value::map();
            item.set("project", project.path().filename().string());
            item.set("round", *round);
            item.set("folder", entry.path().string());
            list.push(std::move(item));
        }
    }
    return list;
}

control::Value CheckpointFolders::readSamples(const std::string& project, uint64_t round) const
{
    auto text = core::readFile(samplesFileOf(project, round));
    if (!text)
        return {};
    const json doc = json::parse(*text, nullptr, false);
    if (!doc.is_object() || !doc.contains("samples") || !doc["samples"].is_array())
        return {};
    control::Value out = control::Value::array();
    for (const json& sample : doc["samples"]) {
        if (!sample.is_object() || !sample.contains("prompt") || !sample["prompt"].is_string()
            || !sample.contains("text") || !sample["text"].is_string())
            continue;
        control::Value item = control::Value::map();
        item.set("prompt", control::toValidUtf8(sample["prompt"].get<std::string>()));
        item.set("text", control::toValidUtf8(sample["text"].get<std::string>()));
        out.push(std::move(item));
    }
    return out;
}

} // namespace crowdtrain::daemon
