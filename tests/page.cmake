# The public project page (crowdtrain-server --http): its JSON API against a
# real coordinator, its HTML's escaping and headers, and the page in Debian's
# headless chromium (installer/install-deps.sh installs it).
crowdtrain_test(tst_page SOURCES tst_page.cpp coordinator_process.h protocol_client.h
    LIBS crowdtrain::page crowdtrain::coordinator Qt6::Core PkgConfig::HTTPLIB nlohmann_json::nlohmann_json)
add_dependencies(tst_page crowdtrain-server crowdtrain-prepare)
# The page under one address's attack (slowloris, idle connections, huge
# headers), in-process on 127.0.0.1 and 127.0.0.2.
crowdtrain_test(tst_page_dos SOURCES tst_page_dos.cpp LIBS crowdtrain::page Qt6::Core)
