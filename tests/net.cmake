# net/: wire messages, CurveZMQ transport, chunked transfer (tst_wire is listed in CMakeLists.txt).
crowdtrain_test(tst_protocol SOURCES tst_protocol.cpp LIBS crowdtrain::wire)
crowdtrain_test(tst_transport SOURCES tst_transport.cpp LIBS crowdtrain::transport)
crowdtrain_test(tst_transfer SOURCES tst_transfer.cpp transfer_server.h LIBS crowdtrain::transfer)
# The swarm library: torrents, and libtorrent sessions seeding and
# downloading on loopback (one seed, eight peers; a corrupting peer; removal).
crowdtrain_test(tst_torrent SOURCES tst_torrent.cpp LIBS crowdtrain::swarm crowdtrain::sha256)
