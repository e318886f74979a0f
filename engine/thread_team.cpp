#include "engine/thread_team.h"

#include <utility>

namespace crowdtrain::engine {

ThreadTeam::ThreadTeam(int size, std::function<void(int member)> onStart)
{
    m_threads.reserve(std::size_t(size));
    for (int i = 0; i < size; ++i)
        m_threads.emplace_back([this, i, onStart] { loop(i, onStart); });
}

ThreadTeam::~ThreadTeam()
{
    {
        std::lock_guard lock(m_mutex);
        m_stopping = true;
    }
    m_wake.notify_all();
    for (auto& thread : m_threads)
        thread.join();
}

void ThreadTeam::run(const std::function<void(int member)>& job)
{
    std::unique_lock lock(m_mutex);
    m_job = &job;
    m_pending = size();
    m_error = nullptr;
    ++m_generation;
    m_wake.notify_all();
    m_done.wait(lock, [this] { return m_pending == 0; });
    m_job = nullptr;
    if (m_error)
        std::rethrow_exception(std::exchange(m_error, nullptr));
}

void ThreadTeam::loop(int member, const std::function<void(int)>& onStart)
{
    if (onStart)
        onStart(member);
    unsigned long seen = 0;
    std::unique_lock lock(m_mutex);
    for (;;) {
        m_wake.wait(lock, [&] { return m_stopping || m_generation != seen; });
        if (m_stopping)
            return;
        seen = m_generation;
        const auto* job = m_job;
        lock.unlock();
        std::exception_ptr error;
        try {
            (*job)(member);
        } catch (...) {
            error = std::current_exception();
        }
        lock.lock();
        if (error && !m_error)
            m_error = error;
        if (--m_pending == 0)
            m_done.notify_one();
    }
}

} // namespace crowdtrain::engine
