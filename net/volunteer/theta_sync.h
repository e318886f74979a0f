#pragma once

// Keeps theta_v, the global weights this volunteer trains from, current:
// the copy saved on disk by an earlier run (or, with none, theta_0 built
// from the project's seed when its SHA-256 matches), then each published update
// (about P bytes, SHA-256 of the result checked), or the full state (4P
// bytes) when an update is missing or does not check out: through the
// project's swarm when the hub seeds it (state_swarm.h), else in chunks. The weights are
// held as an immutable shared snapshot, so a training thread keeps the one
// it started from whatever happens here meanwhile.
//
// One owner (AgentLoop), used on run()'s thread only.

#include "engine/gpt_config.h"
#include "net/volunteer/core_host.h"
#include "net/volunteer/local_store.h"
#include "net/volunteer/reporter.h"
#include "net/volunteer/session.h"
#include "net/volunteer/state_swarm.h"

#include <memory>
#include <optional>

namespace crowdtrain::volunteer {

// theta_v as this volunteer holds it: in RAM, or (values empty: spilled
// while a task trains) only in `file`, P float32 whose SHA-256 is sha256.
struct Theta {
    uint64_t version = 0;
    std::string sha256;
    std::vector<float> values;
    std::filesystem::path file;
};

class ThetaSync {
public:
    // `stateSwarm` (may be null) fetches the full state through the
    // project's swarm when the hub offers it; chunks are the fallback.
    // `core` (may be null: no seed build) makes theta_0 from the project's seed.
    ThetaSync(Session& session, const ProjectFolder& folder, Reporter& reporter, const std::atomic<bool>& stop,
        StateSwarm* stateSwarm = nullptr, CoreHost* core = nullptr);

    // Brings theta to the session's server version. Errors: connection
    // errors, "not_joined", "cancelled", "io_error" (the local copy could not
    // be saved), a download's errors.
    Status sync();
    // Seeds the held state, or stops, as the seeding setting says now
    // (sync() does too); called between tasks.
    void followSeeding();
    // The weights held now (nullptr before the first sync).
    std::shared_ptr<const Theta> current() const { return m_theta; }
    // theta_v as its saved file only (written first when it is not on disk
    // yet), the copy in RAM let go once no one else holds it: while the core
    // trains, the daemon needs none (docs/architecture.md, "A volunteer's
    // memory, per parameter"). The next sync() reads it back. Errors:
    // "io_error" (it could not be saved; theta stays in RAM).
    Result<std::shared_ptr<const Theta>> spill();
    uint64_t version() const { return m_theta ? m_theta->version : 0; }
    uint64_t elements() const { return m_elements; }
    // Forgets the weights (the project's model changed).
    void reset()
    {
        m_theta.reset();
        m_seedTried = false;
    }
    // The project's model (from the join) and its number of parameters.
    void setModel(const engine::GptConfig& model, uint64_t elements)
    {
        m_model = model;
        m_elements = elements;
    }

private:
    void loadLocalState();
    void reloadSpilled();
    void buildFromSeed();
    Result<std::vector<float>> seededTheta(const net::SeedInit& init);
    Status applyOneUpdate();
    Status downloadFullState();
    Result<std::string> downloadResource(const std::string& resource, const std::string& expectedSha256);
    // The resource in a file under downloads/ (the caller removes it).
    Result<std::filesystem::path> downloadToFile(const std::string& resource, const std::string& expectedSha256);

    Session& m_session;
    const ProjectFolder& m_folder;
    Reporter& m_reporter;
    const std::atomic<bool>& m_stop;
    StateSwarm* m_stateSwarm;
    CoreHost* m_core;
    std::optional<engine::GptConfig> m_model;
    uint64_t m_elements = 0;
    bool m_localStateLoaded = false;
    bool m_seedTried = false;
    std::string m_savedSha256; // of the theta file on disk, as last saved or loaded ("" unknown)
    // Shared with the training thread; changed in place only while no one
    // else holds it (applyOneUpdate).
    std::shared_ptr<Theta> m_theta;
};

} // namespace crowdtrain::volunteer
