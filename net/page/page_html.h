#pragma once

// The public page's HTML, rendered on the server from a snapshot so that
// every number reads without JavaScript (the script then draws the charts
// and keeps the page live). Every field goes through escapeHtml: display
// names, descriptions, prompts and samples are hostile input. Pure
// functions; thread-safe.

#include "net/page/page_feed.h"

#include <string>
#include <string_view>

namespace crowdtrain::page {

// & < > " ' as entities; invalid UTF-8 as U+FFFD; other control characters
// than tab and newline dropped.
std::string escapeHtml(std::string_view text);

// "1,234,567"
std::string groupedNumber(uint64_t value);

std::string indexHtml(const std::vector<std::shared_ptr<const ProjectPage>>& pages);
std::string projectHtml(const ProjectPage& page, const std::string& hubLink);
std::string notFoundHtml();

} // namespace crowdtrain::page
