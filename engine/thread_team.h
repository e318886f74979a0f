#pragma once

// A fixed team of threads that run one job per member and wait for all of
// them: the CPU trainer's replicas each step on their own core. Members are
// started once and joined by the destructor; run() is called from one owner
// thread at a time. The first exception a job throws is rethrown by run().

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace crowdtrain::engine {

class ThreadTeam {
public:
    // `onStart` runs once on each member thread before its first job.
    explicit ThreadTeam(int size, std::function<void(int member)> onStart = {});
    ~ThreadTeam();
    ThreadTeam(const ThreadTeam&) = delete;
    ThreadTeam& operator=(const ThreadTeam&) = delete;

    int size() const { return int(m_threads.size()); }
    // Runs job(i) on member i for every member; returns when all are done.
    void run(const std::function<void(int member)>& job);

private:
    void loop(int member, const std::function<void(int)>& onStart);

    std::vector<std::thread> m_threads;
    std::mutex m_mutex;
    std::condition_variable m_wake;
    std::condition_variable m_done;
    const std::function<void(int)>* m_job = nullptr;
    unsigned long m_generation = 0;
    int m_pending = 0;
    bool m_stopping = false;
    std::exception_ptr m_error;
};

} // namespace crowdtrain::engine
