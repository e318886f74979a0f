// Protocol version 1 messages: every message round-trips; every field that is
// missing, of the wrong type or oversized is "malformed" naming the field;
// hostile bytes never crash the decoders.
#include "net/wire/messages.h"

#include <QTest>

#include <functional>
#include <random>

using namespace crowdtrain;
using namespace crowdtrain::net;

namespace {

const std::string kSha(64, 'a');
const std::string kInfoHash(40, 'b');
const std::string kKey = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7";

ProjectInfo sampleProject()
{
    return {"tiny-shakespeare", "Characters of Shakespeare", {2, 2, 32, 32, 65}, "int8", 12, 11, 123456, 3, 1.75, 27904,
        1000000, "CC-BY-4.0", "participants", 10,
        {{"tokenizer.json", 1234, kSha, "tokenizer/tokenizer.json", std::nullopt}}};
}

CheckpointInfo sampleCheckpoint()
{
    const TorrentRef torrent{
        kInfoHash, kSha, "magnet:?xt=urn:btih:" + kInfoHash, "torrent/checkpoint/round-40/model.safetensors"};
    return {40, 40, 999, 1.5, 1700000000000,
        {{"model.safetensors", 4096, kSha, "checkpoint/40/model.safetensors", torrent}},
        {{"NVIDIA GeForce RTX 4090, 24 GiB", 2, 900}, {"CPU", 1, 99}}};
}

JoinReply sampleJoin()
{
    JoinReply r;
    r.session = "s-1";
    r.project = sampleProject();
    r.manifest = {{"wte", {65, 32}}, {"ln_f.bias", {32}}};
    r.manifestSha256 = kSha;
    r.version = 11;
    r.stateResource = "state/11";
    r.stateSha256 = kSha;
    r.stateBytes = 4 * (65 * 32 + 32);
    r.chunkBytes = 1 << 20;
    r.codec = "int8";
    r.inner = {100, 8, 32, 6e-4, 6e-5, 10, 2000, 0.9, 0.95, 0.1, 1.0};
    r.heartbeatIntervalMs = 5000;
    r.heartbeatLiveness = 3;
    r.eventsPort = 7401;
    r.init = SeedInit{1337, kSha};
    return r;
}

Task sampleTask()
{
    return {7, 12, 11, {{"train_000001.bin", 0, 25601}, {"train_000002.bin", 10, 20}}, 100, 600000};
}

SubmitRequest sampleSubmit()
{
    return {"tiny-shakespeare", "s-1", 7, 12, 11, 25601, 1234, 2.5, "int8", 1000, payloadBytes("int8", 1000), 1, kSha};
}

ResourceDescription sampleDescription()
{
    return {"state/11", 2500, 1000, 3, kSha, {kSha, kSha, kSha}};
}

// ---- tree surgery on a decoded message, for the field tests ----

struct Step {
    std::string key; // empty: array element 0
};
using Path = std::vector<Step>;

std::string pathText(const Path& path)
{
    std::string text = "body";
    for (const Step& step : path)
        text += step.key.empty() ? "[0]" : "." + step.key;
    return text;
}

void collectPaths(const msgpack::object& o, Path& path, std::vector<Path>& out)
{
    if (o.type == msgpack::type::MAP) {
        for (uint32_t i = 0; i < o.via.map.size; ++i) {
            path.push_back({o.via.map.ptr[i].key.as<std::string>()});
            out.push_back(path);
            collectPaths(o.via.map.ptr[i].val, path, out);
            path.pop_back();
        }
    } else if (o.type == msgpack::type::ARRAY && o.via.array.size > 0) {
        path.push_back({});
        out.push_back(path);
        collectPaths(o.via.array.ptr[0], path, out);
        path.pop_back();
    }
}

enum class Mutation { Remove, WrongType, Oversize };

// A copy of `o` with the value at `path` changed; `applies` is false when the
// mutation does not fit the value (only strs are oversized, only keys removed).
msgpack::object mutated(const msgpack::object& o, const Path& path, std::size_t depth, Mutation mutation,
    msgpack::zone& zone, bool& applies)
{
    if (depth == path.size()) {
        if (mutation == Mutation::Oversize) {
            applies = o.type == msgpack::type::STR;
            return msgpack::object(std::string(5000, 'a'), zone);
        }
        if (o.type == msgpack::type::STR)
            return msgpack::object(uint64_t(7));
        if (o.type == msgpack::type::POSITIVE_INTEGER)
            return msgpack::object(1.5);
        return msgpack::object(std::string("x"), zone);
    }
    msgpack::object copy = o;
    const Step& step = path[depth];
    if (step.key.empty()) {
        auto* elements = static_cast<msgpack::object*>(zone.allocate_align(sizeof(msgpack::object) * o.via.array.size));
        std::copy(o.via.array.ptr, o.via.array.ptr + o.via.array.size, elements);
        if (mutation == Mutation::Remove && depth + 1 == path.size())
            applies = false;
        elements[0] = mutated(o.via.array.ptr[0], path, depth + 1, mutation, zone, applies);
        copy.via.array.ptr = elements;
        return copy;
    }
    auto* entries = static_cast<msgpack::object_kv*>(zone.allocate_align(sizeof(msgpack::object_kv) * o.via.map.size));
    uint32_t count = 0;
    for (uint32_t i = 0; i < o.via.map.size; ++i) {
        const msgpack::object_kv& kv = o.via.map.ptr[i];
        if (kv.key.as<std::string>() != step.key) {
            entries[count++] = kv;
        } else if (!(mutation == Mutation::Remove && depth + 1 == path.size())) {
            entries[count] = kv;
            entries[count++].val = mutated(kv.val, path, depth + 1, mutation, zone, applies);
        }
    }
    copy.via.map.ptr = entries;
    copy.via.map.size = count;
    return copy;
}

std::string repack(std::string_view type, uint64_t id, const msgpack::object& body, bool isRequest)
{
    msgpack::sbuffer buffer;
    msgpack::packer<msgpack::sbuffer> packer(buffer);
    packer.pack_map(isRequest ? 4 : 4);
    packer.pack(std::string("v")).pack(uint64_t(1));
    packer.pack(std::string("type")).pack(std::string(type));
    packer.pack(std::string("id")).pack(id);
    packer.pack(std::string("body")).pack(body);
    return std::string(buffer.data(), buffer.size());
}

// Round trip plus every field mutation of one message. `optional` lists the
// paths that may be left out.
template <typename M> void checkMessage(const M& sample, bool isRequest, const std::set<std::string>& optional = {})
{
    QVERIFY(isRequestType(M::kType));
    const std::string bytes = isRequest ? encodeRequest(sample, 42) : encodeReply(sample, 42);
    QVERIFY(bytes.size() <= kMaxRequestBytes);
    auto decoded = isRequest ? decodeRequest<M>(bytes) : decodeReply<M>(bytes);
    if (!decoded)
        QFAIL(decoded.error().message.c_str());
    QVERIFY(*decoded == sample);

    auto envelope = decodeEnvelope(bytes, isRequest ? EnvelopeKind::Request : EnvelopeKind::Reply);
    QVERIFY(envelope.ok());
    QCOMPARE(envelope->id, uint64_t(42));
    std::vector<Path> paths;
    Path path;
    collectPaths(*envelope->body, path, paths);
    for (const Path& target : paths) {
        for (Mutation mutation : {Mutation::Remove, Mutation::WrongType, Mutation::Oversize}) {
            msgpack::zone zone;
            bool applies = true;
            const msgpack::object body = mutated(*envelope->body, target, 0, mutation, zone, applies);
            if (!applies)
                continue;
            const std::string name = pathText(target);
            const std::string changed = repack(M::kType, 42, body, isRequest);
            auto result = isRequest ? decodeRequest<M>(changed) : decodeReply<M>(changed);
            if (mutation == Mutation::Remove && optional.count(name)) {
                QVERIFY2(result.ok(), name.c_str());
                continue;
            }
            const std::string what = std::string(M::kType) + " " + name + " mutation " + std::to_string(int(mutation))
                + ": " + (result ? std::string("accepted") : result.error().message);
            QVERIFY2(!result.ok(), what.c_str());
            QVERIFY2(result.error().code == "malformed", what.c_str());
            QVERIFY2(result.error().message.rfind(name + ":", 0) == 0, what.c_str());
        }
    }
}

std::string packed(const std::function<void(msgpack::packer<msgpack::sbuffer>&)>& write)
{
    msgpack::sbuffer buffer;
    msgpack::packer<msgpack::sbuffer> packer(buffer);
    write(packer);
    return std::string(buffer.data(), buffer.size());
}

// Tries every decoder on bytes; only the absence of crashes matters.
void decodeEverything(std::string_view bytes)
{
    auto request = decodeEnvelope(bytes, EnvelopeKind::Request);
    if (request) {
        (void)decodeBody<JoinRequest>(*request);
        (void)decodeBody<SubmitRequest>(*request);
        (void)decodeBody<UploadChunkRequest>(*request);
        (void)decodeBody<FetchRequest>(*request);
        (void)decodeBody<MetricsRequest>(*request);
    }
    (void)decodeReply<JoinReply>(bytes);
    (void)decodeReply<ListProjectsReply>(bytes);
    (void)decodeReply<GetTaskReply>(bytes);
    (void)decodeReply<ResourceDescription>(bytes);
    (void)decodeReply<ListCheckpointsReply>(bytes);
    (void)decodeReply<LeaderboardReply>(bytes);
    (void)bestEffortRequestId(bytes);
    (void)decodeEventFrames("p.round_closed", bytes);
}

} // namespace

class TestProtocol : public QObject {
    Q_OBJECT

private slots:
    void catalogAndSession()
    {
        checkMessage(ListProjectsRequest{}, true);
        checkMessage(ListProjectsReply{{sampleProject()}}, false,
            {"body.projects[0].val_loss", "body.projects[0].parameters", "body.projects[0].token_goal",
                "body.projects[0].license", "body.projects[0].checkpoint_access", "body.projects[0].newest_checkpoint",
                "body.projects[0].tokenizer"});
        checkMessage(JoinRequest{"tiny-shakespeare", "Ada", "0.1.0", "NVIDIA RTX 4090"}, true);
        checkMessage(sampleJoin(), false,
            {"body.project.val_loss", "body.inner.lr_decay_iters", "body.events_port", "body.project.parameters",
                "body.project.token_goal", "body.project.license", "body.project.checkpoint_access",
                "body.project.newest_checkpoint", "body.project.tokenizer", "body.init"});
        // The state seeded in the hub's swarm too.
        JoinReply seeded = sampleJoin();
        seeded.stateTorrent = TorrentRef{kInfoHash, kSha, "magnet:?xt=urn:btih:" + kInfoHash, "torrent/state-v11"};
        checkMessage(seeded, false,
            {"body.project.val_loss", "body.inner.lr_decay_iters", "body.events_port", "body.project.parameters",
                "body.project.token_goal", "body.project.license", "body.project.checkpoint_access",
                "body.project.newest_checkpoint", "body.project.tokenizer", "body.init", "body.state_torrent"});
        // A sparse project's settings; update_bits may be left out (then 8).
        JoinReply sparse = sampleJoin();
        sparse.codec = "sparse";
        sparse.sparse = SparseSettings{4096, 64, 0.8, 4};
        checkMessage(sparse, false,
            {"body.project.val_loss", "body.inner.lr_decay_iters", "body.events_port", "body.project.parameters",
                "body.project.token_goal", "body.project.license", "body.project.checkpoint_access",
                "body.project.newest_checkpoint", "body.project.tokenizer", "body.init", "body.sparse.update_bits"});
        checkMessage(HeartbeatRequest{"tiny-shakespeare", "s-1", 11}, true);
        checkMessage(HeartbeatReply{11, 12, "train", true}, false, {"body.wrap_up"});
        checkMessage(LeaveRequest{"tiny-shakespeare", "s-1"}, true);
        checkMessage(LeaveReply{}, false);
        checkMessage(GetTaskRequest{"tiny-shakespeare", "s-1", 11}, true);
        checkMessage(GetTaskReply{sampleTask(), 0}, false);
        checkMessage(GetTaskReply{std::nullopt, 2000}, false);
    }

    void submissionAndUpdates()
    {
        checkMessage(UploadChunkRequest{"tiny-shakespeare", "s-1", 7, 0, std::string(1000, '\x01')}, true);
        checkMessage(UploadChunkReply{7, 1, 1000}, false);
        checkMessage(sampleSubmit(), true);
        checkMessage(SubmitReply{7, 12, 11}, false);
        checkMessage(GetUpdateRequest{"tiny-shakespeare", 10}, true);
        checkMessage(GetUpdateReply{10, 11, "int8", 1000, "update/10", payloadBytes("int8", 1000), kSha, kSha}, false);
    }

    void resources()
    {
        checkMessage(DescribeRequest{"tiny-shakespeare", "state/11"}, true);
        checkMessage(sampleDescription(), false);
        checkMessage(FetchRequest{"tiny-shakespeare", "state/11", 2}, true);
        checkMessage(FetchReply{"state/11", 2, std::string(500, '\0')}, false);
        QCOMPARE(sampleDescription().chunkLength(2), uint64_t(500));
        QCOMPARE(sampleDescription().chunkLength(3), uint64_t(0));
        QCOMPARE(chunkCountFor(0, 10), uint64_t(0));
        QCOMPARE(chunkCountFor(10, 10), uint64_t(1));
        QCOMPARE(chunkCountFor(11, 10), uint64_t(2));
        checkMessage(SwarmPeersRequest{"tiny-shakespeare", kInfoHash, 6881, false}, true);
        checkMessage(SwarmPeersReply{{{"", 6881, true}, {"192.0.2.7", 51413, false}}}, false);
    }

    void statistics()
    {
        checkMessage(ListCheckpointsRequest{"tiny-shakespeare"}, true);
        checkMessage(ListCheckpointsReply{{sampleCheckpoint()}}, false,
            {"body.checkpoints[0].val_loss", "body.checkpoints[0].files[0].torrent", "body.checkpoints[0].devices"});
        checkMessage(MetricsRequest{"tiny-shakespeare", 5, 100}, true);
        checkMessage(MetricsReply{{{6, 1000, 2.0, 2.1, 4, 1700000000000}}}, false,
            {"body.rows[0].train_loss", "body.rows[0].val_loss"});
        checkMessage(LeaderboardRequest{"tiny-shakespeare", 10}, true);
        checkMessage(LeaderboardReply{{{"Ada", kKey, 5000, 3, 1, 12.5, "CPU"}}}, false, {"body.rows[0].device"});
        checkMessage(MyStatsRequest{"tiny-shakespeare"}, true);
        checkMessage(MyStatsReply{{"Ada", kKey, 5000, 3, 1, 12.5, "CPU"}, 2, 9, 100000}, false, {"body.stats.device"});
    }

    void events()
    {
        const RoundClosedEvent closed{12, 12, 2.5, std::nullopt, 51202, 2, 1, 3};
        EventFrames frames = encodeEvent("tiny-shakespeare", closed);
        QCOMPARE(frames.topic, std::string("tiny-shakespeare.round_closed"));
        auto decoded = decodeEventFrames(frames.topic, frames.body);
        QVERIFY(decoded.ok());
        QCOMPARE(decoded->project, std::string("tiny-shakespeare"));
        auto event = decodeEvent<RoundClosedEvent>(*decoded);
        QVERIFY(event.ok());
        QVERIFY(*event == closed);

        frames = encodeEvent("tiny-shakespeare", CheckpointPublishedEvent{sampleCheckpoint()});
        decoded = decodeEventFrames(frames.topic, frames.body);
        QVERIFY(decoded.ok());
        auto published = decodeEvent<CheckpointPublishedEvent>(*decoded);
        QVERIFY(published.ok());
        QVERIFY(published->checkpoint == sampleCheckpoint());

        const RoundWrapUpEvent wrapUp{12, 11};
        frames = encodeEvent("tiny-shakespeare", wrapUp);
        QCOMPARE(frames.topic, std::string("tiny-shakespeare.round_wrap_up"));
        decoded = decodeEventFrames(frames.topic, frames.body);
        QVERIFY(decoded.ok());
        QVERIFY(*decodeEvent<RoundWrapUpEvent>(*decoded) == wrapUp);
        frames = encodeEvent("tiny-shakespeare", RoundWrapUpEvent{12, 12}); // version must be round - 1
        QCOMPARE(decodeEvent<RoundWrapUpEvent>(*decodeEventFrames(frames.topic, frames.body)).error().code,
            std::string("malformed"));
        frames = encodeEvent("tiny-shakespeare", VersionPublishedEvent{12});
        decoded = decodeEventFrames(frames.topic, frames.body);
        QVERIFY(decoded.ok());
        QCOMPARE(decodeEvent<VersionPublishedEvent>(*decoded)->version, uint64_t(12));
        frames = encodeEvent("tiny-shakespeare", CheckpointPublishedEvent{sampleCheckpoint()});

        auto mismatched = decodeEventFrames("tiny-shakespeare.round_closed", frames.body);
        QVERIFY(!mismatched.ok());
        QCOMPARE(mismatched.error().code, std::string("malformed"));
        QVERIFY(!decodeEventFrames("no-dot", frames.body).ok());
    }

    void relationsBetweenFields_data()
    {
        QTest::addColumn<QByteArray>("bytes");
        QTest::addColumn<QString>("field");
        auto row = [](const char* name, const std::string& bytes, const char* field) {
            QTest::newRow(name) << QByteArray::fromStdString(bytes) << QString::fromLatin1(field);
        };
        SubmitRequest submit = sampleSubmit();
        submit.totalBytes += 1;
        row("submit size disagrees with codec", encodeRequest(submit, 1), "body.total_bytes");
        submit = sampleSubmit();
        submit.codec = "int4";
        row("unknown codec", encodeRequest(submit, 1), "body.codec");
        submit = sampleSubmit();
        submit.sha256 = std::string(64, 'G');
        row("sha256 not hex", encodeRequest(submit, 1), "body.sha256");
        ResourceDescription description = sampleDescription();
        description.chunkCount = 4;
        row("chunk count disagrees with size", encodeReply(description, 1), "body.chunk_count");
        description = sampleDescription();
        description.chunkSha256.pop_back();
        row("chunk hashes missing", encodeReply(description, 1), "body.chunk_sha256");
        JoinReply join = sampleJoin();
        join.manifest[0].shape = {1, 2, 3, 4, 5, 6, 7, 8, 9};
        row("tensor rank over cap", encodeReply(join, 1), "body.manifest[0].shape");
        join = sampleJoin();
        join.stateBytes += 4;
        row("state size disagrees with manifest", encodeReply(join, 1), "body.state_bytes");
        join = sampleJoin();
        join.project.model.nHead = 3;
        row("n_embd not a multiple of n_head", encodeReply(join, 1), "body.project.model.n_embd");
        join = sampleJoin();
        join.codec = "sparse";
        join.sparse = SparseSettings{4096, 64, 0.8, 6};
        row("sparse update bits neither 4 nor 8", encodeReply(join, 1), "body.sparse.update_bits");
        join = sampleJoin();
        join.heartbeatIntervalMs = 1;
        row("heartbeat interval below range", encodeReply(join, 1), "body.heartbeat_interval_ms");
        Task task = sampleTask();
        task.shards.assign(kMaxShardRanges + 1, task.shards[0]);
        row("too many shard ranges", encodeReply(GetTaskReply{task, 0}, 1), "body.task.pieces");
        task = sampleTask();
        task.shards[1].endToken = task.shards[1].beginToken;
        row("empty shard range", encodeReply(GetTaskReply{task, 0}, 1), "body.task.pieces");
        // Bodies the writer cannot make: a piece naming a file not listed, a
        // broken triple.
        auto taskWith = [](std::vector<uint64_t> pieces) {
            ArrayWriter files;
            files.str("train_000001.bin");
            ArrayWriter flat;
            for (const uint64_t v : pieces)
                flat.u64(v);
            MapWriter t;
            t.u64("task_id", 7).u64("round", 12).u64("version", 11).array("files", files).array("pieces", flat);
            t.u64("inner_steps", 100).u64("deadline_ms", 600000);
            MapWriter body;
            body.str("status", "assigned").map("task", t);
            return encodeEnvelope("get_task", 1, body, EnvelopeKind::Reply);
        };
        QVERIFY(decodeReply<GetTaskReply>(taskWith({0, 0, 10}))); // the helper's body is well formed
        row("piece names a missing file", taskWith({0, 0, 10, 1, 0, 10}), "body.task.pieces");
        row("pieces not triples", taskWith({0, 0, 10, 0}), "body.task.pieces");
        row("project name with capitals", encodeRequest(JoinRequest{"Tiny", "", "1", ""}, 1), "body.project");
        row("display name not UTF-8", encodeRequest(JoinRequest{"tiny", "\xff\xfe", "1", ""}, 1), "body.display_name");
        row("overlong UTF-8", encodeRequest(JoinRequest{"tiny", "\xc0\xaf", "1", ""}, 1), "body.display_name");
        row("surrogate in UTF-8", encodeRequest(JoinRequest{"tiny", "\xed\xa0\x80", "1", ""}, 1), "body.display_name");
        row("device with a control character", encodeRequest(JoinRequest{"tiny", "Ada", "1", "GPU\x1b[2J"}, 1),
            "body.device");
        row("device with a bidi override",
            encodeRequest(JoinRequest{"tiny", "Ada", "1",
                              "\xe2\x80\xae"
                              "UPC"},
                1),
            "body.device");
        row("metrics limit zero", encodeRequest(MetricsRequest{"tiny", 0, 0}, 1), "body.limit");
        row("leaderboard limit over cap", encodeRequest(LeaderboardRequest{"tiny", kMaxLeaderboardRows + 1}, 1),
            "body.limit");
        row("empty upload chunk", encodeRequest(UploadChunkRequest{"tiny", "s", 1, 0, ""}, 1), "body.data");
        row("public key not Z85", encodeReply(LeaderboardReply{{{"Ada", std::string(40, '~'), 1, 1, 0, 1, ""}}}, 1),
            "body.rows[0].public_key");
        row("info-hash in capitals",
            encodeRequest(SwarmPeersRequest{"tiny", "ABCDEF0123456789ABCDEF0123456789ABCDEF01", 1, false}, 1),
            "body.info_hash");
        row("info-hash too short", encodeRequest(SwarmPeersRequest{"tiny", "abcdef", 1, false}, 1), "body.info_hash");
        row("swarm peer on port 0", encodeReply(SwarmPeersReply{{{"192.0.2.7", 0, false}}}, 1), "body.peers[0].port");
        row("swarm peers over the cap",
            encodeReply(SwarmPeersReply{std::vector<SwarmPeer>(kMaxSwarmPeers + 1, {"192.0.2.7", 1, false})}, 1),
            "body.peers");
        FileInfo file = sampleCheckpoint().files[0];
        file.name = "../../etc/passwd";
        row("file name with folders", encodeReply(ListCheckpointsReply{{{1, 1, 1, {}, 1, {file}, {}}}}, 1),
            "body.checkpoints[0].files[0].name");
        row("update skips a version", encodeReply(GetUpdateReply{10, 12, "int8", 1000, "u", 1016, kSha, kSha}, 1),
            "body.to_version");
        const std::string nan = packed([](auto& p) {
            p.pack_map(4);
            p.pack(std::string("v")).pack(1);
            p.pack(std::string("type")).pack(std::string("heartbeat"));
            p.pack(std::string("id")).pack(1);
            p.pack(std::string("body")).pack_map(3);
            p.pack(std::string("version")).pack(1);
            p.pack(std::string("round")).pack(std::numeric_limits<double>::quiet_NaN());
            p.pack(std::string("state")).pack(std::string("wait"));
        });
        row("NaN where an integer belongs", nan, "body.round");
        const std::string duplicate = packed([](auto& p) {
            p.pack_map(4);
            p.pack(std::string("v")).pack(1);
            p.pack(std::string("type")).pack(std::string("heartbeat"));
            p.pack(std::string("id")).pack(1);
            p.pack(std::string("body")).pack_map(4);
            p.pack(std::string("version")).pack(1);
            p.pack(std::string("round")).pack(1);
            p.pack(std::string("state")).pack(std::string("wait"));
            p.pack(std::string("round")).pack(2);
        });
        row("duplicate key", duplicate, "body");
    }

    void relationsBetweenFields()
    {
        QFETCH(QByteArray, bytes);
        QFETCH(QString, field);
        const std::string_view view(bytes.constData(), std::size_t(bytes.size()));
        auto envelope = decodeEnvelope(view, EnvelopeKind::Reply);
        Error error;
        const std::string type = envelope ? envelope->type : std::string();
        auto take = [&](auto result) {
            QVERIFY(!result.ok());
            error = result.error();
        };
        if (!envelope)
            error = envelope.error(); // a body with a duplicate key fails in the frame
        else if (type == "submit")
            take(decodeBody<SubmitRequest>(*envelope));
        else if (type == "describe")
            take(decodeBody<ResourceDescription>(*envelope));
        else if (type == "join" && envelope->body->via.map.size > 4)
            take(decodeBody<JoinReply>(*envelope));
        else if (type == "join")
            take(decodeBody<JoinRequest>(*envelope));
        else if (type == "get_task")
            take(decodeBody<GetTaskReply>(*envelope));
        else if (type == "metrics")
            take(decodeBody<MetricsRequest>(*envelope));
        else if (type == "leaderboard" && envelope->body->via.map.ptr[0].val.type == msgpack::type::STR)
            take(decodeBody<LeaderboardRequest>(*envelope));
        else if (type == "leaderboard")
            take(decodeBody<LeaderboardReply>(*envelope));
        else if (type == "upload_chunk")
            take(decodeBody<UploadChunkRequest>(*envelope));
        else if (type == "list_checkpoints")
            take(decodeBody<ListCheckpointsReply>(*envelope));
        else if (type == "get_update")
            take(decodeBody<GetUpdateReply>(*envelope));
        else if (type == "heartbeat")
            take(decodeBody<HeartbeatReply>(*envelope));
        else if (type == "swarm_peers" && envelope->body->via.map.size == 4)
            take(decodeBody<SwarmPeersRequest>(*envelope));
        else if (type == "swarm_peers")
            take(decodeBody<SwarmPeersReply>(*envelope));
        else
            QFAIL(type.c_str());
        QCOMPARE(QString::fromStdString(error.code), QStringLiteral("malformed"));
        QVERIFY2(QString::fromStdString(error.message).startsWith(field + QLatin1Char(':')), error.message.c_str());
    }

    void envelopeErrors_data()
    {
        QTest::addColumn<QByteArray>("bytes");
        QTest::addColumn<QString>("code");
        QTest::addColumn<QString>("field");
        auto envelope = [](auto version, const std::string& type, bool withId, bool withBody) {
            return QByteArray::fromStdString(packed([&](auto& p) {
                p.pack_map(2 + (withId ? 1 : 0) + (withBody ? 1 : 0));
                p.pack(std::string("v")).pack(version);
                p.pack(std::string("type")).pack(type);
                if (withId)
                    p.pack(std::string("id")).pack(9);
                if (withBody)
                    p.pack(std::string("body")).pack_map(0);
            }));
        };
        QTest::newRow("version 2") << envelope(2, "list_projects", true, true) << "unsupported_version"
                                   << "";
        QTest::newRow("version as str") << envelope(std::string("1"), "list_projects", true, true) << "malformed"
                                        << "v";
        QTest::newRow("unknown type") << envelope(1, "mine_bitcoin", true, true) << "unknown_type"
                                      << "";
        QTest::newRow("no id") << envelope(1, "list_projects", false, true) << "malformed"
                               << "id";
        QTest::newRow("no body") << envelope(1, "list_projects", true, false) << "malformed"
                                 << "body";
        const std::string noVersion = packed([](auto& p) {
            p.pack_map(1);
            p.pack(std::string("type")).pack(std::string("list_projects"));
        });
        QTest::newRow("no version") << QByteArray::fromStdString(noVersion) << "malformed"
                                    << "v";
        QTest::newRow("not a map") << QByteArray::fromStdString(packed([](auto& p) { p.pack(5); })) << "malformed"
                                   << "message";
        QTest::newRow("over 8 MiB") << QByteArray(int(kMaxRequestBytes) + 1, 'x') << "too_large"
                                    << "";
        QTest::newRow("truncated") << envelope(1, "list_projects", true, true).chopped(1) << "malformed"
                                   << "";
        QTest::newRow("garbage") << QByteArray("\xc1\xc1\xc1", 3) << "malformed"
                                 << "";
    }

    void envelopeErrors()
    {
        QFETCH(QByteArray, bytes);
        QFETCH(QString, code);
        QFETCH(QString, field);
        auto envelope
            = decodeEnvelope(std::string_view(bytes.constData(), std::size_t(bytes.size())), EnvelopeKind::Request);
        QVERIFY(!envelope.ok());
        QCOMPARE(QString::fromStdString(envelope.error().code), code);
        if (!field.isEmpty())
            QVERIFY2(QString::fromStdString(envelope.error().message).startsWith(field + QLatin1Char(':')),
                envelope.error().message.c_str());
    }

    void errorReplies()
    {
        const std::string reply = encodeErrorReply(77, Error::make("stale_version", "round 12 closed"));
        auto decoded = decodeReply<SubmitReply>(reply);
        QVERIFY(!decoded.ok());
        QCOMPARE(decoded.error().code, std::string("stale_version"));
        QCOMPARE(decoded.error().message, std::string("round 12 closed"));
        // Long messages are cut at a UTF-8 boundary, not rejected.
        const std::string longReply = encodeErrorReply(1, Error::make("x", std::string(3000, '\xc3') + "\xa9"));
        QVERIFY(decodeEnvelope(longReply, EnvelopeKind::Reply).ok());
        // A reply of another type is not taken for the one asked for.
        auto wrong = decodeReply<SubmitReply>(encodeReply(LeaveReply{}, 1));
        QVERIFY(!wrong.ok());
        QCOMPARE(wrong.error().code, std::string("malformed"));
        QCOMPARE(bestEffortRequestId(encodeRequest(LeaveRequest{"p", "s"}, 31)), uint64_t(31));
        QCOMPARE(bestEffortRequestId("garbage"), uint64_t(0));
    }

    void payloadSizes()
    {
        QCOMPARE(payloadBytes("fp32", 1000), uint64_t(4000));
        QCOMPARE(payloadBytes("fp16", 1000), uint64_t(2000));
        QCOMPARE(payloadBytes("int8", 256), uint64_t(4 + 256));
        QCOMPARE(payloadBytes("int8", 257), uint64_t(8 + 257));
        QCOMPARE(payloadBytes("int4", 257), uint64_t(0));
        QCOMPARE(payloadBytes("fp32", kMaxElements + 1), uint64_t(0));
        QCOMPARE(manifestText({{"wte", {65, 32}}, {"s", {}}}), std::string("wte 65x32\ns scalar\n"));
        QCOMPARE(manifestElements({{"wte", {65, 32}}, {"b", {32}}}), uint64_t(65 * 32 + 32));
        QCOMPARE(manifestElements({{"huge", {1ull << 32, 1ull << 32, 1ull << 32}}}), UINT64_MAX);
    }

    void fuzz()
    {
        std::vector<std::string> seeds = {encodeReply(sampleJoin(), 1), encodeRequest(sampleSubmit(), 2),
            encodeReply(sampleDescription(), 3), encodeReply(ListCheckpointsReply{{sampleCheckpoint()}}, 4),
            encodeReply(GetTaskReply{sampleTask(), 0}, 5),
            encodeEvent("p", RoundClosedEvent{1, 1, 2.0, 2.0, 1, 1, 0, 1}).body,
            encodeRequest(UploadChunkRequest{"p", "s", 1, 0, std::string(300, 'z')}, 6)};
        std::mt19937_64 random(20240520);
        int decodedSomething = 0;
        for (int i = 0; i < 10000; ++i) {
            std::string bytes = seeds[random() % seeds.size()];
            const int edits = 1 + int(random() % 4);
            for (int e = 0; e < edits && !bytes.empty(); ++e) {
                const std::size_t at = random() % bytes.size();
                switch (random() % 5) {
                case 0: // flip a bit
                    bytes[at] = char(bytes[at] ^ (1 << (random() % 8)));
                    break;
                case 1: // random byte
                    bytes[at] = char(random());
                    break;
                case 2: // truncate
                    bytes.resize(at);
                    break;
                case 3: // insert
                    bytes.insert(at, 1, char(random()));
                    break;
                default: // erase a run
                    bytes.erase(at, 1 + random() % 8);
                    break;
                }
            }
            decodeEverything(bytes);
            decodedSomething += decodeEnvelope(bytes, EnvelopeKind::Reply).ok() ? 1 : 0;
        }
        // Pure random bytes too.
        for (int i = 0; i < 2000; ++i) {
            std::string bytes(random() % 64, '\0');
            for (char& c : bytes)
                c = char(random());
            decodeEverything(bytes);
        }
        QVERIFY(decodedSomething > 0); // some mutants still frame correctly and reach the field checks
    }
};

QTEST_GUILESS_MAIN(TestProtocol)
#include "tst_protocol.moc"
