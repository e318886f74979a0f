#include "ui/format.h"

#include "net/transfer/sha256.h"

#include <QCoreApplication>
#include <QDateTime>
#include <QLocale>
#include <QStringList>

#include <algorithm>

namespace crowdtrain::ui {
namespace {

QString scaled(double value, const char* const* units, int count, double step, int decimals)
{
    int unit = 0;
    while (std::abs(value) >= step && unit + 1 < count) {
        value /= step;
        ++unit;
    }
    return QLocale().toString(value, 'f', unit == 0 ? 0 : decimals) + QString::fromLatin1(units[unit]);
}

} // namespace

QString formatBytes(double bytes)
{
    static const char* const units[] = {" B", " KB", " MB", " GB", " TB"};
    return scaled(bytes, units, 5, 1000.0, 1);
}

QString formatCount(double count)
{
    static const char* const units[] = {"", "K", "M", "B", "T"};
    return scaled(count, units, 5, 1000.0, 1);
}

QString formatLoss(const control::Value& loss)
{
    if (!loss.isNumber())
        return QStringLiteral("—");
    return QLocale().toString(loss.toDouble(), 'f', 4);
}

QString formatTime(uint64_t unixMs)
{
    if (unixMs == 0)
        return QStringLiteral("—");
    return QLocale().toString(QDateTime::fromMSecsSinceEpoch(qint64(unixMs)), QLocale::ShortFormat);
}

QString formatAgo(uint64_t unixMs)
{
    if (unixMs == 0)
        return QCoreApplication::translate("format", "never");
    const qint64 seconds = (QDateTime::currentMSecsSinceEpoch() - qint64(unixMs)) / 1000;
    if (seconds < 60)
        return QCoreApplication::translate("format", "just now");
    if (seconds < 3600)
        return QCoreApplication::translate("format", "%1 min ago").arg(seconds / 60);
    if (seconds < 86400)
        return QCoreApplication::translate("format", "%1 h ago").arg(seconds / 3600);
    return QCoreApplication::translate("format", "%1 days ago").arg(seconds / 86400);
}

QString volunteerName(const QString& displayName, const QString& publicKey)
{
    if (!displayName.trimmed().isEmpty())
        return displayName;
    return QCoreApplication::translate("format", "anonymous volunteer %1")
        .arg(QString::fromStdString(net::anonymousTag(publicKey.toStdString())));
}

QString deviceWords(const QString& device)
{
    const QString d = device.trimmed().toLower();
    if (d.isEmpty())
        return QStringLiteral("\u2014");
    if (d.contains(QLatin1Char(','))) {
        const QStringList all = d.split(QLatin1Char(','), Qt::SkipEmptyParts);
        const bool gpus = std::all_of(
            all.begin(), all.end(), [](const QString& one) { return one.trimmed().startsWith(QLatin1String("cuda")); });
        return gpus ? QCoreApplication::translate("format", "%1 GPUs (CUDA)").arg(all.size())
                    : QCoreApplication::translate("format", "%1 devices (%2)").arg(all.size()).arg(d);
    }
    if (d == qname(control::setting::kDeviceAuto))
        return QCoreApplication::translate("format", "Automatic");
    if (d == qname(control::setting::kDeviceCpu))
        return QCoreApplication::translate("format", "CPU");
    if (d == qname(control::setting::kDeviceCuda))
        return QCoreApplication::translate("format", "GPU (CUDA)");
    if (d.startsWith(QLatin1String("cuda:")))
        return QCoreApplication::translate("format", "GPU %1 (CUDA)").arg(d.mid(5));
    return device;
}

QString trainingDeviceWords(const QString& device, const QString& parallelMode)
{
    const QString where = deviceWords(device);
    if (parallelMode == QLatin1String("data_parallel"))
        return QCoreApplication::translate("format", "%1, data parallel").arg(where);
    if (parallelMode == QLatin1String("sharded"))
        return QCoreApplication::translate("format", "%1, sharded (ZeRO-3)").arg(where);
    return where;
}

QString formatHours(double hours)
{
    const int decimals = hours >= 10 ? 1 : hours >= 0.1 ? 2 : 3;
    return QLocale().toString(hours, 'f', decimals);
}

QString computeHoursName(const QString& device)
{
    const QString d = device.trimmed().toLower();
    if (d == qname(control::setting::kDeviceCpu))
        return QCoreApplication::translate("format", "CPU-hours");
    if (d.startsWith(qname(control::setting::kDeviceCuda)))
        return QCoreApplication::translate("format", "GPU-hours");
    return QCoreApplication::translate("format", "compute-hours");
}

} // namespace crowdtrain::ui
