#include "http-server.h"

#include <fmt/core.h>
#include <httplib.h>

#include <chrono>

#include "api-error.h"
#include "core/error.h"
#include "metrics.h"
#include "ollama.h"
#include "openai.h"
#include "reply-writer.h"

namespace memtile::server {

using clock_type = std::chrono::steady_clock;

namespace {

// Per-request facts for the access log: a request is handled, streamed and logged on one worker thread.
struct request_log {
    clock_type::time_point start = clock_type::now();
    size_t in_bytes = 0;
    std::string note;
};
thread_local request_log t_log;

bool is_openai(const httplib::Request& req) {
    return req.path.rfind("/v1/", 0) == 0;
}

void send_error(const httplib::Request& req, httplib::Response& res, const api_error& e) {
    res.status = e.status;
    const json body = is_openai(req) ? openai_error(e) : ollama_error(e.what());
    res.set_content(dump_json(body), "application/json; charset=utf-8");
}

json parse_body(const std::string& text) {
    json body = json::parse(text, nullptr, false);
    if (body.is_discarded()) bad_request("the request body is not valid JSON");
    if (!body.is_object()) bad_request("the request body must be a JSON object");
    return body;
}

std::string route_label(const std::string& path) {
    static const char* known[] = {"/api/tags",       "/api/show",    "/api/chat",  "/api/generate",
                                  "/api/ps",         "/api/version", "/v1/models", "/v1/chat/completions",
                                  "/v1/completions", "/metrics",     "/health",    "/"};
    for (const char* k : known)
        if (path == k) return k;
    return "other";
}

std::string stats_note(const job_stats& st) {
    return fmt::format(
        "slot={} prompt={} cached={} gen={} reason={} queue={:.0f}ms ttft={:.0f}ms prefill={:.0f}ms "
        "decode={:.0f}ms",
        st.slot, st.n_prompt, st.n_cached, st.n_generated, st.stop_reason, st.queue_ms, st.ttft_ms, st.prefill_ms,
        st.decode_ms);
}

}  // namespace

struct http_server::impl {
    model_registry& models;
    server_options o;
    httplib::Server svr;

    impl(model_registry& m, server_options opts) : models(m), o(std::move(opts)) {}

    // Runs a route body, rendering api_error and other exceptions in the API's error shape.
    template <typename F>
    httplib::Server::Handler guarded(F f) {
        return [this, f](const httplib::Request& req, httplib::Response& res) {
            try {
                f(req, res);
            } catch (const api_error& e) {
                t_log.note = e.what();
                send_error(req, res, e);
            } catch (const std::exception& e) {
                t_log.note = e.what();
                send_error(req, res, api_error(500, "internal_error", e.what()));
            }
        };
    }

    // POST routes read the body themselves (a content reader), so that httplib neither parses nor caps it
    // as a form when a client such as `curl -d` labels JSON application/x-www-form-urlencoded.
    using post_fn = std::function<void(const httplib::Request&, const std::string&, httplib::Response&)>;
    void post(const char* path, post_fn f) {
        svr.Post(path, [this, f](const httplib::Request& req, httplib::Response& res,
                                 const httplib::ContentReader& reader) {
            std::string body;
            const bool read = reader([&](const char* data, size_t n) {
                body.append(data, n);
                return true;
            });
            t_log.in_bytes = body.size();
            if (!read) {
                send_error(req, res,
                           res.status == 413 ? api_error(413, "request_too_large", "the request body is too large")
                                             : api_error(400, "invalid_request", "the request body could not be read"));
                return;
            }
            guarded([&](const httplib::Request& r, httplib::Response& s) { f(r, body, s); })(req, res);
        });
    }

    void generation(const httplib::Request& req, const std::string& text, httplib::Response& res, bool openai,
                    bool chat) {
        const json body = parse_body(text);
        gen_request r = openai ? (chat ? parse_openai_chat(body) : parse_openai_completion(body))
                               : (chat ? parse_ollama_chat(body) : parse_ollama_generate(body));
        std::shared_ptr<model_host> host = models.acquire(r.model, r.keep_alive_s);
        prepared_prompt prompt = host->prepare(r);
        for (const auto& n : r.notes) fmt::print(stderr, "[serve] {} {}: {}\n", req.method, req.path, n);
        const bool tools_offered = prompt.tools_offered;
        std::shared_ptr<job> j = host->submit(std::move(prompt), r);
        std::shared_ptr<reply_writer> w =
            openai ? make_openai_writer(chat, r.model, r.include_usage) : make_ollama_writer(chat, r.model);
        auto split = std::make_shared<output_splitter>(host->tool_format(), tools_offered && chat);

        if (!r.stream) {
            std::string text;
            while (!j->wait(text, std::chrono::milliseconds(500))) {
            }
            const job_stats st = j->stats();
            t_log.note = stats_note(st);
            if (!j->error().empty()) throw api_error(500, "generation_failed", j->error());
            split->push(text);
            const auto fin = split->finish();
            res.set_content(w->whole(split->content(), fin.calls, st), w->content_type(false));
            return;
        }
        auto started = std::make_shared<bool>(false);
        res.set_header("Cache-Control", "no-cache");
        res.set_chunked_content_provider(
            w->content_type(true),
            [host, j, w, split, started](size_t, httplib::DataSink& sink) {
                auto send = [&](const std::string& s) {
                    if (s.empty() || sink.write(s.data(), s.size())) return true;
                    j->cancel();  // the client went away: the slot is freed before the next decode step
                    return false;
                };
                if (!*started) {
                    *started = true;
                    if (!send(w->begin())) return false;
                }
                std::string text;
                const bool ended = j->wait(text, std::chrono::milliseconds(200));
                if (!text.empty()) {
                    const std::string d = split->push(text);
                    if (!d.empty() && !send(w->delta(d))) return false;
                }
                if (!ended) return true;
                const job_stats st = j->stats();
                t_log.note = stats_note(st);
                const std::string err = j->error();
                if (!send(err.empty() ? w->end(split->finish(), st) : w->error(err))) return false;
                sink.done();
                return true;
            },
            [j](bool success) {
                if (!success) j->cancel();
            });
    }

    void routes() {
        svr.Get("/", [](const httplib::Request&, httplib::Response& res) {
            res.set_content("memtile is running", "text/plain");
        });
        svr.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
            json models_loaded = json::array();
            for (const auto& e : models.list())
                if (e.host) models_loaded.push_back(e.name);
            res.set_content(dump_json(json{{"status", "ok"}, {"models_loaded", models_loaded}}), "application/json");
        });
        svr.Get("/api/version", [](const httplib::Request&, httplib::Response& res) {
            res.set_content(dump_json(json{{"version", MEMTILE_VERSION}}), "application/json");
        });
        svr.Get("/metrics", [](const httplib::Request&, httplib::Response& res) {
            res.set_content(metrics::get().render(), "text/plain; version=0.0.4");
        });
        svr.Get("/api/tags", guarded([this](const httplib::Request&, httplib::Response& res) {
                    res.set_content(dump_json(ollama_tags(models.list())), "application/json; charset=utf-8");
                }));
        svr.Get("/api/ps", guarded([this](const httplib::Request&, httplib::Response& res) {
                    res.set_content(dump_json(ollama_ps(models.list())), "application/json; charset=utf-8");
                }));
        post("/api/show", [this](const httplib::Request&, const std::string& text, httplib::Response& res) {
            const json body = parse_body(text);
            std::string name = string_member(body, "model");
            if (name.empty()) name = string_member(body, "name");
            if (name.empty()) bad_request("'model' is required");
            auto host = models.acquire(name);
            for (const auto& e : models.list())
                if (canonical_model_name(e.name) == canonical_model_name(name))
                    res.set_content(dump_json(ollama_show(e, *host)), "application/json; charset=utf-8");
        });
        svr.Get("/v1/models", guarded([this](const httplib::Request&, httplib::Response& res) {
                    res.set_content(dump_json(openai_models(models.list())), "application/json; charset=utf-8");
                }));
        post("/api/chat", [this](auto& req, auto& body, auto& res) { generation(req, body, res, false, true); });
        post("/api/generate", [this](auto& req, auto& body, auto& res) { generation(req, body, res, false, false); });
        post("/v1/chat/completions",
             [this](auto& req, auto& body, auto& res) { generation(req, body, res, true, true); });
        post("/v1/completions", [this](auto& req, auto& body, auto& res) { generation(req, body, res, true, false); });
    }

    void hooks() {
        svr.set_payload_max_length(o.max_body);
        const int threads = o.http_threads;
        svr.new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
        svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
            t_log = request_log{};
            if (o.api_key.empty() || req.path == "/health" || req.path == "/api/version")
                return httplib::Server::HandlerResponse::Unhandled;
            const std::string auth = req.get_header_value("Authorization");
            const std::string want = "Bearer " + o.api_key;
            if (auth == want || req.get_header_value("x-api-key") == o.api_key)
                return httplib::Server::HandlerResponse::Unhandled;
            send_error(req, res,
                       api_error(401, "invalid_api_key",
                                 auth.empty() ? "missing API key (Authorization: Bearer KEY)" : "invalid API key"));
            return httplib::Server::HandlerResponse::Handled;
        });
        svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
            if (!res.body.empty() || res.content_length_ > 0) return;
            if (res.status == 413)
                send_error(req, res, api_error(413, "request_too_large", "the request body is too large"));
            else if (res.status == 404)
                send_error(req, res, api_error(404, "not_found", fmt::format("no route {} {}", req.method, req.path)));
            else if (res.status == 405)
                send_error(req, res, api_error(405, "method_not_allowed", "method not allowed"));
        });
        svr.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
            std::string msg = "internal error";
            try {
                std::rethrow_exception(ep);
            } catch (const std::exception& e) {
                msg = e.what();
            } catch (...) {
            }
            send_error(req, res, api_error(500, "internal_error", msg));
        });
        svr.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
            const double ms = std::chrono::duration<double, std::milli>(clock_type::now() - t_log.start).count();
            metrics::get().request(route_label(req.path), res.status);
            if (o.quiet) return;
            fmt::print(stderr, "[access] {} {} {} {} {:.1f}ms {}{}\n", req.remote_addr, req.method, req.path,
                       res.status, ms, t_log.in_bytes ? fmt::format("in={}B ", t_log.in_bytes) : "", t_log.note);
        });
    }
};

http_server::http_server(model_registry& models, server_options o) : p_(std::make_unique<impl>(models, std::move(o))) {
    p_->routes();
    p_->hooks();
}

http_server::~http_server() = default;

int http_server::bind() {
    int port = p_->o.port;
    if (port == 0) {
        port = p_->svr.bind_to_any_port(p_->o.host);
        if (port < 0) fail("serve", "cannot bind {}", p_->o.host);
    } else if (!p_->svr.bind_to_port(p_->o.host, port)) {
        fail("serve", "cannot bind {}:{} (in use? try --port)", p_->o.host, port);
    }
    return port;
}

void http_server::serve() {
    p_->svr.listen_after_bind();
}

void http_server::stop() {
    p_->svr.stop();
}

}  // namespace memtile::server
