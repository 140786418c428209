// One loaded model being served: weights, tokenizer, chat template, N slots (sequences of a batch_executor, each
// with its own KV cache, on the CPU or the GPU), a bounded queue and the scheduler thread that runs them.
//
// Scheduling: the scheduler admits queued jobs into free slots, choosing the slot whose KV cache shares the
// longest token prefix with the job's prompt (prefix cache: the KV is truncated to that prefix and only the
// rest of the prompt is prefilled), then advances every active slot by one token in a single batched forward
// pass (continuous batching: batch_executor::step). A cancelled job (client gone) leaves its slot
// before the next step. Only the scheduler thread touches slots; jobs are the hand-over to HTTP threads.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/dtype.h"
#include "models/transformer.h"
#include "request.h"
#include "runtime/batch-executor.h"
#include "runtime/generator.h"
#include "template/template.h"
#include "template/tool-calls.h"

namespace memtile {
class transformer;
class tokenizer;
class thread_pool;
}  // namespace memtile

namespace memtile::server {

struct job_stats {
    int n_prompt = 0, n_cached = 0, n_generated = 0;
    std::string stop_reason;                                          // eos, stop, length, cancel, error
    double queue_ms = 0, prefill_ms = 0, decode_ms = 0, ttft_ms = 0;  // ttft from submission
    int slot = -1;
};

// A generation request handed to the scheduler; the HTTP thread reads text as it is produced.
class job {
public:
    std::vector<int32_t> prompt;
    sampling_params sampling;
    generate_options gen;

    // Consumer side: waits up to `timeout` for new text or the end. Appends new text to `text`; returns true
    // once the job has ended and all its text was delivered.
    bool wait(std::string& text, std::chrono::milliseconds timeout);
    void cancel() { cancelled_ = true; }
    bool cancelled() const { return cancelled_; }
    job_stats stats() const;
    std::string error() const;

    // Producer side (scheduler).
    void put(const std::string& text);
    void end(const job_stats& s, const std::string& error = {});

    const std::chrono::steady_clock::time_point submitted = std::chrono::steady_clock::now();

private:
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::string text_;
    bool ended_ = false;
    job_stats stats_;
    std::string error_;
    std::atomic<bool> cancelled_{false};
};

struct host_options {
    uint32_t n_ctx = 0;  // per slot; 0: min(training context, 4096)
    int n_slots = 4;
    int max_queue = 64;
    dtype kv_type = dtype::f16;
    std::string device = "cpu";     // cpu or cuda
    bool host_sampling = false;     // cuda: copy each step's logits back and sample on the host (the reference)
    int threads = 0;                // 0: thread_pool::default_threads(), or the length of cpus
    std::vector<int> cpus;          // pin compute thread i to cpus[i] (--cpu-mask); empty: default placement
    std::string template_file;      // overrides tokenizer.chat_template
    double peak_bandwidth_gbs = 0;  // for the roofline metric; 0: not reported
    int default_n_predict = -1;     // tokens to generate when a request sets no limit; -1: until the context is full
    model_options model;  // memory mode of the weights: mmap (default), --no-mmap, --mlock, --prefault, --hugepages
};

// A prompt ready for a slot: tokens plus what the reply needs to know about tool calls.
struct prepared_prompt {
    std::vector<int32_t> tokens;
    bool tools_offered = false;
};

class model_host {
public:
    model_host(std::string name, const std::string& path, const host_options& o);
    ~model_host();  // cancels everything and joins the scheduler

    const std::string& name() const { return name_; }
    const model_config& config() const { return engine_->config(); }
    const gguf_file& file() const { return engine_->file(); }
    const tokenizer& tok() const { return *tok_; }
    const std::string& template_source() const { return template_src_; }
    chat::tool_call_format tool_format() const { return tool_format_; }
    bool template_handles_tools() const;
    uint32_t n_ctx() const { return n_ctx_; }
    uint64_t resident_bytes() const { return resident_bytes_; }
    std::string describe() const { return engine_->describe(); }  // backend, and where tokens are sampled

    // Renders (chat) or takes (raw) the prompt and tokenizes it. Throws api_error: 400 for template errors,
    // 400 context_length_exceeded when the prompt does not fit a slot's context.
    // Consecutive user messages are merged (with a note in r.notes) when the template rejects them.
    prepared_prompt prepare(gen_request& r) const;
    // Queues a job; throws api_error 503 when the queue is full or the host is shutting down.
    std::shared_ptr<job> submit(prepared_prompt p, const gen_request& r);
    void cancel_all();
    int busy() const;  // active + queued jobs
    std::chrono::steady_clock::time_point last_used() const;

private:
    struct slot;
    void run();
    void admit(slot& s, std::shared_ptr<job> j);
    void after_sample(slot& s, int32_t id);
    void release(slot& s, const std::string& reason, const std::string& error = {});
    void publish_gauges(double step_s, int batch);

    std::string name_;
    std::unique_ptr<batch_executor> engine_;
    std::shared_ptr<const tokenizer> tok_;
    std::unique_ptr<jinja::chat_template> template_;
    std::string template_src_, bos_text_, eos_text_;
    chat::tool_call_format tool_format_ = chat::tool_call_format::none;
    host_options opts_;
    uint32_t n_ctx_ = 0;
    uint64_t resident_bytes_ = 0, streamed_bytes_ = 0, kv_bytes_per_token_ = 0;
    std::vector<std::unique_ptr<slot>> slots_;

    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::shared_ptr<job>> queue_;
    std::vector<std::shared_ptr<job>> active_jobs_;  // admitted to a slot, not yet ended
    bool stopping_ = false;
    std::chrono::steady_clock::time_point last_used_ = std::chrono::steady_clock::now();
    std::thread thread_;
};

}  // namespace memtile::server
