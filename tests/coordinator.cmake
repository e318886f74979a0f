# Coordinator store: project spec, ledger, state folder, data plan, checkpoints.
set(_ct_coordinator_fixtures coordinator_fixtures.h)
crowdtrain_test(tst_project_spec SOURCES tst_project_spec.cpp ${_ct_coordinator_fixtures}
    LIBS crowdtrain::coordinator_store)
crowdtrain_test(tst_ledger SOURCES tst_ledger.cpp ${_ct_coordinator_fixtures}
    LIBS crowdtrain::coordinator_store)
# (and RoundState's close over it: crowdtrain::coordinator)
crowdtrain_test(tst_state_store SOURCES tst_state_store.cpp ${_ct_coordinator_fixtures}
    LIBS crowdtrain::coordinator)
crowdtrain_test(tst_data_plan SOURCES tst_data_plan.cpp ${_ct_coordinator_fixtures}
    LIBS crowdtrain::coordinator_store)
crowdtrain_test(tst_checkpoint_store SOURCES tst_checkpoint_store.cpp ${_ct_coordinator_fixtures}
    LIBS crowdtrain::coordinator)

# The coordinator service as a process, against clients speaking the protocol.
crowdtrain_test(tst_coordinator SOURCES tst_coordinator.cpp coordinator_harness.h coordinator_process.h
    LIBS crowdtrain::coordinator Qt6::Core)
add_dependencies(tst_coordinator crowdtrain-server crowdtrain-prepare)
# The same server across crashes (SIGKILL anywhere in a close or an
# acceptance) and restarts.
crowdtrain_test(tst_coordinator_restart SOURCES tst_coordinator_restart.cpp coordinator_harness.h coordinator_process.h
    LIBS crowdtrain::coordinator Qt6::Core)
add_dependencies(tst_coordinator_restart crowdtrain-server crowdtrain-prepare)

# Server + worker processes on loopback, with churn and a server crash.
crowdtrain_test(tst_swarm SOURCES tst_swarm.cpp coordinator_process.h worker_process.h
    LIBS crowdtrain::coordinator Qt6::Core TIMEOUT 1200)
add_dependencies(tst_swarm crowdtrain-server crowdtrain-worker crowdtrain-daemon crowdtrain-prepare)

# The coordinator against the attacks of the hardening issue: faults in its
# loop, a lost submit reply, hostile updates, peers that never read, silent
# task holders (a server in-process and as processes).
crowdtrain_test(tst_hardening SOURCES tst_hardening.cpp coordinator_process.h protocol_client.h
    LIBS crowdtrain::coordinator Qt6::Core)
add_dependencies(tst_hardening crowdtrain-server crowdtrain-prepare)

# The coordinator on a full disk (issue 43): its state folder on a small
# tmpfs that fills during a close, a checkpoint, an upload and a submit;
# the volunteer's checkpoint and state downloads into a full data folder.
# Needs root to mount the tmpfs (CI); skipped with that reason otherwise.
crowdtrain_test(tst_disk_full SOURCES tst_disk_full.cpp coordinator_process.h protocol_client.h small_disk.h
    worker_process.h
    LIBS crowdtrain::coordinator crowdtrain::daemon crowdtrain::control Qt6::Core)
add_dependencies(tst_disk_full crowdtrain-server crowdtrain-prepare crowdtrain-worker crowdtrain-daemon crowdtrain-core)

# The coordinator against many free keys (issue "A public project survives
# Sybils"): trust-weighted statistics, the new keys' share, per-element
# bounds, copies, and no lock-out or stalled round.
crowdtrain_test(tst_sybil SOURCES tst_sybil.cpp coordinator_fixtures.h coordinator_process.h protocol_client.h
    LIBS crowdtrain::coordinator Qt6::Core)
add_dependencies(tst_sybil crowdtrain-server crowdtrain-prepare)
# Trust's parts on their own: KeyTrust's credits (evaluated work) and the
# host's calibration task.
crowdtrain_test(tst_key_trust SOURCES tst_key_trust.cpp coordinator_process.h
    LIBS crowdtrain::coordinator Qt6::Core)
add_dependencies(tst_key_trust crowdtrain-prepare)
