#pragma once

// The public page's static files (resources/page/: its CSS and JavaScript
// and the vendored uPlot), embedded in the binary at build time by
// cmake/EmbedFiles.cmake, so crowdtrain-server serves them wherever it is
// installed and the page needs nothing from the internet. Immutable; any thread.

#include <functional>
#include <map>
#include <string>
#include <string_view>

namespace crowdtrain::page {

// File name -> bytes.
const std::map<std::string, std::string_view, std::less<>>& assetTable();

} // namespace crowdtrain::page
