#include "net/daemon/request_table.h"

#include "net/control/control_names.h"

namespace crowdtrain::daemon {

namespace {

constexpr std::size_t kMaxQueuedChanges = 32;
constexpr std::size_t kMaxQueuedReads = 16;

} // namespace

RequestTable::RequestTable(std::function<void()> changed)
    : m_changed(std::move(changed))
    , m_changes(std::make_unique<WorkQueue>(kMaxQueuedChanges))
    , m_reads(std::make_unique<WorkQueue>(kMaxQueuedReads))
{ }

RequestTable::~RequestTable()
{
    // The queues first: their jobs use the handlers' captures.
    m_changes.reset();
    m_reads.reset();
}

void RequestTable::add(std::string_view type, Handler handler)
{
    m_handlers.emplace(std::string(type), std::move(handler));
}

WorkQueue& RequestTable::queue(Lane lane)
{
    return lane == Lane::Reads ? *m_reads : *m_changes;
}

bool RequestTable::post(Lane lane, std::function<void()> job)
{
    return queue(lane).post(std::move(job));
}

void RequestTable::stop()
{
    m_changes->stop();
    m_reads->stop();
}

void RequestTable::dispatch(const control::Request& request, control::Responder respond)
{
    const auto handler = m_handlers.find(request.type);
    if (handler == m_handlers.end())
        return respond(Error::make(control::errc::kUnknownType, "the daemon has no request \"" + request.type + "\""));
    Result<Planned> planned = handler->second(request.body);
    if (!planned)
        return respond(planned.error());
    if (planned->lane == Lane::Now)
        return respond(planned->work());
    const bool change = planned->lane == Lane::Changes;
    const bool queued = post(planned->lane, [this, change, respond, work = std::move(planned->work)] {
        Result<control::Value> reply = Error::make(control::errc::kInternal, "the daemon failed");
        try {
            reply = work();
        } catch (const std::exception& e) {
            reply = Error::make(control::errc::kInternal, std::string("the daemon failed: ") + e.what());
        }
        if (change && m_changed)
            m_changed();
        respond(std::move(reply));
    });
    if (!queued)
        respond(Error::make(control::errc::kBusy, "the daemon has too much queued; try again shortly"));
}

} // namespace crowdtrain::daemon
