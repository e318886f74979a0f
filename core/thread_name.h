#pragma once

// Names the calling thread, as `top -H`, /proc/PID/task/TID/comm, gdb and
// the benches show it: which of a process's threads holds a CPU, waits or
// hangs is then read off its name. Linux keeps 15 bytes; a longer name is
// cut. Failing changes nothing and is not an error.

#include <pthread.h>

#include <string>
#include <string_view>

namespace crowdtrain::core {

inline void nameThisThread(std::string_view name)
{
    ::pthread_setname_np(::pthread_self(), std::string(name.substr(0, 15)).c_str());
}

} // namespace crowdtrain::core
