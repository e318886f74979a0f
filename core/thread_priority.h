#pragma once

// A server's loop answers everyone; the heavy work beside it (a round's
// close, an acceptance's fsyncs, an evaluation) only has to finish. On a
// host whose cores are all busy (the close's own threads, the host's
// volunteer, other programs) the scheduler shares them fairly, and the loop
// waits its turn behind the heavy threads. A heavy thread calls
// belowTheLoop() first: its nice value goes up by kNiceSteps, so that when
// both are ready the loop runs first (Linux gives a nice-10 thread about a
// tenth of a nice-0 one's share), and the heavy work still gets every cycle
// nobody else wants. Threads it starts (libtorch's OpenMP pool, when this
// thread starts it) inherit the value. Raising a nice value needs no
// privilege; a failure changes nothing and is not an error.

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace crowdtrain::core {

inline constexpr int kNiceSteps = 10;
inline constexpr int kLowestNice = 19;

// This thread's nice value raised to `nice` (never lowered: that needs a
// privilege), for itself and the threads it starts.
inline void niceAtLeast(int nice)
{
    const auto tid = static_cast<id_t>(::syscall(SYS_gettid));
    const int now = ::getpriority(PRIO_PROCESS, tid); // -1 is a valid value, and errors are ignored
    if (nice > now)
        ::setpriority(PRIO_PROCESS, tid, nice > kLowestNice ? kLowestNice : nice);
}

inline void belowTheLoop()
{
    niceAtLeast(::getpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid))) + kNiceSteps);
}

// A volunteer's computing takes only what nobody else wants (BOINC runs its
// science applications at the lowest priority): the training core, and the
// daemon's own heavy work beside it (the codec, applying a new version,
// hashing), each on a thread of its own, since a nice value cannot be
// lowered again. The desktop, a game and a coordinator on the same machine
// come first.
inline void asIdleWork()
{
    niceAtLeast(kLowestNice);
}

} // namespace crowdtrain::core
