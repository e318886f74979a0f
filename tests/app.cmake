# The desktop app (ui/) against a real daemon and the real demo project.
crowdtrain_test(tst_app SOURCES tst_app.cpp LIBS crowdtrain::ui crowdtrain::control qcustomplot TIMEOUT 900)
add_dependencies(tst_app crowdtrain-worker crowdtrain-daemon crowdtrain-server)
# The app's parts: DaemonLink's asynchronous requests against a real
# ControlServer, the byte-size editor, the words shown for volunteers and devices.
crowdtrain_test(tst_app_parts SOURCES tst_app_parts.cpp LIBS crowdtrain::ui crowdtrain::control)
# The pages against a fake link (tests/fake_link.h): models, incremental
# updates and actions, in seconds and without a daemon.
crowdtrain_test(tst_pages SOURCES tst_pages.cpp fake_link.h LIBS crowdtrain::ui qcustomplot TIMEOUT 60)
