#pragma once

// One thread that runs jobs one after another in the order they were
// posted (a strand): the daemon's control requests that talk to a hub, a
// disk or a child process run on one of these, off the control thread, and
// answer when done (docs/protocol.md 12.1, "Answers out of order").
// At most `capacity` jobs wait; post() refuses more. The destructor (or
// stop()) lets the running job finish, drops the jobs that have not
// started (destroying their closures) and joins the thread.
// Thread-safe.

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace crowdtrain::daemon {

class WorkQueue {
public:
    explicit WorkQueue(std::size_t capacity);
    ~WorkQueue();
    WorkQueue(const WorkQueue&) = delete;
    WorkQueue& operator=(const WorkQueue&) = delete;

    // False when `capacity` jobs wait already, or after stop().
    bool post(std::function<void()> job);
    void stop();

private:
    void work();

    const std::size_t m_capacity;
    std::mutex m_mutex;
    std::condition_variable m_wake;
    std::deque<std::function<void()>> m_jobs;
    bool m_stopping = false;
    std::mutex m_joinMutex; // stop() may be called from two threads at once
    std::thread m_thread;
};

} // namespace crowdtrain::daemon
