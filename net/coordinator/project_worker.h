#pragma once

// One project's worker thread (project_runtime.h): the round's close and the
// durable half of each accepted submission (fsyncs, the pending record, the
// ledger's row, the aggregate's sum) run on it, one job at a time, in the
// order they were posted. So the aggregate and the worker's ledger
// connection are only ever touched from this thread, and the loop, which
// posts the jobs and polls their futures, never waits on a disk.
//
// The owner destroys it before what its jobs use: the destructor runs every
// job already posted (an acceptance the loop handed over is made durable
// even at shutdown), then joins.

#include "core/thread_name.h"
#include "core/thread_priority.h"

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>

namespace crowdtrain::coordinator {

class ProjectWorker {
public:
    // `name`: the thread's (core::nameThisThread).
    explicit ProjectWorker(const char* name)
        : m_thread([this, name] { work(name); })
    { }
    ~ProjectWorker()
    {
        {
            std::lock_guard lock(m_mutex);
            m_stopping = true;
        }
        m_wake.notify_one();
        m_thread.join();
    }
    ProjectWorker(const ProjectWorker&) = delete;
    ProjectWorker& operator=(const ProjectWorker&) = delete;

    // Runs `job` after the jobs posted before it; its result (or exception)
    // arrives through the future.
    template <typename Job> std::future<std::invoke_result_t<Job>> post(Job job)
    {
        auto task = std::make_shared<std::packaged_task<std::invoke_result_t<Job>()>>(std::move(job));
        auto result = task->get_future();
        {
            std::lock_guard lock(m_mutex);
            m_jobs.push_back([task] { (*task)(); });
        }
        m_wake.notify_one();
        return result;
    }

private:
    void work(const char* name)
    {
        core::nameThisThread(name);
        core::belowTheLoop(); // the loop that posts the jobs runs first
        for (;;) {
            std::function<void()> job;
            {
                std::unique_lock lock(m_mutex);
                m_wake.wait(lock, [this] { return m_stopping || !m_jobs.empty(); });
                if (m_jobs.empty())
                    return; // stopping, and everything posted has run
                job = std::move(m_jobs.front());
                m_jobs.pop_front();
            }
            job();
        }
    }

    std::mutex m_mutex;
    std::condition_variable m_wake;
    std::deque<std::function<void()>> m_jobs;
    bool m_stopping = false;
    std::thread m_thread; // last: starts once the rest exists
};

} // namespace crowdtrain::coordinator
