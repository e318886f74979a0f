// The desktop app's GUI thread: its longest stall (issue 24) through what
// a volunteer does, against the real programs on loopback (fresh XDG
// folders): a first start with no service running (the app starts it; the
// wizard waits for its project list, then joins the demo), joining a
// second project whose model is 100 MiB (a real crowdtrain-server, Tiny
// Shakespeare, GPT n_layer 8, n_embd 528: 26.8M parameters, so theta and
// each checkpoint are 102 MiB) and the download of its first checkpoint
// with the Checkpoints page shown, "Try it" on that checkpoint, and the
// service SIGKILLed until the app has restarted it and reattached.
// A lag probe measures the stalls: a 10 ms timer whose lateness is how long
// the event loop was busy with something else.
//   QT_QPA_PLATFORM=offscreen build/ci/bin/bench_app_lag
#include "coordinator_process.h"
#include "ui/checkpoint_model.h"
#include "ui/checkpoints_page.h"
#include "ui/daemon_link.h"
#include "ui/dashboard_page.h"
#include "ui/first_run.h"
#include "ui/main_window.h"
#include "ui/series_chart.h"

#include <QAbstractButton>
#include <QApplication>
#include <QElapsedTimer>
#include <QEventLoop>
#include <QListWidget>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QTableWidget>
#include <QTimer>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

using namespace crowdtrain;

namespace {

// The probe: a precise 10 ms timer; each firing later than due is a stall
// of the GUI thread by that much.
class LagProbe : public QObject {
public:
    struct Phase {
        std::string name;
        std::vector<double> lateMs; // how late each firing was (wall time)
        std::vector<double> cpuMs; // the GUI thread's CPU time between two firings
        double seconds = 0;
    };

    LagProbe()
    {
        m_timer.setTimerType(Qt::PreciseTimer);
        m_timer.setInterval(kPeriodMs);
        connect(&m_timer, &QTimer::timeout, this, [this] {
            const double since = double(m_clock.nsecsElapsed()) / 1e6;
            m_clock.restart();
            // A late firing is either work on the GUI thread or the thread
            // waiting for a core (a loaded machine): its CPU time tells which.
            const double cpu = threadCpuMs();
            if (!m_phases.empty()) {
                m_phases.back().lateMs.push_back(std::max(0.0, since - kPeriodMs));
                m_phases.back().cpuMs.push_back(cpu - m_lastCpuMs);
            }
            m_lastCpuMs = cpu;
        });
    }

    void begin(const std::string& name)
    {
        if (!m_phases.empty())
            m_phases.back().seconds = double(m_phaseClock.elapsed()) / 1e3;
        m_phases.push_back(Phase{name, {}, {}, 0});
        m_phaseClock.restart();
        if (!m_timer.isActive()) {
            m_clock.start();
            m_lastCpuMs = threadCpuMs();
            m_timer.start();
        }
    }

    void end()
    {
        if (!m_phases.empty())
            m_phases.back().seconds = double(m_phaseClock.elapsed()) / 1e3;
        m_timer.stop();
    }

    const std::vector<Phase>& phases() const { return m_phases; }

private:
    static double threadCpuMs()
    {
        timespec ts{};
        ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) / 1e6;
    }

    static constexpr double kPeriodMs = 10;
    double m_lastCpuMs = 0;
    QTimer m_timer;
    QElapsedTimer m_clock;
    QElapsedTimer m_phaseClock;
    std::vector<Phase> m_phases;
};

// Runs the event loop until `done` or the timeout; false on timeout.
bool waitFor(const std::function<bool()>& done, int timeoutMs)
{
    QElapsedTimer clock;
    clock.start();
    while (!done()) {
        if (clock.elapsed() > timeoutMs)
            return false;
        QEventLoop loop;
        QTimer::singleShot(20, &loop, &QEventLoop::quit);
        loop.exec();
    }
    return true;
}

std::vector<pid_t> daemonsOf(const std::string& runtimeDir)
{
    std::vector<pid_t> pids;
    for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
        const std::string name = entry.path().filename().string();
        if (name.find_first_not_of("0123456789") != std::string::npos)
            continue;
        std::ifstream comm(entry.path() / "comm");
        std::string command;
        std::getline(comm, command);
        if (command.rfind("crowdtrain-daem", 0) != 0)
            continue;
        std::ifstream environ(entry.path() / "environ");
        std::stringstream all;
        all << environ.rdbuf();
        if (all.str().find("XDG_RUNTIME_DIR=" + runtimeDir + '\0') != std::string::npos)
            pids.push_back(pid_t(std::stoi(name)));
    }
    return pids;
}

std::filesystem::path writeBigSpec(const std::filesystem::path& dir, const std::filesystem::path& data)
{
    nlohmann::json spec = {{"name", "shakespeare-100mib"},
        {"description", "Tiny Shakespeare on a GPT whose checkpoints are 102 MiB (bench_app_lag)."},
        {"model", {{"n_layer", 8}, {"n_head", 8}, {"n_embd", 528}, {"block_size", 64}, {"vocab_size", 65}}},
        {"data", data.string()}, {"init", {{"seed", 7}}},
        {"inner",
            {{"steps", 2}, {"batch_size", 2}, {"learning_rate", 1e-3}, {"min_lr", 1e-4}, {"warmup_iters", 0},
                {"beta1", 0.9}, {"beta2", 0.95}, {"weight_decay", 0.1}, {"grad_clip", 1.0}}},
        {"round", {{"token_target", 2 * 2 * 64}, {"deadline_seconds", 600}}}, {"codec", "int8"},
        {"checkpoints", {{"every_rounds", 1}, {"keep_last", 2}}}, {"validation", {{"batches", 1}, {"batch_size", 2}}},
        {"checkpoint_access", "everyone"}, {"prompts", {"ROMEO: "}}};
    const auto file = dir / "big.project.json";
    std::ofstream(file) << spec.dump(2);
    return file;
}

std::string loadAverage()
{
    std::ifstream file("/proc/loadavg");
    std::string one, five;
    file >> one >> five;
    return one + " " + five;
}

double percentile(std::vector<double> v, double p)
{
    if (v.empty())
        return 0;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, std::size_t(p * double(v.size())))];
}

} // namespace

int main(int argc, char** argv)
{
    const std::filesystem::path corpus = CROWDTRAIN_SHARED_DATA_DIR "/tinyshakespeare.txt";
    if (!std::filesystem::is_regular_file(corpus)) {
        std::fprintf(stderr, "bench_app_lag: missing input %s\n", corpus.c_str());
        return 1;
    }
    if (!std::filesystem::is_directory("/usr/share/games/fortunes")) {
        std::fprintf(stderr, "bench_app_lag: the demo's corpus is missing (installer/install-deps.sh)\n");
        return 1;
    }
    char pattern[] = "/tmp/ct-bench-app-lag-XXXXXX";
    const std::filesystem::path home = ::mkdtemp(pattern);
    const std::string runtimeDir = (home / "run").string();
    std::filesystem::create_directories(runtimeDir);
    std::filesystem::permissions(runtimeDir, std::filesystem::perms::owner_all);
    ::setenv("HOME", home.c_str(), 1);
    ::setenv("XDG_RUNTIME_DIR", runtimeDir.c_str(), 1);
    ::setenv("XDG_CONFIG_HOME", (home / "config").c_str(), 1);
    ::setenv("XDG_DATA_HOME", (home / "data").c_str(), 1);
    ::setenv("XDG_CACHE_HOME", (home / "cache").c_str(), 1);

    // The 100 MiB project's hub.
    const auto data = home / "big-data";
    if (bench::runProgram({bench::binary("crowdtrain-prepare").string(), corpus.string(), "--tokenizer", "char",
                              "--val-fraction", "0.1", "--out", data.string()},
            home / "prepare.log")
        != 0) {
        std::fprintf(stderr, "crowdtrain-prepare failed; see %s\n", (home / "prepare.log").c_str());
        return 1;
    }
    bench::ServerProcess server;
    if (!server.start(writeBigSpec(home, data), home / "server-state", 1000, home / "server.log"))
        return 1;
    const std::string port = server.endpoint.substr(server.endpoint.rfind(':') + 1);
    const std::string hubLink = "crowdtrain://127.0.0.1:" + port + "/" + server.publicKey;

    QApplication app(argc, argv);
    QApplication::setOrganizationName(QStringLiteral("Crowdtrain"));
    QApplication::setApplicationName(QStringLiteral("crowdtrain-bench"));
    LagProbe probe;
    ui::DaemonLink link(std::filesystem::path(), QStringLiteral(CROWDTRAIN_BIN_DIR "/crowdtrain-worker"));
    ui::MainWindow window(link);
    window.show();
    auto fail = [&](const char* what) {
        std::fprintf(stderr, "bench_app_lag: %s (home %s kept)\n", what, home.c_str());
        for (pid_t pid : daemonsOf(runtimeDir))
            ::kill(pid, SIGTERM);
        return 1;
    };
    auto ask = [&](const QString& type, const control::Value& body, int timeoutMs) {
        std::optional<ui::DaemonReply> got;
        link.request(
            type, body, &window, [&](const ui::DaemonReply& r) { got = r; }, timeoutMs);
        waitFor([&] { return got.has_value(); }, timeoutMs + 2000);
        return got.value_or(ui::DaemonReply{});
    };

    // 1. The first start: the service starts while the wizard waits for it.
    probe.begin("first start: service starting, wizard waits for the project list");
    link.start();
    window.maybeRunFirstRun();
    auto* wizard = window.findChild<ui::FirstRunWizard*>();
    if (!wizard)
        return fail("no first-run wizard");
    wizard->next();
    wizard->next();
    if (!waitFor([&] { return wizard->projectPage()->loaded(); }, 60000))
        return fail("the wizard's project list never filled");
    wizard->next();

    probe.begin("first run Finish: name, preset, join the demo, until training");
    wizard->accept();
    if (!waitFor([&] { return window.dashboard()->stateText().startsWith(QStringLiteral("Training")); }, 180000))
        return fail("the demo never trained");

    // 2. A hub link pasted, its project joined: theta_v (102 MiB) comes down.
    probe.begin("join the 102 MiB project (theta download), until training");
    window.showPage(ui::MainWindow::kProjects);
    control::Value limit = control::Value::map();
    limit.set("key", "download_limit_kib_s");
    limit.set("value", int64_t(16384)); // 16 MiB/s: a download that lasts, as on a home link
    ask(QStringLiteral("settings_set"), limit, 5000);
    control::Value follow = control::Value::map();
    follow.set("link", hubLink);
    if (!ask(QStringLiteral("follow"), follow, 15000).ok)
        return fail("follow failed");
    control::Value join = control::Value::map();
    join.set("hub", hubLink);
    join.set("project", "shakespeare-100mib");
    if (!ask(QStringLiteral("join"), join, 60000).ok)
        return fail("join failed");
    window.showPage(ui::MainWindow::kDashboard);
    auto bigTrains = [&] {
        const ui::DaemonReply status = ask(QStringLiteral("status"), control::Value::map(), 5000);
        return status.body["project"].toString() == "shakespeare-100mib"
            && status.body["state"].toString() == "training";
    };
    if (!waitFor(bigTrains, 300000))
        return fail("the big project never trained");

    // 3. The first checkpoint (102 MiB) downloads with its page shown.
    probe.begin("102 MiB checkpoint published and downloaded, Checkpoints page shown");
    window.showPage(ui::MainWindow::kCheckpoints);
    ui::CheckpointsPage* page = window.checkpoints();
    auto readyRow = [&] { return page->model()->anyReady(); };
    if (!waitFor(readyRow, 600000))
        return fail("no checkpoint was downloaded");

    // 4. Try it.
    probe.begin("Try it: text generated from the 102 MiB checkpoint");
    waitFor([&] { return !page->loading(); }, 10000);
    page->generate();
    if (!waitFor(
            [&] { return page->generateButton()->isEnabled() && page->output()->toPlainText().size() > 20; }, 120000))
        return fail("Try it produced nothing");

    // 5. The service is killed; the app notices, restarts it and reattaches.
    probe.begin("service SIGKILLed, restarted by the app, reattached");
    const auto pids = daemonsOf(runtimeDir);
    if (pids.size() != 1)
        return fail("not exactly one daemon");
    bool lost = false;
    QObject::connect(
        &link, &ui::DaemonLink::attachedChanged, &window, [&](bool attached) { lost = lost || !attached; });
    ::kill(pids.front(), SIGKILL);
    if (!waitFor([&] { return lost && link.attached(); }, 120000))
        return fail("the app did not reattach");
    waitFor([&] { return !window.dashboard()->loading(); }, 10000);
    probe.end();

    std::printf("| phase | seconds | timer firings | longest stall | p99 stall | stalls > 50 ms | longest GUI-thread "
                "CPU between firings |\n");
    std::printf("| --- | --- | --- | --- | --- | --- | --- |\n");
    double worst = 0, worstCpu = 0;
    for (const auto& phase : probe.phases()) {
        const double longest = phase.lateMs.empty() ? 0 : *std::max_element(phase.lateMs.begin(), phase.lateMs.end());
        const double cpu = phase.cpuMs.empty() ? 0 : *std::max_element(phase.cpuMs.begin(), phase.cpuMs.end());
        worst = std::max(worst, longest);
        worstCpu = std::max(worstCpu, cpu);
        std::printf("| %s | %.1f | %zu | %.1f ms | %.1f ms | %ld | %.1f ms |\n", phase.name.c_str(), phase.seconds,
            phase.lateMs.size(), longest, percentile(phase.lateMs, 0.99),
            long(std::count_if(phase.lateMs.begin(), phase.lateMs.end(), [](double v) { return v > 50; })), cpu);
    }
    std::printf("| all | | | %.1f ms | | | %.1f ms |\n", worst, worstCpu);
    std::printf("target: longest stall under 50 ms: %s (load average at the end: %s)\n", worst < 50 ? "met" : "missed",
        loadAverage().c_str());

    for (pid_t pid : daemonsOf(runtimeDir))
        ::kill(pid, SIGTERM);
    waitFor([&] { return daemonsOf(runtimeDir).empty(); }, 30000);
    server.stop();
    std::error_code ec;
    std::filesystem::remove_all(home, ec);
    return 0;
}
