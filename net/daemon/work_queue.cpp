#include "net/daemon/work_queue.h"

#include "core/thread_name.h"

namespace crowdtrain::daemon {

WorkQueue::WorkQueue(std::size_t capacity)
    : m_capacity(capacity)
    , m_thread([this] {
        core::nameThisThread("work-queue");
        work();
    })
{ }

WorkQueue::~WorkQueue()
{
    stop();
}

bool WorkQueue::post(std::function<void()> job)
{
    {
        std::lock_guard lock(m_mutex);
        if (m_stopping || m_jobs.size() >= m_capacity)
            return false;
        m_jobs.push_back(std::move(job));
    }
    m_wake.notify_one();
    return true;
}

void WorkQueue::stop()
{
    std::deque<std::function<void()>> dropped;
    {
        std::lock_guard lock(m_mutex);
        m_stopping = true;
        dropped.swap(m_jobs);
    }
    m_wake.notify_all();
    dropped.clear(); // outside the lock: a closure's destructor may answer a request
    std::lock_guard lock(m_joinMutex);
    if (m_thread.joinable() && m_thread.get_id() != std::this_thread::get_id())
        m_thread.join();
}

void WorkQueue::work()
{
    std::unique_lock lock(m_mutex);
    while (true) {
        m_wake.wait(lock, [&] { return m_stopping || !m_jobs.empty(); });
        if (m_stopping)
            return;
        std::function<void()> job = std::move(m_jobs.front());
        m_jobs.pop_front();
        lock.unlock();
        job();
        job = nullptr; // destroyed before the next wait, outside the lock
        lock.lock();
    }
}

} // namespace crowdtrain::daemon
