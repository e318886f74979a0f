#pragma once

// Turns the hub a request or a download names ("demo" or a hub link) into a
// link to call. resolve() starts the built-in demo hub when it is not
// running (up to two minutes, with no daemon lock held) and follows it
// under the label "demo"; current() never starts anything (the checkpoint
// downloads, which retry). Thread-safe.

#include "net/daemon/demo_hub.h"
#include "net/daemon/hub_directory.h"

#include <functional>
#include <memory>
#include <mutex>
#include <optional>

namespace crowdtrain::daemon {

class HubResolver {
public:
    // `started` is called after the demo hub (re)started.
    HubResolver(HubDirectory& hubs, DemoOptions demo, std::function<void()> started);

    Result<HubLink> resolve(const std::string& hub);
    Result<HubLink> current(const std::string& hub) const;

private:
    HubDirectory& m_hubs;
    DemoOptions m_options;
    std::function<void()> m_started;
    std::mutex m_demoMutex; // guards m_demo: held while the demo hub starts
    std::unique_ptr<DemoHub> m_demo;
    mutable std::mutex m_linkMutex; // guards m_link only
    std::optional<HubLink> m_link; // the running demo hub's link
};

} // namespace crowdtrain::daemon
