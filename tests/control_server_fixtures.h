#pragma once

// Shared by the control-API socket tests (tst_control_api, tst_control_dir):
// a ControlServer with a small demo handler on its own thread, and a
// connected client.

#include "net/control/control_client.h"
#include "net/control/control_server.h"

#include <QTemporaryDir>
#include <QTest>

#include <filesystem>
#include <future>
#include <memory>
#include <stdexcept>
#include <thread>

namespace crowdtrain::testing {

using namespace crowdtrain::control;
namespace fs = std::filesystem;

// echo, fail, throw, not_a_map, nothing; anything else is unknown_type.
inline Result<Value> demoHandler(const Request& request)
{
    if (request.type == "echo")
        return request.body;
    if (request.type == "fail")
        return Error::make("unknown_project", "no project named " + request.body["name"].toString());
    if (request.type == "throw")
        throw std::runtime_error("the handler exploded");
    if (request.type == "not_a_map")
        return Value(42);
    if (request.type == "nothing")
        return Value();
    return Error::make("unknown_type", "no request type \"" + request.type + "\"");
}

// A ControlServer serving on its own thread; stopped and joined when it
// goes out of scope.
class ServerThread {
public:
    explicit ServerThread(const fs::path& dir, Handler handler = demoHandler)
    {
        start(ControlServer::open(dir, std::move(handler)));
    }
    ServerThread(const fs::path& dir, AsyncHandler handler) { start(ControlServer::open(dir, std::move(handler))); }
    void start(Result<std::unique_ptr<ControlServer>> server)
    {
        if (!server)
            qFatal("%s", server.error().message.c_str());
        m_server = std::move(*server);
        m_finished = m_done.get_future();
        m_thread = std::thread([this] {
            m_runStatus = m_server->run();
            m_done.set_value();
        });
    }
    ~ServerThread()
    {
        m_server->stop();
        m_thread.join();
    }

    ControlServer& server() { return *m_server; }
    // Asks run() to return and waits for it, at most `limit`.
    bool stopWithin(std::chrono::milliseconds limit)
    {
        m_server->stop();
        return m_finished.wait_for(limit) == std::future_status::ready;
    }

private:
    std::unique_ptr<ControlServer> m_server;
    std::promise<void> m_done;
    Status m_runStatus = Status::success();
    std::future<void> m_finished;
    std::thread m_thread;
};

inline std::unique_ptr<ControlClient> connectClient(const fs::path& dir)
{
    auto client = ControlClient::connect(dir);
    if (!client)
        qFatal("%s", client.error().message.c_str());
    return std::move(*client);
}

// Fresh control folder paths (not created), one after another, under one
// temporary folder.
class FreshDirs {
public:
    bool valid() const { return m_temp.isValid(); }
    fs::path next() { return fs::path(m_temp.path().toStdString()) / ("ctl" + std::to_string(++m_count)); }

private:
    QTemporaryDir m_temp;
    int m_count = 0;
};

} // namespace crowdtrain::testing
