#include "model-host.h"

#include <fmt/core.h>

#include <algorithm>
#include <fstream>
#include <random>
#include <sstream>

#include "api-error.h"
#include "core/error.h"
#include "core/thread-pool.h"
#include "gguf/gguf-file.h"
#include "metrics.h"
#include "models/transformer.h"
#include "observe/memory-model.h"
#include "runtime/text-stream.h"
#include "tokenizer/tokenizer.h"

namespace memtile::server {

using clock_type = std::chrono::steady_clock;

namespace {

double ms_between(clock_type::time_point a, clock_type::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

bool job::wait(std::string& text, std::chrono::milliseconds timeout) {
    std::unique_lock lk(mu_);
    cv_.wait_for(lk, timeout, [&] { return ended_ || !text_.empty(); });
    text += text_;
    text_.clear();
    return ended_;
}

job_stats job::stats() const {
    std::lock_guard lk(mu_);
    return stats_;
}

std::string job::error() const {
    std::lock_guard lk(mu_);
    return error_;
}

void job::put(const std::string& text) {
    {
        std::lock_guard lk(mu_);
        text_ += text;
    }
    cv_.notify_all();
}

void job::end(const job_stats& s, const std::string& error) {
    {
        std::lock_guard lk(mu_);
        stats_ = s;
        error_ = error;
        ended_ = true;
    }
    cv_.notify_all();
}

struct model_host::slot {
    int index = 0;
    std::vector<int32_t> cached;  // the tokens whose K/V the slot holds: engine used(index) == cached.size()
    std::shared_ptr<job> j;
    std::unique_ptr<sampler> smp;
    std::unique_ptr<text_stream> ts;
    int32_t next = -1;  // sampled but not yet run through the model
    job_stats st;
    clock_type::time_point t_decode0, last_used;
};

model_host::model_host(std::string name, const std::string& path, const host_options& o)
    : name_(std::move(name)), opts_(o) {
    executor_options eo;
    eo.device = o.device;
    eo.n_ctx = o.n_ctx;
    eo.kv_type = o.kv_type;
    eo.threads = o.threads > 0 ? o.threads : o.cpus.empty() ? thread_pool::default_threads() : int(o.cpus.size());
    eo.cpus = o.cpus.empty() ? thread_pool::default_cpus(eo.threads) : o.cpus;
    eo.model = o.model;
    eo.host_sampling = o.host_sampling;
    engine_ = batch_executor::open(path, eo, std::max(1, o.n_slots));
    tok_ = tokenizer::from_gguf(engine_->file());
    if (!o.template_file.empty()) {
        std::ifstream f(o.template_file, std::ios::binary);
        if (!f) fail("serve", "cannot open chat template file {}", o.template_file);
        std::stringstream ss;
        ss << f.rdbuf();
        template_src_ = ss.str();
    } else {
        template_src_ = engine_->file().get_string("tokenizer.chat_template");
    }
    if (template_src_.empty()) template_src_ = std::string(jinja::chatml_template());
    template_ = std::make_unique<jinja::chat_template>(template_src_);
    tool_format_ = chat::detect_tool_call_format(template_src_);
    if (tok_->bos() >= 0) bos_text_ = tok_->token_text(tok_->bos());
    if (tok_->eos() >= 0) eos_text_ = tok_->token_text(tok_->eos());

    n_ctx_ = engine_->n_ctx();
    const memory_model mm = compute_memory_model(engine_->file(), o.kv_type);
    streamed_bytes_ = mm.streamed_bytes_per_token;
    kv_bytes_per_token_ = mm.kv_bytes_per_token;
    resident_bytes_ = mm.weight_bytes + mm.kv_bytes(uint64_t(n_ctx_) * uint64_t(std::max(1, o.n_slots)));
    for (int i = 0; i < std::max(1, o.n_slots); i++) {
        auto s = std::make_unique<slot>();
        s->index = i;
        slots_.push_back(std::move(s));
    }
    publish_gauges(0, 0);
    thread_ = std::thread([this] { run(); });
}

model_host::~model_host() {
    {
        std::lock_guard lk(mu_);
        stopping_ = true;
    }
    cancel_all();
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    metrics::get().drop_host(name_);
}

bool model_host::template_handles_tools() const {
    return template_src_.find("tools") != std::string::npos;
}

prepared_prompt model_host::prepare(gen_request& r) const {
    prepared_prompt p;
    std::string text;
    if (!r.chat && r.raw) {
        text = r.prompt;
    } else {
        json ctx = json::object();
        if (r.chat) {
            ctx["messages"] = r.messages;
        } else {
            json msgs = json::array();
            if (!r.system.empty()) msgs.push_back({{"role", "system"}, {"content", r.system}});
            msgs.push_back({{"role", "user"}, {"content", r.prompt}});
            ctx["messages"] = msgs;
        }
        if (!r.tools.empty()) {
            ctx["tools"] = r.tools;
            p.tools_offered = true;
        }
        ctx["add_generation_prompt"] = true;
        ctx["bos_token"] = bos_text_;
        ctx["eos_token"] = eos_text_;
        try {
            text = template_->render(ctx);
        } catch (const error& e) {
            size_t merged = 0;
            json msgs = r.chat ? merge_consecutive_users(r.messages, merged) : json();
            if (merged == 0)
                throw api_error(400, "template_error",
                                fmt::format("the chat template rejected the request: {}", e.what()));
            r.notes.push_back(
                fmt::format("the chat template rejected consecutive user messages ({}); merged {} into the one before",
                            e.what(), merged));
            r.messages = msgs;
            ctx["messages"] = msgs;
            try {
                text = template_->render(ctx);
            } catch (const error& e2) {
                throw api_error(400, "template_error",
                                fmt::format("the chat template rejected the request: {}", e2.what()));
            }
        }
    }
    tokenize_options to;
    to.parse_special = true;  // templates write control tokens as text
    to.add_special = bos_text_.empty() || text.rfind(bos_text_, 0) != 0;
    p.tokens = tok_->tokenize(text, to);
    if (p.tokens.empty()) {
        if (tok_->bos() < 0) bad_request("empty prompt and the model has no BOS token to start from");
        p.tokens.push_back(tok_->bos());
    }
    if (p.tokens.size() >= n_ctx_)
        throw api_error(400, "context_length_exceeded",
                        fmt::format("the prompt has {} tokens but the context holds {} (one slot; raise --ctx up to "
                                    "the model's {})",
                                    p.tokens.size(), n_ctx_, engine_->config().n_ctx_train));
    return p;
}

std::shared_ptr<job> model_host::submit(prepared_prompt p, const gen_request& r) {
    auto j = std::make_shared<job>();
    j->prompt = std::move(p.tokens);
    j->sampling = r.sampling;
    if (!r.seed_given)
        j->sampling.seed = std::random_device{}() ^ uint64_t(clock_type::now().time_since_epoch().count());
    const int room = int(n_ctx_) - int(j->prompt.size());
    const int want = r.n_predict >= 0 ? r.n_predict : opts_.default_n_predict;
    j->gen.n_predict = want < 0 ? room : std::min(want, room);
    j->gen.stop = r.stop;
    {
        std::lock_guard lk(mu_);
        if (stopping_) throw api_error(503, "shutting_down", "the server is shutting down");
        const int free_slots = int(slots_.size()) - int(active_jobs_.size());
        if (int(queue_.size()) - free_slots >= opts_.max_queue) {
            metrics::get().rejected();
            throw api_error(503, "queue_full",
                            fmt::format("server busy: {} requests are waiting for one of {} slots (--max-queue {})",
                                        queue_.size(), slots_.size(), opts_.max_queue));
        }
        queue_.push_back(j);
        last_used_ = clock_type::now();
        metrics::get().set_counts(name_, int(active_jobs_.size()), int(queue_.size()));
    }
    cv_.notify_all();
    return j;
}

void model_host::cancel_all() {
    std::lock_guard lk(mu_);
    for (auto& j : queue_) j->cancel();
    for (auto& j : active_jobs_) j->cancel();
}

int model_host::busy() const {
    std::lock_guard lk(mu_);
    return int(queue_.size() + active_jobs_.size());
}

clock_type::time_point model_host::last_used() const {
    std::lock_guard lk(mu_);
    return last_used_;
}

void model_host::admit(slot& s, std::shared_ptr<job> j) {
    s.j = std::move(j);
    s.st = job_stats{};
    s.st.slot = s.index;
    s.st.n_prompt = int(s.j->prompt.size());
    const auto t0 = clock_type::now();
    s.st.queue_ms = ms_between(s.j->submitted, t0);
    const auto& prompt = s.j->prompt;
    size_t lcp = 0;
    while (lcp < s.cached.size() && lcp < prompt.size() && s.cached[lcp] == prompt[lcp]) lcp++;
    if (lcp == prompt.size()) lcp--;  // at least one token must run to produce logits
    engine_->truncate(s.index, uint32_t(lcp));
    s.cached.resize(lcp);
    s.st.n_cached = int(lcp);
    s.smp = std::make_unique<sampler>(s.j->sampling);
    for (int32_t t : prompt) s.smp->accept(t);
    s.ts = std::make_unique<text_stream>(*tok_, s.j->gen);
    const auto logits = engine_->prefill(s.index, std::span<const int32_t>(prompt).subspan(lcp));
    s.cached.insert(s.cached.end(), prompt.begin() + std::ptrdiff_t(lcp), prompt.end());
    s.t_decode0 = clock_type::now();
    s.st.prefill_ms = ms_between(t0, s.t_decode0);
    if (s.ts->ended()) {
        release(s, "length");
        return;
    }
    const int32_t id = s.smp->sample(logits);
    s.st.ttft_ms = ms_between(s.j->submitted, clock_type::now());
    metrics::get().ttft(s.st.ttft_ms / 1000.0);
    after_sample(s, id);
}

void model_host::after_sample(slot& s, int32_t id) {
    std::string out;
    const bool more = s.ts->push(id, out);
    if (!out.empty()) s.j->put(out);
    if (!more) {
        release(s, s.ts->stop_reason());
        return;
    }
    s.smp->accept(id);
    if (engine_->used(s.index) >= n_ctx_) {
        release(s, "length");
        return;
    }
    s.next = id;
}

void model_host::release(slot& s, const std::string& reason, const std::string& error) {
    std::string out;
    if (s.ts) s.ts->finish(reason, out);
    if (!out.empty()) s.j->put(out);
    s.st.stop_reason = !error.empty() ? "error" : s.ts ? s.ts->stop_reason() : reason;
    s.st.n_generated = s.ts ? s.ts->n_generated() : 0;
    s.st.decode_ms = ms_between(s.t_decode0, clock_type::now());
    metrics::get().tokens(uint64_t(s.st.n_prompt), uint64_t(s.st.n_cached), uint64_t(s.st.n_generated));
    s.j->end(s.st, error);
    {
        std::lock_guard lk(mu_);
        std::erase(active_jobs_, s.j);
        last_used_ = clock_type::now();
        metrics::get().set_counts(name_, int(active_jobs_.size()), int(queue_.size()));
    }
    s.j.reset();
    s.ts.reset();
    s.smp.reset();
    s.next = -1;
    s.last_used = clock_type::now();
}

void model_host::run() {
    for (;;) {
        std::vector<std::pair<slot*, std::shared_ptr<job>>> admits;
        {
            std::unique_lock lk(mu_);
            cv_.wait(lk, [&] { return stopping_ || !queue_.empty() || !active_jobs_.empty(); });
            if (stopping_) {
                for (auto& j : queue_) {
                    job_stats st;
                    st.stop_reason = "cancel";
                    j->end(st, "the server is shutting down");
                }
                queue_.clear();
                if (active_jobs_.empty()) break;
            }
            while (!queue_.empty()) {
                std::vector<slot*> free;
                for (auto& s : slots_)
                    if (!s->j &&
                        std::none_of(admits.begin(), admits.end(), [&](auto& a) { return a.first == s.get(); }))
                        free.push_back(s.get());
                if (free.empty()) break;
                auto j = queue_.front();
                queue_.pop_front();
                if (j->cancelled()) {
                    job_stats st;
                    st.stop_reason = "cancel";
                    j->end(st);
                    continue;
                }
                // Prefix cache: the free slot sharing the longest prefix with the prompt; ties go to the
                // least recently used slot, so other slots keep their prefixes longer.
                slot* best = nullptr;
                size_t best_lcp = 0;
                for (slot* s : free) {
                    size_t l = 0;
                    while (l < s->cached.size() && l < j->prompt.size() && s->cached[l] == j->prompt[l]) l++;
                    if (!best || l > best_lcp || (l == best_lcp && s->last_used < best->last_used)) {
                        best = s;
                        best_lcp = l;
                    }
                }
                active_jobs_.push_back(j);
                admits.emplace_back(best, j);
            }
            metrics::get().set_counts(name_, int(active_jobs_.size()), int(queue_.size()));
        }
        for (auto& [s, j] : admits) {
            try {
                admit(*s, j);
            } catch (const std::exception& e) {
                engine_->truncate(s->index, 0);
                s->cached.clear();
                release(*s, "error", e.what());
            }
        }
        for (auto& s : slots_)
            if (s->j && s->j->cancelled()) release(*s, "cancel");

        std::vector<int> ids;
        std::vector<int32_t> toks;
        std::vector<slot*> who;
        for (auto& s : slots_)
            if (s->j && s->next >= 0) {
                ids.push_back(s->index);
                toks.push_back(s->next);
                who.push_back(s.get());
            }
        double step_s = 0;
        if (!who.empty()) {
            // Device sampling: each slot's draw (its parameters, penalty window and the uniform number of its
            // seed's stream) goes with the step and one id per slot comes back; else the host samples logits().
            batch_device_sampling* ds = engine_->device_sampler();
            std::vector<sampling_draw> draws(ds ? who.size() : 0);
            for (size_t i = 0; i < draws.size(); i++) who[i]->smp->next_draw(draws[i]);
            std::vector<int32_t> sampled;
            const auto t0 = clock_type::now();
            try {
                if (ds) {
                    const auto got = ds->step_sample(toks, ids, draws);
                    sampled.assign(got.begin(), got.end());
                } else {
                    engine_->step(toks, ids);
                }
            } catch (const std::exception& e) {
                for (slot* s : who) {
                    engine_->truncate(s->index, 0);
                    s->cached.clear();
                    release(*s, "error", e.what());
                }
                continue;
            }
            step_s = ms_between(t0, clock_type::now()) / 1000.0;
            metrics::get().token_latency(step_s);
            for (size_t i = 0; i < who.size(); i++) {
                slot* s = who[i];
                s->cached.push_back(s->next);
                s->next = -1;
                after_sample(*s, ds ? sampled[i] : s->smp->sample(engine_->logits(s->index)));
            }
        }
        publish_gauges(step_s, int(who.size()));
    }
    publish_gauges(0, 0);
}

void model_host::publish_gauges(double step_s, int batch) {
    host_gauges g = metrics::get().host(name_);
    g.slots_total = int(slots_.size());
    g.kv_cells_used = 0;
    uint64_t kv_read = 0;
    for (auto& s : slots_) {
        g.kv_cells_used += engine_->used(s->index);
        if (s->j) kv_read += uint64_t(engine_->used(s->index)) * kv_bytes_per_token_;
    }
    g.kv_cells_total = uint64_t(n_ctx_) * slots_.size();
    {
        std::lock_guard lk(mu_);
        g.slots_active = int(active_jobs_.size());
        g.queue_depth = int(queue_.size());
    }
    if (step_s > 0 && batch > 0) {
        g.decode_tps = batch / step_s;
        g.last_batch = batch;
        if (opts_.peak_bandwidth_gbs > 0)
            g.roofline_percent = double(streamed_bytes_ + kv_read) / step_s / (opts_.peak_bandwidth_gbs * 1e9) * 100.0;
    }
    metrics::get().set_host(name_, g);
}

}  // namespace memtile::server
