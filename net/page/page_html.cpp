#include "net/page/page_html.h"

#include "core/utf8.h"
#include "net/page/page_json.h"

#include <cmath>
#include <cstdio>
#include <ctime>

namespace crowdtrain::page {
namespace {

constexpr std::size_t kRecentRounds = 10; // rows of the no-JavaScript metrics table

std::string loss(const std::optional<double>& value)
{
    if (!value || !std::isfinite(*value))
        return "–";
    char text[32];
    std::snprintf(text, sizeof text, "%.4f", *value);
    return text;
}

// Unix milliseconds as UTC in strftime's `format`.
std::string formatUtc(uint64_t ms, const char* format)
{
    const std::time_t seconds = std::time_t(ms / 1000);
    std::tm tm{};
    gmtime_r(&seconds, &tm);
    char text[40];
    std::strftime(text, sizeof text, format, &tm);
    return text;
}

std::string utcTime(uint64_t ms)
{
    return ms == 0 ? std::string("–") : formatUtc(ms, "%Y-%m-%d %H:%M UTC");
}

std::string isoTime(uint64_t ms)
{
    return formatUtc(ms, "%Y-%m-%dT%H:%M:%SZ");
}

std::string bytes(uint64_t n)
{
    const char* units[] = {"B", "KB", "MB", "GB", "TB"};
    double value = double(n);
    int unit = 0;
    while (value >= 1000 && unit < 4) {
        value /= 1000;
        ++unit;
    }
    char text[32];
    std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.1f %s", value, units[unit]);
    return text;
}

std::string hours(double seconds)
{
    char text[32];
    std::snprintf(text, sizeof text, "%.2f", seconds / 3600.0);
    return text;
}

std::string head(const std::string& title)
{
    return "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
           "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
           "<meta name=\"color-scheme\" content=\"light dark\">\n<title>"
        + escapeHtml(title)
        + "</title>\n<link rel=\"stylesheet\" href=\"/static/uPlot.min.css\">\n"
          "<link rel=\"stylesheet\" href=\"/static/page.css\">\n";
}

std::string accessText(const std::string& access)
{
    if (access == "everyone")
        return "Anyone may download the checkpoints.";
    if (access == "participants")
        return "Volunteers with an accepted contribution download the checkpoints in the Crowdtrain app.";
    return "The checkpoints are not released yet.";
}

std::string statsHtml(const ProjectPage& page)
{
    const net::ProjectInfo& i = page.info;
    std::string out = "<dl class=\"stats\">\n";
    const auto stat = [&](const char* id, const char* label, const std::string& value) {
        out += "<div><dt>" + std::string(label) + "</dt><dd id=\"" + id + "\">" + escapeHtml(value) + "</dd></div>\n";
    };
    stat("tokens", "Tokens trained", groupedNumber(i.tokensTrained));
    stat("goal", "Token goal", i.tokenGoal ? groupedNumber(i.tokenGoal) : "none set");
    stat("round", "Round", groupedNumber(i.round));
    stat("online", "Volunteers online", groupedNumber(i.volunteersOnline));
    stat("val-loss", "Validation loss", loss(i.valLoss));
    stat("parameters", "Parameters", groupedNumber(i.parameters));
    stat("shape", "Layers × width", std::to_string(i.model.nLayer) + " × " + std::to_string(i.model.nEmbd));
    stat("codec", "Update codec",
        i.codec == "sparse"     ? "sparse (top-k per chunk, 2-bit values)"
            : i.codec == "int8" ? "int8 (8 bits per parameter)"
                                : i.codec);
    out += "</dl>\n";
    const uint64_t percent = i.tokenGoal ? std::min<uint64_t>(100, i.tokensTrained * 100 / i.tokenGoal) : 0;
    out += "<p id=\"goal-line\"" + std::string(i.tokenGoal ? "" : " hidden")
        + "><label for=\"goal-bar\">Toward the goal: <span id=\"goal-percent\">" + std::to_string(percent)
        + "%</span></label> <progress id=\"goal-bar\" max=\"100\" value=\"" + std::to_string(percent) + "\">"
        + std::to_string(percent) + "%</progress></p>\n";
    return out;
}

std::string recentTableHtml(const ProjectPage& page)
{
    std::string out
        = "<table id=\"recent\">\n<caption>The last rounds</caption>\n<thead><tr><th scope=\"col\">Round</th>"
          "<th scope=\"col\">Tokens</th><th scope=\"col\">Train loss</th><th scope=\"col\">Validation loss</th>"
          "<th scope=\"col\">Volunteers</th><th scope=\"col\">Closed</th></tr></thead>\n<tbody>\n";
    std::size_t shown = 0;
    for (auto it = page.metrics.rbegin(); it != page.metrics.rend() && shown < kRecentRounds; ++it, ++shown)
        out += "<tr><td>" + groupedNumber(it->round) + "</td><td>" + groupedNumber(it->tokens) + "</td><td>"
            + loss(it->trainLoss) + "</td><td>" + loss(it->valLoss) + "</td><td>" + groupedNumber(it->volunteers)
            + "</td><td>" + utcTime(it->timeMs) + "</td></tr>\n";
    return out + "</tbody>\n</table>\n";
}

std::string leaderboardHtml(const ProjectPage& page)
{
    std::string out = "<table id=\"leaderboard\">\n<caption>Volunteers by tokens trained</caption>\n<thead><tr>"
                      "<th scope=\"col\">#</th><th scope=\"col\">Volunteer</th><th scope=\"col\">Device</th>"
                      "<th scope=\"col\">Tokens</th><th scope=\"col\">Compute-hours</th><th scope=\"col\">Accepted</th>"
                      "<th scope=\"col\">Rejected</th></tr></thead>\n<tbody>\n";
    std::size_t rank = 0;
    for (const net::ContributorRow& row : page.leaderboard)
        out += "<tr><td>" + std::to_string(++rank) + "</td><td>" + escapeHtml(row.displayName) + "</td><td>"
            + escapeHtml(row.device) + "</td><td>" + groupedNumber(row.tokens) + "</td><td>" + hours(row.computeSeconds)
            + "</td><td>" + groupedNumber(row.roundsAccepted) + "</td><td>" + groupedNumber(row.roundsRejected)
            + "</td></tr>\n";
    return out + "</tbody>\n</table>\n";
}

// What the volunteers train on: accepted tokens by the device they named.
std::string devicesHtml(const ProjectPage& page)
{
    uint64_t total = 0;
    for (const net::DeviceShare& d : page.devices)
        total += d.tokens;
    std::string out = "<table id=\"devices\">\n<caption>Devices the volunteers train on</caption>\n<thead><tr>"
                      "<th scope=\"col\">Device</th><th scope=\"col\">Volunteers</th><th scope=\"col\">Tokens</th>"
                      "<th scope=\"col\">Share</th></tr></thead>\n<tbody>\n";
    for (const net::DeviceShare& d : page.devices) {
        const double share = total > 0 ? 100.0 * double(d.tokens) / double(total) : 0.0;
        char percent[32];
        std::snprintf(percent, sizeof percent, "%.1f %%", share);
        out += "<tr><td>" + escapeHtml(d.device) + "</td><td>" + groupedNumber(d.volunteers) + "</td><td>"
            + groupedNumber(d.tokens) + "</td><td>" + percent + "</td></tr>\n";
    }
    return out + "</tbody>\n</table>\n";
}

std::string checkpointsHtml(const ProjectPage& page)
{
    std::string out = "<div id=\"checkpoints\">\n";
    if (page.checkpoints.empty())
        out += "<p>No checkpoint is published yet.</p>\n";
    for (auto it = page.checkpoints.rbegin(); it != page.checkpoints.rend(); ++it) {
        const net::CheckpointInfo& c = it->info;
        out += "<article class=\"checkpoint\">\n<h3>Round " + groupedNumber(c.round) + "</h3>\n<p>"
            + groupedNumber(c.tokens) + " tokens, validation loss " + loss(c.valLoss) + ", published <time datetime=\""
            + isoTime(c.createdMs) + "\">" + utcTime(c.createdMs) + "</time></p>\n";
        if (!c.devices.empty()) {
            std::string trainedOn;
            for (const net::DeviceShare& d : c.devices)
                trainedOn += (trainedOn.empty() ? "" : "; ") + escapeHtml(d.device) + " (" + groupedNumber(d.volunteers)
                    + (d.volunteers == 1 ? " volunteer, " : " volunteers, ") + groupedNumber(d.tokens) + " tokens)";
            out += "<p class=\"devices\">Trained on: " + trainedOn + "</p>\n";
        }
        for (const Sample& s : it->samples)
            out += "<figure class=\"sample\"><figcaption>What the model wrote at round " + groupedNumber(c.round)
                + "</figcaption><pre><strong>" + escapeHtml(s.prompt) + "</strong>" + escapeHtml(s.text)
                + "</pre></figure>\n";
        out += "<ul class=\"files\">\n";
        for (const net::FileInfo& f : c.files) {
            const std::string path = downloadPath(page, c.round, f.name);
            out += "<li>"
                + (path.empty() ? escapeHtml(f.name)
                                : "<a href=\"" + escapeHtml(path) + "\" download>" + escapeHtml(f.name) + "</a>")
                + " (" + bytes(f.bytes) + ", SHA-256 <code>" + escapeHtml(f.sha256) + "</code>)</li>\n";
        }
        out += "</ul>\n</article>\n";
    }
    return out + "</div>\n";
}

} // namespace

std::string escapeHtml(std::string_view text)
{
    std::string out;
    out.reserve(text.size() + text.size() / 8);
    for (std::size_t i = 0; i < text.size();) {
        const core::Utf8Char character = core::decodeUtf8(text, i);
        if (!character.valid) {
            out += "\xEF\xBF\xBD";
            ++i;
            continue;
        }
        if (character.length > 1) {
            out.append(text.substr(i, character.length));
            i += character.length;
            continue;
        }
        const char c = text[i++];
        switch (c) {
        case '&':
            out += "&amp;";
            break;
        case '<':
            out += "&lt;";
            break;
        case '>':
            out += "&gt;";
            break;
        case '"':
            out += "&quot;";
            break;
        case '\'':
            out += "&#39;";
            break;
        default:
            if ((static_cast<unsigned char>(c) >= 0x20 && c != 0x7F) || c == '\n' || c == '\t')
                out += c;
        }
    }
    return out;
}

std::string groupedNumber(uint64_t value)
{
    std::string digits = std::to_string(value);
    for (int at = int(digits.size()) - 3; at > 0; at -= 3)
        digits.insert(std::size_t(at), ",");
    return digits;
}

std::string indexHtml(const std::vector<std::shared_ptr<const ProjectPage>>& pages)
{
    std::string out = head("Crowdtrain projects")
        + "</head>\n<body>\n<header><h1>Crowdtrain projects</h1></header>\n<main>\n<ul class=\"projects\">\n";
    for (const auto& page : pages)
        out += "<li><a href=\"/projects/" + escapeHtml(page->info.name) + "\">" + escapeHtml(page->info.name)
            + "</a>: " + escapeHtml(page->info.description) + " (" + groupedNumber(page->info.tokensTrained)
            + " tokens trained, " + groupedNumber(page->info.volunteersOnline) + " volunteers online)</li>\n";
    return out + "</ul>\n</main>\n</body>\n</html>\n";
}

std::string projectHtml(const ProjectPage& page, const std::string& hubLink)
{
    const net::ProjectInfo& i = page.info;
    std::string out = head(i.name + " · Crowdtrain")
        + "<script src=\"/static/uPlot.iife.min.js\" defer></script>\n<script src=\"/static/page.js\" defer></script>\n"
          "</head>\n<body data-project=\""
        + escapeHtml(i.name) + "\">\n<header>\n<p class=\"brand\"><a href=\"/\">Crowdtrain</a></p>\n<h1>"
        + escapeHtml(i.name) + "</h1>\n<p>" + escapeHtml(i.description) + "</p>\n</header>\n<main>\n";
    if (!page.unprotected.empty())
        out += "<p class=\"warning\" id=\"unprotected\" role=\"note\"><strong>Unprotected against Sybils:</strong> "
            + escapeHtml(page.unprotected) + ".</p>\n";
    out += "<section aria-labelledby=\"join-h\">\n<h2 id=\"join-h\">Join with your GPU</h2>\n<p>"
        + escapeHtml(howToJoin(i.name)) + "</p>\n<p class=\"link\"><code id=\"hub-link\">" + escapeHtml(hubLink)
        + "</code></p>\n</section>\n";
    out += "<section aria-labelledby=\"progress-h\">\n<h2 id=\"progress-h\">Progress</h2>\n" + statsHtml(page)
        + "</section>\n";
    out += "<section aria-labelledby=\"loss-h\">\n<h2 id=\"loss-h\">Loss</h2>\n"
           "<figure><div id=\"chart-loss-tokens\" class=\"chart\" role=\"img\" aria-label=\"Training and validation "
           "loss "
           "against tokens trained\"></div><figcaption>Loss against tokens trained</figcaption></figure>\n"
           "<figure><div id=\"chart-loss-time\" class=\"chart\" role=\"img\" aria-label=\"Training and validation loss "
           "against time\"></div><figcaption>Loss against time</figcaption></figure>\n"
           "<noscript><p>The charts need JavaScript; the last rounds are in the table below.</p></noscript>\n"
        + recentTableHtml(page) + "</section>\n";
    out += "<section aria-labelledby=\"volunteers-h\">\n<h2 id=\"volunteers-h\">Volunteers</h2>\n"
           "<figure><div id=\"chart-volunteers\" class=\"chart\" role=\"img\" aria-label=\"Volunteers online over "
           "time\"></div><figcaption>Volunteers online at each round's close</figcaption></figure>\n"
        + leaderboardHtml(page) + devicesHtml(page) + "</section>\n";
    out += "<section aria-labelledby=\"checkpoints-h\">\n<h2 id=\"checkpoints-h\">Checkpoints</h2>\n<p id=\"access\">"
        + escapeHtml(accessText(i.checkpointAccess)) + "</p>\n" + checkpointsHtml(page) + "</section>\n";
    out += "<section aria-labelledby=\"terms-h\">\n<h2 id=\"terms-h\">Terms</h2>\n<dl class=\"terms\">\n"
           "<div><dt>License of the checkpoints</dt><dd>"
        + escapeHtml(i.license.empty() ? "not stated" : i.license)
        + "</dd></div>\n<div><dt>Who may download them</dt><dd>" + escapeHtml(i.checkpointAccess)
        + "</dd></div>\n<div><dt>Token goal</dt><dd>" + (i.tokenGoal ? groupedNumber(i.tokenGoal) : "none set")
        + "</dd></div>\n</dl>\n</section>\n</main>\n<footer><p>Updated <time id=\"updated\" datetime=\""
        + isoTime(uint64_t(page.updatedMs)) + "\">" + utcTime(uint64_t(page.updatedMs))
        + "</time>. A read-only page served by the project's coordinator.</p></footer>\n</body>\n</html>\n";
    return out;
}

std::string notFoundHtml()
{
    return head("Not found")
        + "</head>\n<body>\n<main>\n<h1>Not found</h1>\n<p><a href=\"/\">All "
          "projects</a></p>\n</main>\n</body>\n</html>\n";
}

} // namespace crowdtrain::page
