#include "net/daemon/demo_hub.h"

#include "core/file_io.h"
#include "net/control/control_names.h"
#include "net/wire/error_codes.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace crowdtrain::daemon {

namespace {

std::string specText(int64_t vocabSize)
{
    // Small enough that a CPU closes a round every second or two: the loss
    // visibly falls within the first minute.
    nlohmann::json spec = {
        {"name", kDemoProject},
        {"description",
            "A character-level GPT that learns to write fortune cookies, from Debian's fortunes collection. "
            "Runs on this computer only: a safe place to see how training works."},
        {"model", {{"n_layer", 2}, {"n_head", 2}, {"n_embd", 64}, {"block_size", 64}, {"vocab_size", vocabSize}}},
        {"data", "data"},
        {"init", {{"seed", 1337}}},
        {"inner",
            {{"steps", 50}, {"batch_size", 8}, {"learning_rate", 3e-3}, {"min_lr", 3e-4}, {"warmup_iters", 20},
                {"lr_decay_iters", 0}, {"beta1", 0.9}, {"beta2", 0.99}, {"weight_decay", 0.1}, {"grad_clip", 1.0}}},
        {"outer", {{"lr", 0.7}, {"momentum", 0.8}, {"nesterov", true}}},
        {"round", {{"token_target", 0}, {"deadline_seconds", 600}}},
        {"codec", "int8"},
        {"checkpoints", {{"every_rounds", 10}, {"keep_last", 5}, {"milestone_every", 100}}},
        {"validation", {{"batches", 10}, {"batch_size", 8}}},
        {"token_goal", 20000000},
        {"license", "public domain (BSD fortune collection)"},
        {"checkpoint_access", "everyone"},
        {"prompts", {"A ", "The ", "Q: "}},
    };
    return spec.dump(2) + "\n";
}

Result<std::string> readLine(int fd, int timeoutMs)
{
    std::string line;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
    while (line.find('\n') == std::string::npos) {
        const auto left
            = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0)
            return Error::make(
                "timeout", "the demo coordinator did not start within " + std::to_string(timeoutMs) + " ms");
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, int(left.count())) < 0 && errno != EINTR)
            return Error::make(net::errc::kIoError, std::string("poll: ") + std::strerror(errno));
        char buffer[512];
        const ssize_t n = ::read(fd, buffer, sizeof buffer);
        if (n == 0)
            return Error::make(control::errc::kDemoFailed, "the demo coordinator exited before it started: " + line);
        if (n > 0)
            line.append(buffer, std::size_t(n));
    }
    return line.substr(0, line.find('\n'));
}

// crowdtrain-prepare FILES... --out DATA --tokenizer char: the daemon does
// not tokenize corpora itself (it links no engine code).
Status runPrepare(const std::filesystem::path& program, const std::vector<std::filesystem::path>& files,
    const std::filesystem::path& data)
{
    std::vector<std::string> args{program.string()};
    for (const auto& file : files)
        args.push_back(file.string());
    for (const char* option : {"--out", "", "--tokenizer", "char", "--val-fraction", "0.05", "--name", "fortunes"})
        args.push_back(option);
    args[files.size() + 2] = data.string();
    std::vector<char*> argv;
    for (std::string& arg : args)
        argv.push_back(arg.data());
    argv.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0)
        return Error::make(net::errc::kIoError, std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
        const int quiet = ::open("/dev/null", O_WRONLY);
        if (quiet >= 0)
            ::dup2(quiet, STDOUT_FILENO);
        ::execv(argv[0], argv.data());
        ::_exit(127);
    }
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) { }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return Error::make(control::errc::kDemoFailed,
            "preparing the demo corpus failed (" + program.string() + " exited with status "
                + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status)) + ")");
    return Status::success();
}

// The vocabulary size crowdtrain-prepare recorded in DATA/meta.json.
Result<int64_t> vocabSizeOf(const std::filesystem::path& data)
{
    auto text = core::readFile(data / "meta.json", 1 << 20);
    if (!text)
        return text.error();
    const auto meta = nlohmann::json::parse(*text, nullptr, false);
    if (meta.is_discarded() || !meta.contains("tokenizer") || !meta["tokenizer"].contains("vocab_size")
        || !meta["tokenizer"]["vocab_size"].is_number_integer())
        return Error::make(control::errc::kDemoFailed, (data / "meta.json").string() + " has no vocabulary size");
    return meta["tokenizer"]["vocab_size"].get<int64_t>();
}

} // namespace

std::vector<std::filesystem::path> demoCorpusFiles(const std::filesystem::path& corpusDir)
{
    std::vector<std::filesystem::path> files;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(corpusDir, ec)) {
        if (entry.is_symlink(ec) || !entry.is_regular_file(ec))
            continue;
        const std::string name = entry.path().filename().string();
        if (entry.path().has_extension() || name == "art" || name == "ascii-art")
            continue; // *.dat indexes; pictures are not prose
        files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    return files;
}

Result<std::unique_ptr<DemoHub>> DemoHub::start(const DemoOptions& options)
{
    auto log = [&](const std::string& line) {
        if (options.log)
            options.log(line);
    };
    const std::filesystem::path root = options.dataDir / "demo";
    const std::filesystem::path data = root / "data";
    std::error_code ec;
    if (!std::filesystem::exists(data / "meta.json", ec)) {
        const auto files = demoCorpusFiles(options.corpusDir);
        if (files.empty())
            return Error::make(control::errc::kNoDemoCorpus,
                "the demo's corpus is missing: " + options.corpusDir.string()
                    + " has no text (install Debian's fortunes package: apt install fortunes)");
        std::filesystem::remove_all(data, ec);
        std::filesystem::create_directories(root, ec);
        log("preparing the demo corpus (" + std::to_string(files.size()) + " files of " + options.corpusDir.string()
            + ")");
        if (Status prepared = runPrepare(options.prepareBinary, files, data); !prepared)
            return prepared.error();
    }
    auto vocabSize = vocabSizeOf(data);
    if (!vocabSize)
        return vocabSize.error();
    const std::filesystem::path spec = root / (std::string(kDemoProject) + ".project.json");
    if (Status written = core::writeFileAtomic(spec, specText(*vocabSize)); !written)
        return written.error();

    int out[2];
    if (::pipe2(out, O_CLOEXEC) != 0)
        return Error::make(net::errc::kIoError, std::string("pipe: ") + std::strerror(errno));
    const std::string server = options.serverBinary.string();
    const std::string specArg = spec.string();
    const std::string stateArg = (root / "state").string();
    const std::string logFile = (root / "server.log").string();
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0)
        return Error::make(net::errc::kIoError, std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
        // exec keeps the signal mask of the forking thread; the coordinator
        // must hear SIGTERM whatever that thread blocks.
        sigset_t none;
        sigemptyset(&none);
        ::sigprocmask(SIG_SETMASK, &none, nullptr);
        // The demo coordinator dies with its daemon.
        ::prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (::getppid() != parent)
            ::_exit(1);
        ::dup2(out[1], STDOUT_FILENO);
        const int err = ::open(logFile.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (err >= 0)
            ::dup2(err, STDERR_FILENO);
        ::execl(server.c_str(), server.c_str(), specArg.c_str(), "--state", stateArg.c_str(), "--bind",
            "tcp://127.0.0.1:*", "--publish", "tcp://127.0.0.1:*", "--heartbeat-ms", "1000", "--threads", "1",
            static_cast<char*>(nullptr));
        ::_exit(127);
    }
    ::close(out[1]);
    std::unique_ptr<DemoHub> hub(new DemoHub());
    hub->m_pid = pid;
    auto line = readLine(out[0], 120000);
    ::close(out[0]);
    if (!line)
        return line.error(); // the destructor stops the child
    const auto json = nlohmann::json::parse(*line, nullptr, false);
    if (json.is_discarded() || !json.contains("public_key") || !json.contains("requests"))
        return Error::make(control::errc::kDemoFailed, "the demo coordinator said: " + *line);
    const std::string endpoint = json["requests"].get<std::string>(); // tcp://127.0.0.1:PORT
    const auto colon = endpoint.rfind(':');
    hub->m_link.host = "127.0.0.1";
    hub->m_link.port = uint16_t(std::stoi(endpoint.substr(colon + 1)));
    hub->m_link.publicKey = json["public_key"].get<std::string>();
    log("demo coordinator running at " + endpoint + " (log: " + logFile + ")");
    return hub;
}

bool DemoHub::alive() const
{
    return m_pid > 0 && ::waitpid(m_pid, nullptr, WNOHANG) == 0;
}

DemoHub::~DemoHub()
{
    if (m_pid <= 0)
        return;
    ::kill(m_pid, SIGTERM);
    for (int i = 0; i < 200; ++i) {
        const pid_t done = ::waitpid(m_pid, nullptr, WNOHANG);
        if (done == m_pid || done < 0)
            return;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ::kill(m_pid, SIGKILL);
    ::waitpid(m_pid, nullptr, 0);
}

} // namespace crowdtrain::daemon
