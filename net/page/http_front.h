#pragma once

// The public page's accept loop: one thread that polls every connection
// until its request's header block has arrived, so a worker thread is
// handed only a request it can answer at once, never an idle or slowly
// trickling socket ("slowloris"). It bounds what one address, and everyone
// together, can hold:
// - connections open at once per address (waiting or being answered);
//   beyond it a new one is answered 429 and closed;
// - connections open at once in all; beyond it the oldest one still
//   waiting for its header is closed first;
// - a deadline from accept to the end of the header block (408, closed);
// - the header block's size and line count (431, closed).
// So the page's memory for requests has a ceiling: at most maxConnections
// header blocks of maxHeaderBytes each, whatever clients send.
//
// listen() binds, start() starts the thread; stop() (or the destructor) stops
// and joins it; the sockets still waiting close with the object.
// finished() is thread-safe.

#include "core/result.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace crowdtrain::page {

struct FrontLimits {
    int connectionsPerAddress = 16; // a browser opens about 6
    int maxConnections = 1024;
    int headerDeadlineMs = 3000;
    std::size_t maxHeaderBytes = 8192; // request line and header lines together
    int maxHeaderLines = 64; // request line included
};

// A connection whose header block has arrived, in full: `bytes` holds it
// and whatever followed it in the same reads. The receiver owns `fd`
// (non-blocking) and calls HttpFront::finished(address) once it closed it.
struct ReadyRequest {
    int fd = -1;
    std::string bytes;
    std::string address; // the peer's, numeric
    int port = 0;
};

class HttpFront {
public:
    // Called on the front's thread: hand the request on, do not block.
    using Handler = std::function<void(ReadyRequest)>;

    // Binds; `port` 0: any free port. Error "bad_options" when it cannot.
    static Result<std::unique_ptr<HttpFront>> listen(const std::string& host, uint16_t port, FrontLimits limits);
    // Starts the thread, which hands each whole request to `handler`.
    void start(Handler handler);
    ~HttpFront();

    // Stops accepting and handing on, and joins the thread; idempotent.
    void stop();

    uint16_t port() const;
    void finished(const std::string& address);

    struct Impl;

private:
    explicit HttpFront(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> m_impl;
};

} // namespace crowdtrain::page
