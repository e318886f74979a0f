#pragma once

// crowdtrain-server --http: the public, read-only project page and its JSON
// API (page_json.h), served by cpp-httplib on its own small pool of threads
// from the snapshots a PageFeed holds, never from the coordinator's state,
// so viewers cannot slow the rounds. GET and HEAD only; no cookies; strict
// Content-Security-Policy and nosniff on every response; a request rate per
// client address (429 beyond it); one request per connection; checkpoint
// downloads (where the project's checkpoint_access is "everyone") streamed,
// a few at a time. Connections are accepted and read by one polling thread
// (http_front.h) until their header block is whole, so an idle or slowly
// trickling socket never holds a serving thread, one address holds a few
// connections at most, and a request's header has a deadline and a size.
//
// start() binds and serves until the object is destroyed; thread-safe.

#include "net/page/http_front.h"
#include "net/page/hub_address.h"
#include "net/page/page_feed.h"

#include <memory>

namespace crowdtrain::page {

struct PageOptions {
    HttpAddress address; // port 0: any free port
    std::string hubLink; // shown on every project page
    double requestsPerSecond = 10; // per client address, steady
    double burst = 60; // per client address, at once (a page load is about 7)
    int threads = 8;
    int maxDownloads = 4; // checkpoint files streamed at once
    int writeTimeoutMs = 10000; // per wait on a slow reader
    FrontLimits front; // connections per address and in all, the header's deadline and size
};

class PageServer {
public:
    static Result<std::unique_ptr<PageServer>> start(PageOptions options, std::shared_ptr<const PageFeed> feed);
    ~PageServer();

    uint16_t port() const;
    std::string url() const; // http://HOST:PORT/ as bound

private:
    struct Impl;
    explicit PageServer(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> m_impl;
};

} // namespace crowdtrain::page
