// crowdtrain-worker: the volunteer daemon's command-line face
// (docs/architecture.md, "Processes"). `run` and `demo` start the daemon
// (crowdtrain-daemon, beside this program); every other command is a
// client of the daemon's control API (docs/protocol.md, section 12). This
// program links no libtorch, so a client call returns in milliseconds.
#include "app/args.h"
#include "app/daemon_options.h"
#include "net/control/control_client.h"
#include "net/control/control_names.h"
#include "net/control/control_paths.h"
#include "net/control/setting_keys.h"

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <optional>
#include <set>
#include <signal.h>
#include <stdexcept>
#include <unistd.h>

namespace {

using namespace crowdtrain;
using control::Value;
namespace request = control::request;

const char* kUsage
    = "  crowdtrain-worker run                    start the daemon (one per user) and serve until stopped\n"
      "  crowdtrain-worker demo                   train the local demo project and print progress\n"
      "  crowdtrain-worker status                 what the daemon is doing, in plain words\n"
      "  crowdtrain-worker pause | resume | snooze [SECONDS]\n"
      "  crowdtrain-worker catalog                projects of the followed hubs (and the demo)\n"
      "  crowdtrain-worker follow LINK | unfollow LINK   (LINK: crowdtrain://HOST:PORT/KEY)\n"
      "  crowdtrain-worker join HUB PROJECT       HUB: a hub link, or demo\n"
      "  crowdtrain-worker leave\n"
      "  crowdtrain-worker settings [set KEY VALUE]\n"
      "  crowdtrain-worker metrics | history | contributions | log\n"
      "  crowdtrain-worker checkpoints | download ROUND | cancel ROUND | delete ROUND\n"
      "  crowdtrain-worker generate ROUND PROMPT [--temperature T] [--top-k K] [--max-tokens N]\n"
      "  crowdtrain-worker join ENDPOINT PROJECT --server-key KEY [--data DIR]   one project, no daemon";

int fail(const std::string& message, int code = 1)
{
    std::cerr << "crowdtrain-worker: " << message << "\n";
    return code;
}

// A command-line mistake: the message, exit status 2.
struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

template <typename T> T parseNumber(const std::string& text, const std::string& what)
{
    T value{};
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || error != std::errc() || end != text.data() + text.size())
        throw UsageError(what + " takes a number, not \"" + text + "\"");
    return value;
}

// Whether a daemon holds this control folder although it did not answer:
// its socket file is there and the pid in its lock file is alive.
std::optional<std::string> busyDaemon(const std::filesystem::path& dir)
{
    std::error_code ec;
    if (!std::filesystem::exists(dir / control::kControlSocketName, ec))
        return std::nullopt;
    std::ifstream lock(dir / "daemon.lock");
    long long pid = 0;
    if (!(lock >> pid) || pid <= 0 || (::kill(pid_t(pid), 0) != 0 && errno != EPERM))
        return std::nullopt;
    return std::to_string(pid);
}

constexpr const char* kNoDaemon = "no daemon running (start it with `crowdtrain-worker run` or the Crowdtrain app)";

std::filesystem::path siblingProgram(const char* name)
{
    std::error_code ec;
    const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    const auto beside = self.parent_path() / name;
    if (std::filesystem::exists(beside, ec))
        return beside;
    return self.parent_path().parent_path() / "libexec" / "crowdtrain" / name;
}

// Replaces this process with the daemon's program.
int execDaemon(const std::vector<std::string>& arguments)
{
    const std::string program = siblingProgram("crowdtrain-daemon").string();
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(program.c_str()));
    for (const std::string& a : arguments)
        argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(program.c_str(), argv.data());
    return fail("cannot start " + program + ": " + std::strerror(errno));
}

std::string number(double value, int decimals = 0)
{
    char text[64];
    std::snprintf(text, sizeof text, "%.*f", decimals, value);
    return text;
}

std::string when(int64_t unixMs)
{
    const std::time_t t = std::time_t(unixMs / 1000);
    char text[32];
    std::strftime(text, sizeof text, "%Y-%m-%d %H:%M", std::localtime(&t));
    return text;
}

void printStatus(const Value& s)
{
    std::cout << s["text"].toString() << "\n";
    if (!s["project"].toString().empty())
        std::cout << "project   " << s["project"].toString() << " at "
                  << (s["hub"].toString() == control::kDemoHub ? std::string("the local demo hub")
                                                               : s["hub"].toString())
                  << "\n";
    if (s.has("round")) {
        std::cout << "round     " << s["round"].toUInt() << " (model version " << s["version"].toUInt() << ")\n";
        if (control::parseDaemonState(s["state"].toString()) == control::DaemonState::Training)
            std::cout << "step      " << s["step"].toUInt() << " of " << s["steps"].toUInt() << ", loss "
                      << number(s["loss"].toDouble(), 3) << ", " << number(s["tokens_per_second"].toDouble())
                      << " tokens/s\n";
        std::cout << "work      " << s["accepted"].toUInt() << " tasks accepted, " << s["rejected"].toUInt()
                  << " rejected, " << s["tokens"].toUInt() << " tokens\n";
    }
    std::cout << "device    " << s["device"].toString();
    if (s.has("device_in_use") && s["device_in_use"].toString() != s["device"].toString())
        std::cout << " (training on " << s["device_in_use"].toString() << ")";
    if (s["parallel_mode"].toString() == "data_parallel")
        std::cout << ", data parallel";
    else if (s["parallel_mode"].toString() == "sharded")
        std::cout << ", sharded (ZeRO-3)";
    std::cout << "\n";
    // The memory planner's choice under the device's budget, and why.
    if (s.has("memory_plan"))
        std::cout << "memory    " << s["memory_plan"].toString() << "\n";
    for (const Value& notice : s["notices"].items())
        std::cout << "note      " << notice.toString() << "\n";
}

void printCatalog(const Value& c)
{
    for (const Value& hub : c["hubs"].items()) {
        const bool demo = hub["link"].toString() == control::kDemoHub;
        std::cout << (demo ? std::string("demo hub (this computer)") : hub["link"].toString());
        if (!hub["reachable"].toBool())
            std::cout << "  UNREACHABLE: " << hub["error"].toString()
                      << (hub["last_seen_ms"].isNil() ? std::string(", never seen")
                                                      : ", last seen " + when(hub["last_seen_ms"].toInt()));
        std::cout << "\n";
        for (const Value& p : hub["projects"].items()) {
            const bool joined = c["joined_project"].toString() == p["name"].toString()
                && c["joined_hub"].toString() == hub["link"].toString();
            std::cout << "  " << (joined ? "* " : "  ") << p["name"].toString();
            if (p["parameters"].toUInt())
                std::cout << "  " << number(double(p["parameters"].toUInt()) / 1e6, 2) << "M parameters";
            std::cout << "  " << p["model"]["n_layer"].toUInt() << " layers x " << p["model"]["n_embd"].toUInt();
            if (p["token_goal"].toUInt())
                std::cout << "  "
                          << number(100.0 * double(p["tokens_trained"].toUInt()) / double(p["token_goal"].toUInt()), 1)
                          << "% of " << p["token_goal"].toUInt() << " tokens";
            if (p.has("volunteers_online"))
                std::cout << "  " << p["volunteers_online"].toUInt() << " online";
            if (!p["val_loss"].isNil())
                std::cout << "  val loss " << number(p["val_loss"].toDouble(), 3);
            if (!p["newest_checkpoint"].isNil())
                std::cout << "  checkpoint round " << p["newest_checkpoint"].toUInt();
            std::cout << "\n      " << p["description"].toString() << "\n";
            if (!p["license"].toString().empty())
                std::cout << "      license: " << p["license"].toString()
                          << "; checkpoints: " << p["checkpoint_access"].toString() << "\n";
        }
    }
}

int generate(control::ControlClient& client, app::Args& args)
{
    const auto& p = args.positionals();
    if (p.size() < 3)
        return fail("generate takes ROUND and PROMPT", 2);
    // Subscribe first, so no piece of the text is missed: the daemon's
    // progress events (two a second) show when the subscription is live.
    auto events = control::EventSubscriber::connect(
        client.dir(), {std::string(control::event::kGenerated), std::string(control::event::kProgress)});
    if (!events)
        return fail(events.error().message);
    for (int i = 0; i < 50; ++i)
        if (auto event = (*events)->next(100); event && event->type == control::event::kProgress)
            break;
    Value body = Value::map();
    body.set("round", parseNumber<uint64_t>(p[1], "ROUND")).set("prompt", p[2]);
    body.set("temperature", args.number("temperature"));
    body.set("top_k", int64_t(args.integer("top-k")));
    body.set("max_tokens", int64_t(args.integer("max-tokens")));
    auto started = client.call(control::request::kGenerate, body);
    if (!started)
        return fail(started.error().message);
    const uint64_t id = (*started)["id"].toUInt();
    std::cout << p[2] << std::flush;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(10);
    while (std::chrono::steady_clock::now() < deadline) {
        auto event = (*events)->next(1000);
        if (!event || event->type != control::event::kGenerated || event->body["id"].toUInt() != id)
            continue;
        std::cout << event->body["text"].toString() << std::flush;
        if (event->body["done"].toBool()) {
            std::cout << "\n";
            if (!event->body["error"].toString().empty())
                return fail(event->body["error"].toString());
            return 0;
        }
    }
    return fail("no text came within 10 minutes");
}

// Where a checkpoint's bytes come from and go to (the swarm), in words.
std::string swarmWords(const control::Value& cp)
{
    std::string words;
    if (cp.has("from_peers_bytes"))
        words += "  " + std::to_string(cp["peers"].toInt()) + " peers, "
            + std::to_string(cp["from_peers_bytes"].toUInt() >> 20) + " MiB from peers, "
            + std::to_string(cp["from_hub_bytes"].toUInt() >> 20) + " MiB from the hub";
    if (cp["seeding"].toBool())
        words += "  sharing with " + std::to_string(cp["seed_peers"].toInt()) + " peers, "
            + std::to_string(cp["uploaded_bytes"].toUInt() >> 20) + " MiB sent";
    else if (cp["torrent"].toBool() && cp["state"].toString() == "remote")
        words += "  (peer-to-peer)";
    return words;
}

} // namespace

int runCommand(int argc, char** argv)
{
    app::Args args("crowdtrain-worker", "the Crowdtrain volunteer daemon and its command-line client", kUsage);
    app::declareDaemonOptions(args);
    args.numberOption("temperature", "generate: sampling temperature (0 = greedy)", "0.8");
    args.integerOption("top-k", "generate: sample among the k most likely tokens (0 = all)", "200");
    args.integerOption("max-tokens", "generate: tokens to generate", "200");
    args.flag("json", "print the daemon's answer as JSON");
    if (auto exitCode = args.parse(app::argumentsOf(argc, argv)))
        return *exitCode;
    const auto& p = args.positionals();
    const std::string command = p.empty() ? "status" : p[0];

    // The daemon itself, and the one-project mode, run in crowdtrain-daemon.
    if (command == "run" || command == "demo" || (command == "join" && args.has("server-key"))) {
        std::vector<std::string> forwarded(p.begin(), p.end());
        for (std::string& option : app::givenDaemonOptions(args))
            forwarded.push_back(std::move(option));
        return execDaemon(forwarded);
    }

    // The command line is checked whole before the daemon is asked anything.
    static const std::set<std::string> kCommands
        = {"status", "catalog", "leave", "pause", "resume", "metrics", "contributions", "log", "checkpoints", "history",
            "snooze", "follow", "unfollow", "join", "settings", "download", "cancel", "delete", "generate"};
    if (!kCommands.contains(command))
        return fail("unknown command \"" + command + "\" (see --help)", 2);
    if (command == "snooze" && p.size() > 1)
        (void)parseNumber<int64_t>(p[1], "snooze");
    if ((command == "download" || command == "cancel" || command == "delete") && p.size() == 2)
        (void)parseNumber<uint64_t>(p[1], command);
    if (command == "generate") {
        if (p.size() < 3)
            return fail("generate takes ROUND and PROMPT", 2);
        (void)parseNumber<uint64_t>(p[1], "ROUND");
    }

    auto dir = args.has("control-dir") ? Result<std::filesystem::path>(args.value("control-dir"))
                                       : control::defaultControlDir();
    if (!dir)
        return fail(dir.error().message);
    auto client = control::ControlClient::connect(*dir);
    if (!client) {
        if (client.error().code == control::errc::kNoDaemon)
            return fail(kNoDaemon, 3);
        return fail(client.error().message);
    }
    control::ControlClient& c = **client;
    auto call = [&](std::string_view type, const Value& body = Value::map(), int timeoutMs = 5000) -> int {
        auto reply = c.call(type, body, timeoutMs);
        if (!reply && reply.error().code == control::errc::kNoDaemon) {
            // No answer in time: a daemon that is there but busy is not "no daemon".
            if (const auto pid = busyDaemon(*dir))
                return fail("the daemon (pid " + *pid + ") is running but did not answer \"" + std::string(type)
                        + "\" within " + std::to_string(timeoutMs / 1000) + " s; it is busy, try again",
                    4);
            return fail(kNoDaemon, 3);
        }
        if (!reply)
            return fail(reply.error().message, reply.error().code == control::errc::kBadRequest ? 2 : 1);
        if (args.isSet("json")) {
            std::cout << reply->toJson() << "\n";
            return 0;
        }
        if (type == request::kStatus || type == request::kJoin)
            printStatus(*reply);
        else if (type == request::kCatalog)
            printCatalog(*reply);
        else if (type == request::kLog)
            for (const Value& line : (*reply)["lines"].items())
                std::cout << line.toString() << "\n";
        else if (type == request::kSettingsGet || type == request::kSettingsSet)
            for (const auto& [key, value] : (*reply)["settings"].entries())
                std::cout << key << " = " << value.toJson() << "\n";
        else if (type == request::kCheckpoints) {
            for (const Value& cp : (*reply)["checkpoints"].items())
                std::cout << "round " << cp["round"].toUInt() << "  " << cp["tokens"].toUInt() << " tokens  val "
                          << (cp["val_loss"].isNil() ? std::string("-") : number(cp["val_loss"].toDouble(), 3)) << "  "
                          << number(double(cp["bytes"].toUInt()) / 1e6, 1) << " MB  " << cp["state"].toString()
                          << swarmWords(cp) << (cp.has("folder") ? "  " + cp["folder"].toString() : std::string())
                          << "\n";
        } else if (type == request::kMetrics) {
            for (const Value& row : (*reply)["rows"].items())
                std::cout << "round " << row["round"].toUInt() << "  tokens " << row["tokens"].toUInt() << "  train "
                          << (row["train_loss"].isNil() ? std::string("-") : number(row["train_loss"].toDouble(), 3))
                          << "  val "
                          << (row["val_loss"].isNil() ? std::string("-") : number(row["val_loss"].toDouble(), 3))
                          << "  volunteers " << row["volunteers"].toUInt() << "\n";
        } else if (type == request::kContributions) {
            const Value& r = *reply;
            std::cout << "you: " << r["mine"]["tokens"].toUInt() << " tokens, "
                      << number(r["mine"]["gpu_hours"].toDouble(), 3) << " GPU-hours, "
                      << r["mine"]["rounds_accepted"].toUInt() << " accepted, " << r["mine"]["rounds_rejected"].toUInt()
                      << " rejected, " << number(100 * r["share"].toDouble(), 1) << "% of the project, rank "
                      << r["rank"].toUInt() << " of " << r["contributors"].toUInt() << "\n";
            for (const Value& row : r["leaderboard"].items())
                std::cout << "  "
                          << (row["display_name"].toString().empty() ? "(anonymous)" : row["display_name"].toString())
                          << "  " << row["tokens"].toUInt() << " tokens\n";
        } else
            std::cout << "done\n";
        return 0;
    };
    Value body = Value::map();
    if (command == "status" || command == "catalog" || command == "leave" || command == "pause" || command == "resume"
        || command == "metrics" || command == "contributions" || command == "log" || command == "checkpoints") {
        if (command == "catalog")
            body.set("refresh", true);
        return call(command, body, command == "catalog" ? 15000 : 5000);
    }
    if (command == "history")
        return call(request::kMachineHistory);
    if (command == "snooze" && p.size() <= 2) {
        body.set("seconds", p.size() > 1 ? parseNumber<int64_t>(p[1], "snooze") : 3600);
        return call(request::kSnooze, body);
    }
    if ((command == "follow" || command == "unfollow") && p.size() == 2) {
        body.set("link", p[1]);
        return call(command, body);
    }
    if (command == "join" && p.size() == 3) {
        body.set("hub", p[1]).set("project", p[2]);
        return call(request::kJoin, body, 180000);
    }
    if (command == "settings") {
        if (p.size() == 1)
            return call(request::kSettingsGet);
        if (p.size() == 4 && p[1] == "set") {
            // VALUE is read as the setting's type says (a schedule of 0s
            // and 1s is text); a key the daemon does not describe, as it looks.
            std::string type;
            if (auto described = c.call(request::kSettingsGet, Value::map(), 5000))
                for (const Value& spec : (*described)["described"].items())
                    if (spec["key"].toString() == p[2])
                        type = spec["type"].toString();
            Value value(p[3]);
            const bool looksBool = p[3] == "true" || p[3] == "false";
            int64_t asInt = 0;
            const auto [end, error] = std::from_chars(p[3].data(), p[3].data() + p[3].size(), asInt);
            const bool looksInt = !p[3].empty() && error == std::errc() && end == p[3].data() + p[3].size();
            if (looksBool && (type == control::setting_type::kBool || type.empty()))
                value = Value(p[3] == "true");
            else if (looksInt && (type == control::setting_type::kInt || type.empty()))
                value = Value(asInt);
            body.set("key", p[2]).set("value", value);
            return call(request::kSettingsSet, body);
        }
        return fail("settings takes nothing, or set KEY VALUE", 2);
    }
    if ((command == "download" || command == "cancel" || command == "delete") && p.size() == 2) {
        body.set("round", parseNumber<uint64_t>(p[1], command));
        return call(command == "download" ? request::kDownload
                : command == "cancel"     ? request::kDownloadCancel
                                          : request::kCheckpointDelete,
            body);
    }
    if (command == "generate")
        return generate(c, args);
    return fail("wrong arguments for \"" + command + "\" (see --help)", 2);
}

int main(int argc, char** argv)
{
    // Every mistake on the command line is exit status 2 with a message:
    // options are checked by the parser, the commands' own words here.
    try {
        return runCommand(argc, argv);
    } catch (const UsageError& e) {
        return fail(e.what(), 2);
    }
}
