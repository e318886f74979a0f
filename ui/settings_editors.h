#pragma once

// The settings page's words and editors, one kind of editor per kind of
// setting the daemon describes (`settings_get`'s "described": key, type,
// value, min, max, choices): a slider for busy shares, the weekly grid for
// the schedule, a check box, a size in human units, a spin box, a text line
// for integers beyond a spin box, a drop-down of choices, a text line.
// GUI thread only.

#include "net/control/value.h"

#include <QString>

#include <functional>
#include <string>

class QWidget;

namespace crowdtrain::ui::settings {

// Sends a value the volunteer chose.
using Apply = std::function<void(const control::Value&)>;

// The editor of one described setting, showing its value.
QWidget* makeEditor(const control::Value& spec, QWidget* parent, Apply apply);
// Shows the described value in an editor makeEditor made for the same key,
// without sending it.
void showValue(QWidget* editor, const control::Value& spec);
// "busy_share_in_use" -> "Work while I use the computer"; unknown keys in words.
QString labelOf(const std::string& key);
// The heading of the section a key starts ("" for the others).
QString sectionBefore(const std::string& key);
// The settings that need NVML (an NVIDIA driver) to mean anything.
bool needsNvml(const std::string& key);

} // namespace crowdtrain::ui::settings
