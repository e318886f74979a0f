#pragma once

// A volunteer that speaks the coordinator's protocol directly, for the
// multi-process tests: join, take a task, upload a payload and submit it,
// heartbeat, poll the project. Each call fails the test with the reason
// when the server does not answer as a call of this kind must.

#include "net/transfer/sha256.h"
#include "net/transport/client.h"
#include "net/transport/curve_keys.h"
#include "net/wire/messages.h"

#include <QTest>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace crowdtrain::testing {

struct ProtocolVolunteer {
    std::unique_ptr<net::Client> client;
    net::JoinReply joined;
    std::string key;
    std::string project;
};

inline ProtocolVolunteer joinProject(zmq::context_t& context, const std::string& endpoint, const std::string& serverKey,
    const std::string& project, const std::string& name, std::optional<net::CurveKeyPair> identity = std::nullopt)
{
    auto keys = identity ? Result<net::CurveKeyPair>(*identity) : net::generateKeyPair();
    if (!keys)
        qFatal("no keys");
    ProtocolVolunteer v;
    v.key = keys->publicKey;
    v.project = project;
    auto client = net::Client::connect(context, {endpoint, serverKey, *keys});
    if (!client)
        qFatal("connect: %s", client.error().message.c_str());
    v.client = std::move(*client);
    auto joined = v.client->request<net::JoinReply>(net::JoinRequest{project, name, "test", "CPU"}, 10000);
    if (!joined)
        qFatal("join: %s", joined.error().message.c_str());
    v.joined = *joined;
    return v;
}

inline std::optional<net::Task> askForTask(ProtocolVolunteer& v, uint64_t version)
{
    auto reply = v.client->request<net::GetTaskReply>(net::GetTaskRequest{v.project, v.joined.session, version}, 10000);
    if (!reply)
        qFatal("get_task: %s", reply.error().message.c_str());
    return reply->task;
}

inline void uploadPayload(ProtocolVolunteer& v, const net::Task& t, const std::string& payload)
{
    const uint64_t chunk = v.joined.chunkBytes;
    uint64_t index = 0;
    for (uint64_t at = 0; at < payload.size(); at += chunk, ++index) {
        auto up = v.client->request<net::UploadChunkReply>(
            net::UploadChunkRequest{v.project, v.joined.session, t.taskId, index, payload.substr(at, chunk)});
        if (!up)
            qFatal("upload_chunk: %s", up.error().message.c_str());
    }
}

inline net::SubmitRequest submitRequestFor(
    const ProtocolVolunteer& v, const net::Task& t, const std::string& payload, uint64_t tokens)
{
    const uint64_t chunks = (payload.size() + v.joined.chunkBytes - 1) / v.joined.chunkBytes;
    return net::SubmitRequest{v.project, v.joined.session, t.taskId, t.round, t.version, tokens, 1000, 3.5,
        v.joined.codec, net::manifestElements(v.joined.manifest), payload.size(), chunks, net::sha256Hex(payload)};
}

// Uploads `payload` for the task and submits it with `tweak` applied.
inline Result<net::SubmitReply> uploadAndSubmit(ProtocolVolunteer& v, const net::Task& t, const std::string& payload,
    uint64_t tokens, const std::function<void(net::SubmitRequest&)>& tweak = {})
{
    uploadPayload(v, t, payload);
    net::SubmitRequest s = submitRequestFor(v, t, payload, tokens);
    if (tweak)
        tweak(s);
    return v.client->request<net::SubmitReply>(s, 20000);
}

inline net::HeartbeatReply heartbeatOf(ProtocolVolunteer& v, uint64_t version)
{
    auto hb = v.client->request<net::HeartbeatReply>(net::HeartbeatRequest{v.project, v.joined.session, version});
    if (!hb)
        qFatal("heartbeat: %s", hb.error().message.c_str());
    return *hb;
}

inline std::vector<float> randomDelta(int64_t n, float scale, uint64_t seed)
{
    std::mt19937 rng{static_cast<uint32_t>(seed)};
    std::normal_distribution<float> normal(0.0f, scale);
    std::vector<float> delta(static_cast<std::size_t>(n));
    for (float& x : delta)
        x = normal(rng);
    return delta;
}

// The project's version as list_projects reports it.
inline uint64_t projectVersion(ProtocolVolunteer& v)
{
    auto list = v.client->request<net::ListProjectsReply>(net::ListProjectsRequest{});
    if (!list || list->projects.empty())
        qFatal("list_projects: %s", list ? "no project" : list.error().message.c_str());
    return list->projects[0].version;
}

// Polls `condition` every 20 ms until it holds or `timeoutMs` pass.
inline bool waitFor(const std::function<bool()>& condition, int timeoutMs)
{
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
    while (!condition()) {
        if (std::chrono::steady_clock::now() > until)
            return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
}

} // namespace crowdtrain::testing
