# The public project page (crowdtrain-server --http): its JSON API against a
# real coordinator, its HTML's escaping and headers, and the page in Debian's
# headless chromium (installer/install-deps.sh installs it).
crowdtrain_test(tst_page SOURCES tst_page.cpp coordinator_process.h protocol_client.h
    LIBS crowdtrain::page crowdtrain::coordinator Qt6::Core PkgConfig::HTTPLIB nlohmann_json::nlohmann_json)
add_dependencies(tst_page crowdtrain-server crowdtrain-prepare)
