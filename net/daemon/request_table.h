#pragma once

// The control API's requests, routed (docs/protocol.md 12.2): each request
// type maps to a handler that checks the body's fields on the control
// thread and says where the work runs: now (answered at once, from memory),
// on the "changes" queue (what changes something, in the order it came) or
// on the "reads" queue (hub reads). A type with no handler is
// "unknown_type"; a full queue is "busy"; a handler that throws is
// "internal". The handlers themselves are in daemon_requests.h.
//
// Thread-safety: add() before serving; dispatch() on the control thread;
// post() and stop() from any thread. The destructor stops both queues,
// letting a running job finish and dropping the rest.

#include "net/control/control_server.h"
#include "net/daemon/work_queue.h"

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

namespace crowdtrain::daemon {

enum class Lane { Now, Changes, Reads };

// What a checked request does, and where.
struct Planned {
    Lane lane = Lane::Now;
    std::function<Result<control::Value>()> work;
};

class RequestTable {
public:
    // Checks the body; an error is the reply.
    using Handler = std::function<Result<Planned>(const control::Value& body)>;

    // `changed`: called after each request of the Changes lane ran, before
    // its reply is sent.
    explicit RequestTable(std::function<void()> changed = {});
    ~RequestTable();

    void add(std::string_view type, Handler handler);
    void dispatch(const control::Request& request, control::Responder respond);
    // Runs `job` on a queue (false when it is full or stopped).
    bool post(Lane lane, std::function<void()> job);
    void stop();

private:
    WorkQueue& queue(Lane lane);

    std::map<std::string, Handler, std::less<>> m_handlers;
    std::function<void()> m_changed;
    std::unique_ptr<WorkQueue> m_changes;
    std::unique_ptr<WorkQueue> m_reads;
};

} // namespace crowdtrain::daemon
