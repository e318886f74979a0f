# net/control: the local control API between the app or CLI and the daemon.
crowdtrain_test(tst_control_api SOURCES tst_control_api.cpp LIBS crowdtrain::control)
