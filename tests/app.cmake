# The desktop app (ui/) against a real daemon and the real demo project.
crowdtrain_test(tst_app SOURCES tst_app.cpp LIBS crowdtrain::ui crowdtrain::control TIMEOUT 900)
add_dependencies(tst_app crowdtrain-worker crowdtrain-daemon crowdtrain-server)
