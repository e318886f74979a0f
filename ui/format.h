#pragma once

// Plain-words formatting of the daemon's numbers for people, and
// conversions between control::Value and Qt types. GUI thread helpers.

#include "net/control/control_names.h"
#include "net/control/setting_keys.h"
#include "net/control/value.h"

#include <QString>

#include <string_view>

namespace crowdtrain::ui {

inline QString text(const control::Value& value)
{
    return QString::fromStdString(value.toString());
}

// A name of the control vocabulary (net/control/control_names.h,
// setting_keys.h) as Qt text: request and event types, keys, codes.
inline QLatin1String qname(std::string_view name)
{
    return QLatin1String(name.data(), qsizetype(name.size()));
}
template <typename T> QLatin1String qname(control::SettingKey<T> key)
{
    return qname(key.name);
}

// 1.2 KB, 3.4 MB, 1.1 GB (powers of 1000, as disks are sold).
QString formatBytes(double bytes);
// 12.3K, 4.5M, 6.7B tokens.
QString formatCount(double count);
// "2.3456" or "—" for nil.
QString formatLoss(const control::Value& loss);
// A local date and time from Unix milliseconds.
QString formatTime(uint64_t unixMs);
// "3 min ago", "2 h ago".
QString formatAgo(uint64_t unixMs);
// A volunteer as people read it: the display name, else "anonymous
// volunteer 7F3A" (the first hex digits of the SHA-256 of the public key,
// the same for the same key everywhere).
QString volunteerName(const QString& displayName, const QString& publicKey);
// A device as the daemon names it ("auto", "cpu", "cuda", "cuda:1") in
// words: "Automatic", "CPU", "GPU (CUDA)", "GPU 1 (CUDA)"; several
// ("cuda:0,cuda:1"): "2 GPUs (CUDA)".
QString deviceWords(const QString& device);
// Where training runs and how it shares the work between several devices
// (status' device_in_use and parallel_mode): "GPU 0 (CUDA)", "2 GPUs
// (CUDA), data parallel", "2 GPUs (CUDA), sharded (ZeRO-3)".
QString trainingDeviceWords(const QString& device, const QString& parallelMode);
// Hours of training: "12.5", "0.42", "0.003" (a minute's work is not 0.00).
QString formatHours(double hours);
// What an hour of training on that device is called: "CPU-hours",
// "GPU-hours", or "compute-hours" when unknown.
QString computeHoursName(const QString& device);

} // namespace crowdtrain::ui
