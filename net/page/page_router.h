#pragma once

// cpp-httplib's routing for requests the accept loop (http_front.h) read
// whole: answer() runs on a worker thread, reads only the bytes the front
// already holds (a body that has not arrived is not waited for: the page is
// read-only), writes the answer with a deadline, and closes the socket.
// Thread-safe once the routes are set.

#include "net/page/http_front.h"

#include <httplib.h>

namespace crowdtrain::page {

class PageRouter : public httplib::Server {
public:
    PageRouter();

    // One request, then the socket closes; `writeTimeoutMs` bounds each
    // wait for a slow reader.
    void answer(ReadyRequest request, int writeTimeoutMs);
};

} // namespace crowdtrain::page
