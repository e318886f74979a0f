# Volunteer agent pieces that need no coordinator: task windows, local state,
# key handling, update application, backoff, the inner trainer, byte counting.
crowdtrain_test(tst_volunteer SOURCES tst_volunteer.cpp LIBS crowdtrain::volunteer)
