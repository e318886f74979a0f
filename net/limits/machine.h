#pragma once

// The machine's readings for the limits policy, read the Linux way. Each
// reader takes its root folder so tests can point it at a made-up tree.
//   battery:  /sys/class/power_supply (a "Mains"/"USB" supply online, or a
//             "Battery" whose status is not "Discharging": on mains)
//   idle:     access times of /dev/input/event* and /dev/input/mice, which
//             every keyboard or mouse read updates (what BOINC uses too); it
//             needs no X11 and works under Wayland and on the console
//   programs: /proc/<pid>/comm and the base name of /proc/<pid>/exe

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace crowdtrain::limits {

// true: on battery; false: on mains; nullopt: no battery (a desktop).
std::optional<bool> onBattery(const std::filesystem::path& powerSupplies = "/sys/class/power_supply");

struct IdleReading {
    double seconds = 0; // since the newest input
    std::string source; // how it was measured, for the status
};

// nullopt when no input device can be read (a server, a container).
std::optional<IdleReading> inputIdle(
    std::chrono::system_clock::time_point now, const std::filesystem::path& inputDir = "/dev/input");

// The names of the programs running now (comm, and the base name of the
// executable when it can be read), sorted, without duplicates.
std::vector<std::string> runningPrograms(const std::filesystem::path& proc = "/proc");

// The RAM the kernel estimates is available for a new program without
// swapping (MemAvailable, in bytes); nullopt when it cannot be read.
std::optional<uint64_t> availableHostMemory(const std::filesystem::path& meminfo = "/proc/meminfo");

// "a, b ,c" -> {"a", "b", "c"}.
std::vector<std::string> splitList(const std::string& text);

} // namespace crowdtrain::limits
