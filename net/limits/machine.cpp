#include "net/limits/machine.h"

#include <sys/stat.h>

#include <algorithm>
#include <fstream>

namespace crowdtrain::limits {
namespace {

std::string firstLine(const std::filesystem::path& file)
{
    std::ifstream in(file);
    std::string line;
    std::getline(in, line);
    while (!line.empty() && (line.back() == '\n' || line.back() == ' ' || line.back() == '\r'))
        line.pop_back();
    return line;
}

std::string trimmed(const std::string& text)
{
    const auto first = text.find_first_not_of(" \t");
    if (first == std::string::npos)
        return "";
    const auto last = text.find_last_not_of(" \t");
    return text.substr(first, last - first + 1);
}

} // namespace

std::optional<bool> onBattery(const std::filesystem::path& powerSupplies)
{
    std::error_code ec;
    bool haveBattery = false;
    bool discharging = false;
    bool mainsOnline = false;
    for (const auto& entry : std::filesystem::directory_iterator(powerSupplies, ec)) {
        const std::string type = firstLine(entry.path() / "type");
        if (type == "Battery") {
            if (firstLine(entry.path() / "present") == "0")
                continue;
            haveBattery = true;
            discharging = discharging || firstLine(entry.path() / "status") == "Discharging";
        } else if (type == "Mains" || type == "USB" || type == "USB_C") {
            mainsOnline = mainsOnline || firstLine(entry.path() / "online") == "1";
        }
    }
    if (!haveBattery)
        return std::nullopt;
    return !mainsOnline && discharging;
}

std::optional<IdleReading> inputIdle(std::chrono::system_clock::time_point now, const std::filesystem::path& inputDir)
{
    std::error_code ec;
    std::optional<std::chrono::system_clock::time_point> newest;
    for (const auto& entry : std::filesystem::directory_iterator(inputDir, ec)) {
        const std::string name = entry.path().filename().string();
        if (name.rfind("event", 0) != 0 && name != "mice")
            continue;
        struct stat st { };
        if (::stat(entry.path().c_str(), &st) != 0)
            continue;
        const auto atime
            = std::chrono::system_clock::time_point(std::chrono::duration_cast<std::chrono::system_clock::duration>(
                std::chrono::seconds(st.st_atim.tv_sec) + std::chrono::nanoseconds(st.st_atim.tv_nsec)));
        if (!newest || atime > *newest)
            newest = atime;
    }
    if (!newest)
        return std::nullopt;
    const double seconds = std::chrono::duration<double>(now - *newest).count();
    return IdleReading{std::max(0.0, seconds), "input devices (" + inputDir.string() + ")"};
}

std::vector<std::string> runningPrograms(const std::filesystem::path& proc)
{
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(proc, ec)) {
        const std::string pid = entry.path().filename().string();
        if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos)
            continue;
        if (std::string comm = firstLine(entry.path() / "comm"); !comm.empty())
            names.push_back(std::move(comm));
        std::error_code linkError;
        const auto exe = std::filesystem::read_symlink(entry.path() / "exe", linkError);
        if (!linkError && !exe.filename().empty())
            names.push_back(exe.filename().string());
    }
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    return names;
}

std::optional<uint64_t> availableHostMemory(const std::filesystem::path& meminfo)
{
    std::ifstream in(meminfo);
    std::string name;
    uint64_t kib = 0;
    std::string unit;
    while (in >> name >> kib) {
        std::getline(in, unit);
        if (name == "MemAvailable:")
            return kib * 1024;
    }
    return std::nullopt;
}

std::vector<std::string> splitList(const std::string& text)
{
    std::vector<std::string> items;
    std::size_t start = 0;
    while (start <= text.size()) {
        const std::size_t comma = std::min(text.find(',', start), text.size());
        if (std::string item = trimmed(text.substr(start, comma - start)); !item.empty())
            items.push_back(std::move(item));
        start = comma + 1;
    }
    return items;
}

} // namespace crowdtrain::limits
