#include "net/page/page_server.h"

#include "net/page/page_assets.h"
#include "net/page/page_html.h"
#include "net/page/page_json.h"
#include "net/page/page_router.h"
#include "net/page/rate_limiter.h"
#include "net/wire/error_codes.h"

#include <httplib.h>

#include <atomic>
#include <charconv>
#include <fstream>

namespace crowdtrain::page {
namespace {

constexpr const char* kHtml = "text/html; charset=utf-8";
constexpr const char* kJson = "application/json";
constexpr const char* kText = "text/plain; charset=utf-8";
constexpr std::size_t kDownloadChunkBytes = 64 * 1024;

// The page loads only its own files and asks only its own API: no inline
// script or style, no frames, no forms, nothing from another origin.
const httplib::Headers& securityHeaders()
{
    static const httplib::Headers headers = {
        {"Content-Security-Policy",
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
            "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"},
        {"X-Content-Type-Options", "nosniff"},
        {"Referrer-Policy", "no-referrer"},
        {"X-Frame-Options", "DENY"},
        {"Cross-Origin-Opener-Policy", "same-origin"},
        {"Cross-Origin-Resource-Policy", "same-origin"},
    };
    return headers;
}

std::string contentTypeOf(std::string_view file)
{
    if (file.ends_with(".js"))
        return "text/javascript; charset=utf-8";
    if (file.ends_with(".css"))
        return "text/css; charset=utf-8";
    if (file.ends_with(".json"))
        return kJson;
    return "application/octet-stream";
}

} // namespace

struct PageServer::Impl {
    PageOptions options;
    std::shared_ptr<const PageFeed> feed;
    PageRouter http;
    RateLimiter limiter;
    std::unique_ptr<httplib::ThreadPool> pool;
    std::unique_ptr<HttpFront> front; // hands whole requests to the pool
    std::atomic<int> downloads{0};

    // Rendered once per snapshot, not once per viewer.
    struct Rendered {
        uint64_t generation = 0;
        std::string json;
        std::string html;
    };
    std::mutex renderedMutex;
    std::map<std::string, std::shared_ptr<const Rendered>, std::less<>> rendered;

    explicit Impl(PageOptions o, std::shared_ptr<const PageFeed> f)
        : options(std::move(o))
        , feed(std::move(f))
        , limiter(options.requestsPerSecond, options.burst)
    { }

    std::shared_ptr<const Rendered> renderedOf(const ProjectPage& page)
    {
        {
            std::lock_guard lock(renderedMutex);
            auto it = rendered.find(page.info.name);
            if (it != rendered.end() && it->second->generation == page.generation)
                return it->second;
        }
        auto fresh = std::make_shared<Rendered>(
            Rendered{page.generation, projectJson(page, options.hubLink), projectHtml(page, options.hubLink)});
        std::lock_guard lock(renderedMutex);
        auto& slot = rendered[page.info.name];
        if (!slot || slot->generation < fresh->generation)
            slot = fresh;
        return fresh;
    }

    static void notFound(httplib::Response& res, bool api)
    {
        res.status = 404;
        if (api)
            res.set_content("{\"error\":\"not_found\"}", kJson);
        else
            res.set_content(notFoundHtml(), kHtml);
    }

    void routes()
    {
        http.set_default_headers(securityHeaders());
        http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
            if (!limiter.allow(req.remote_addr, std::chrono::steady_clock::now())) {
                res.status = 429;
                res.set_header("Retry-After", "1");
                res.set_content("Too many requests; try again in a second.\n", kText);
                return httplib::Server::HandlerResponse::Handled;
            }
            // Read-only, answered before cpp-httplib reads a body: the front
            // hands on only what has arrived (a body may still be on its way).
            if (req.method != "GET" && req.method != "HEAD") {
                res.status = 405;
                res.set_header("Allow", "GET, HEAD");
                res.set_content("This page is read-only.\n", kText);
                return httplib::Server::HandlerResponse::Handled;
            }
            return httplib::Server::HandlerResponse::Unhandled;
        });

        http.Get("/", [this](const httplib::Request&, httplib::Response& res) {
            res.set_header("Cache-Control", "no-cache");
            res.set_content(indexHtml(feed->pages()), kHtml);
        });
        http.Get("/static/([A-Za-z0-9._-]{1,64})", [](const httplib::Request& req, httplib::Response& res) {
            const auto& assets = assetTable();
            auto it = assets.find(req.matches[1].str());
            if (it == assets.end())
                return notFound(res, false);
            res.set_header("Cache-Control", "public, max-age=3600");
            res.set_content(it->second.data(), it->second.size(), contentTypeOf(it->first).c_str());
        });
        http.Get("/projects/([a-z0-9-]{1,64})", [this](const httplib::Request& req, httplib::Response& res) {
            auto page = feed->page(req.matches[1].str());
            if (!page)
                return notFound(res, false);
            res.set_header("Cache-Control", "no-cache");
            res.set_content(renderedOf(*page)->html, kHtml);
        });
        http.Get("/api/projects", [this](const httplib::Request&, httplib::Response& res) {
            res.set_header("Cache-Control", "no-cache");
            res.set_content(projectListJson(feed->pages()), kJson);
        });
        http.Get("/api/projects/([a-z0-9-]{1,64})", [this](const httplib::Request& req, httplib::Response& res) {
            auto page = feed->page(req.matches[1].str());
            if (!page)
                return notFound(res, true);
            res.set_header("Cache-Control", "no-cache");
            res.set_content(renderedOf(*page)->json, kJson);
        });
        http.Get(
            "/api/projects/([a-z0-9-]{1,64})/metrics", [this](const httplib::Request& req, httplib::Response& res) {
                auto page = feed->page(req.matches[1].str());
                if (!page)
                    return notFound(res, true);
                uint64_t since = 0;
                if (req.has_param("since")) {
                    const std::string text = req.get_param_value("since");
                    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), since);
                    if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
                        res.status = 400;
                        return res.set_content("{\"error\":\"since must be a round number\"}", kJson);
                    }
                }
                res.set_header("Cache-Control", "no-cache");
                res.set_content(metricsJson(*page, since), kJson);
            });
        http.Get("/projects/([a-z0-9-]{1,64})/checkpoints/round-([0-9]{1,18})/([A-Za-z0-9._-]{1,128})",
            [this](const httplib::Request& req, httplib::Response& res) { download(req, res); });
        http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
            if (res.status == 404 && res.body.empty())
                notFound(res, req.path.starts_with("/api/"));
        });
    }

    // Only files the snapshot lists, of a project whose terms allow anyone.
    void download(const httplib::Request& req, httplib::Response& res)
    {
        auto page = feed->page(req.matches[1].str());
        const uint64_t round = std::stoull(req.matches[2].str());
        const std::string name = req.matches[3].str();
        if (!page)
            return notFound(res, false);
        if (page->info.checkpointAccess != "everyone") {
            res.status = 403;
            return res.set_content("This project's checkpoints are not public.\n", kText);
        }
        const CheckpointView* checkpoint = nullptr;
        for (const CheckpointView& c : page->checkpoints)
            if (c.info.round == round)
                checkpoint = &c;
        const net::FileInfo* file = nullptr;
        if (checkpoint)
            for (const net::FileInfo& f : checkpoint->info.files)
                if (f.name == name)
                    file = &f;
        if (!file)
            return notFound(res, false);
        if (downloads.fetch_add(1) >= options.maxDownloads) {
            downloads.fetch_sub(1);
            res.status = 503;
            res.set_header("Retry-After", "30");
            return res.set_content("Too many downloads at once; try again shortly.\n", kText);
        }
        auto in = std::make_shared<std::ifstream>(checkpoint->dir / name, std::ios::binary);
        if (!*in) {
            downloads.fetch_sub(1);
            return notFound(res, false); // removed by retention since the snapshot
        }
        res.set_header("Content-Disposition", "attachment; filename=\"" + name + "\"");
        res.set_header("Cache-Control", "public, max-age=86400, immutable");
        res.set_content_provider(
            file->bytes, contentTypeOf(name),
            [in](size_t offset, size_t length, httplib::DataSink& sink) {
                std::vector<char> buffer(std::min(length, kDownloadChunkBytes));
                in->clear();
                in->seekg(std::streamoff(offset));
                in->read(buffer.data(), std::streamsize(buffer.size()));
                if (in->gcount() <= 0)
                    return false;
                return sink.write(buffer.data(), size_t(in->gcount()));
            },
            [this](bool) { downloads.fetch_sub(1); });
    }
};

PageServer::PageServer(std::unique_ptr<Impl> impl)
    : m_impl(std::move(impl))
{ }

PageServer::~PageServer()
{
    m_impl->front->stop();
    m_impl->pool->shutdown(); // answers what was handed on, then joins
}

Result<std::unique_ptr<PageServer>> PageServer::start(PageOptions options, std::shared_ptr<const PageFeed> feed)
{
    auto impl = std::make_unique<Impl>(std::move(options), std::move(feed));
    Impl& s = *impl;
    s.http.set_payload_max_length(4096);
    s.routes();
    auto front = HttpFront::listen(s.options.address.host, s.options.address.port, s.options.front);
    if (!front)
        return front.error();
    s.front = std::move(*front);
    s.pool = std::make_unique<httplib::ThreadPool>(std::size_t(std::max(1, s.options.threads)));
    s.front->start([&s](ReadyRequest request) {
        s.pool->enqueue([&s, request = std::move(request)]() mutable {
            const std::string address = request.address;
            s.http.answer(std::move(request), s.options.writeTimeoutMs);
            s.front->finished(address);
        });
    });
    return std::unique_ptr<PageServer>(new PageServer(std::move(impl)));
}

uint16_t PageServer::port() const
{
    return m_impl->front->port();
}

std::string PageServer::url() const
{
    return pageUrl(m_impl->options.address.host, port());
}

} // namespace crowdtrain::page
