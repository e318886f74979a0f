#pragma once

// Shared by the control-API tests (tst_control_value, tst_control_api):
// Value in QCOMPARE and data rows, and a Value nested to a chosen depth.

#include "net/control/value.h"

#include <QTest>

#include <utility>

Q_DECLARE_METATYPE(crowdtrain::control::Value)

namespace crowdtrain::control {
// QCOMPARE prints Values as JSON.
inline char* toString(const Value& value)
{
    return qstrdup(value.toJson().c_str());
}
} // namespace crowdtrain::control

namespace crowdtrain::testing {

// A Value nested `levels` arrays deep: [[...[1]...]].
inline control::Value nestedArrays(int levels)
{
    control::Value value = 1;
    for (int i = 0; i < levels; ++i) {
        control::Value outer = control::Value::array();
        outer.push(std::move(value));
        value = std::move(outer);
    }
    return value;
}

} // namespace crowdtrain::testing
