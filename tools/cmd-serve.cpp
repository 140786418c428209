// memtile serve [-m MODEL ...] [--alias NAME ...] [--models-dir DIR] [--host H] [--port P] [--ctx N] [--slots N]
//               [--api-key KEY] [--max-queue N] [--keep-alive S] [--chat-template-file F] ...
// Ollama- and OpenAI-compatible HTTP server (see server/). SIGINT/SIGTERM stop accepting, cancel in-flight
// generations and exit 0.
#include <fmt/core.h>
#include <pthread.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "commands.h"
#include "core/error.h"
#include "core/thread-pool.h"
#include "model-flags.h"
#include "observe/machine-profile.h"
#include "runtime/default-model.h"
#include "server/http-server.h"
#include "server/model-registry.h"

namespace memtile::cli {
namespace {

// Copy bandwidth of this machine (GB/s, bytes read + written), the peak of the roofline metric when neither
// --mem-bandwidth nor a machine profile (memtile probe) is available. 64 MiB is far beyond the caches.
double measure_copy_bandwidth() {
    const size_t n = size_t(64) << 20;
    std::vector<char> a(n, 1), b(n, 2);
    double best = 0;
    for (int i = 0; i < 3; i++) {
        const auto t0 = std::chrono::steady_clock::now();
        std::memcpy(b.data(), a.data(), n);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best = std::max(best, 2.0 * double(n) / s / 1e9);
        a[size_t(i)] = b[n - 1 - size_t(i)];
    }
    return best;
}

class serve_command : public command {
public:
    CLI::App* add(CLI::App& app) override {
        auto* sub = app.add_subcommand("serve", "Serve models over the Ollama and OpenAI HTTP APIs");
        sub->add_option("-m,--model", models_, "GGUF model to serve (repeatable; default: the project's default)");
        sub->add_option("--alias", aliases_, "Name of the -m model at the same position (default: file stem)");
        sub->add_option("--models-dir", models_dir_, "Serve every .gguf in this folder, loaded on first use");
        sub->add_option("--host", server_.host, "Address to bind")->capture_default_str();
        sub->add_option("--port", server_.port, "Port (0: any free port, printed at start)")->capture_default_str();
        sub->add_option("-c,--ctx", host_.n_ctx, "Context per slot in tokens (default: min(training ctx, 4096))");
        sub->add_option("--slots", host_.n_slots, "Sequences generated concurrently (each with its own KV cache)")
            ->check(CLI::Range(1, 256))
            ->capture_default_str();
        sub->add_option("--max-queue", host_.max_queue, "Requests that may wait for a slot before 503")
            ->check(CLI::Range(0, 1 << 20))
            ->capture_default_str();
        sub->add_option("--api-key", server_.api_key, "Require Authorization: Bearer KEY");
        sub->add_option("--keep-alive", keep_alive_s_, "Seconds an idle --models-dir model stays loaded")
            ->capture_default_str();
        sub->add_option("--kv-type", kv_type_, "KV-cache type: f16 or f32")->check(CLI::IsMember({"f16", "f32"}));
        sub->add_option("-t,--threads", host_.threads, "Compute threads (default: physical performance cores)")
            ->check(CLI::Range(1, 1024));
        sub->add_option("--cpu-mask", cpu_mask_,
                        "Pin compute thread i to the i-th CPU of this list, e.g. 0,2-3 (default threads: its length)");
        sub->add_option("--device", host_.device, "Where to compute: cpu, or cuda (batched decode on the GPU)")
            ->check(CLI::IsMember({"cpu", "cuda"}));
        sub->add_flag("--host-sampling", host_.host_sampling,
                      "With --device cuda: copy each step's logits back and sample on the host (default: on the GPU)");
        sub->add_option("--repack", repack_, k_repack_help)->check(CLI::IsMember({"auto", "on", "off"}));
        sub->add_option("--chat-template-file", host_.template_file, "Jinja chat template overriding the model's")
            ->check(CLI::ExistingFile);
        sub->add_option("--max-body", max_body_mb_, "Largest request body in MiB (413 above)")->capture_default_str();
        sub->add_option("--http-threads", server_.http_threads, "HTTP worker threads (open connections served)")
            ->check(CLI::Range(2, 4096));
        sub->add_option("--mem-bandwidth", host_.peak_bandwidth_gbs,
                        "Peak memory bandwidth in GB/s for the "
                        "roofline metric (default: the machine profile of memtile probe, else measured copy speed)");
        sub->add_flag("--no-mmap", no_mmap_, "Read models into memory instead of mapping them");
        sub->add_flag("--mlock", host_.model.load.mlock, "Lock the models' pages in RAM");
        sub->add_flag("--prefault", host_.model.load.prefault, "Touch every weight page before serving");
        sub->add_flag("--hugepages", host_.model.load.hugepages, "Copy the weights into 2 MiB pages");
        sub->add_option("-n,--n-predict", host_.default_n_predict,
                        "Tokens to generate when a request sets no limit (default: until the context is full)");
        sub->add_flag("-q,--quiet", server_.quiet, "No access log");
        return sub;
    }

    int run() override {
        if (host_.host_sampling && host_.device != "cuda") fail("cli", "--host-sampling needs --device cuda");
        host_.kv_type = kv_type_ == "f32" ? dtype::f32 : dtype::f16;
        server_.max_body = size_t(max_body_mb_) << 20;
        host_.model.load.use_mmap = !no_mmap_;
        host_.model.repack = parse_repack_mode(repack_);
        if (!cpu_mask_.empty()) host_.cpus = thread_pool::parse_cpu_list(cpu_mask_);
        // Roofline peak: --mem-bandwidth, else the machine profile of memtile probe, else a copy measured now.
        std::string peak_source =
            host_.peak_bandwidth_gbs > 0 ? "--mem-bandwidth" : "measured copy speed; run memtile probe for a profile";
        if (host_.peak_bandwidth_gbs <= 0)
            if (const auto prof = load_machine_profile()) {
                host_.peak_bandwidth_gbs = prof->read_gbps_for(host_.threads > 0    ? host_.threads
                                                               : host_.cpus.empty() ? thread_pool::default_threads()
                                                                                    : int(host_.cpus.size()));
                peak_source = "machine profile " + prof->path;
            }
        if (server_.http_threads < host_.n_slots + 8)
            server_.http_threads = host_.n_slots + std::max(8, host_.max_queue);
        if (host_.peak_bandwidth_gbs <= 0) host_.peak_bandwidth_gbs = measure_copy_bandwidth();
        if (models_.empty() && models_dir_.empty()) models_.push_back(default_model_path());
        if (aliases_.size() > models_.size()) fail("serve", "more --alias than models (-m, or the default model)");

        // Signals are taken by one thread with sigwait: blocked here, before any thread starts, so every
        // thread inherits the mask.
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGINT);
        sigaddset(&set, SIGTERM);
        pthread_sigmask(SIG_BLOCK, &set, nullptr);
        std::signal(SIGPIPE, SIG_IGN);

        server::model_registry registry(host_);
        for (size_t i = 0; i < models_.size(); i++) {
            const std::string name =
                i < aliases_.size() ? aliases_[i] : std::filesystem::path(models_[i]).stem().string();
            registry.add(name, models_[i], true, keep_alive_s_);
        }
        if (!models_dir_.empty()) registry.add_dir(models_dir_, keep_alive_s_);
        registry.load_pinned();
        registry.start_janitor();

        server::http_server http(registry, server_);
        const int port = http.bind();
        if (server_.host != "127.0.0.1" && server_.host != "localhost" && server_.host != "::1" &&
            server_.api_key.empty())
            fmt::print(stderr, "warning: listening on {} without --api-key: anyone who can reach it can use it\n",
                       server_.host);
        for (const auto& e : registry.list())
            fmt::print(stderr, "[serve] model {} ({}{})\n", e.name, e.path,
                       e.host ? ", loaded: " + e.host->describe() : "");
        fmt::print(stderr, "[serve] {} slots, queue {}, peak bandwidth {:.1f} GB/s ({})\n", host_.n_slots,
                   host_.max_queue, host_.peak_bandwidth_gbs, peak_source);
        fmt::print(stderr, "[serve] listening on http://{}:{}\n", server_.host, port);
        std::fflush(stderr);

        std::thread waiter([&] {
            int sig = 0;
            sigwait(&set, &sig);
            fmt::print(stderr, "[serve] {} received: cancelling in-flight requests and stopping\n",
                       sig == SIGINT ? "SIGINT" : "SIGTERM");
            registry.shutdown();
            http.stop();
        });
        http.serve();
        // serve() also returns when the listener fails; make sure the waiter thread can finish.
        pthread_kill(waiter.native_handle(), SIGTERM);
        waiter.join();
        registry.shutdown();
        fmt::print(stderr, "[serve] stopped\n");
        return 0;
    }

private:
    std::vector<std::string> models_, aliases_;
    std::string models_dir_, kv_type_ = "f16", cpu_mask_, repack_ = "auto";
    double keep_alive_s_ = 300;
    int max_body_mb_ = 32;
    bool no_mmap_ = false;
    server::server_options server_;
    server::host_options host_;
};

}  // namespace
std::unique_ptr<command> make_serve_command() {
    return std::make_unique<serve_command>();
}
}  // namespace memtile::cli
