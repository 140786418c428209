#include "model-flags.h"

#include <algorithm>

#include "core/error.h"
#include "core/thread-pool.h"
#include "runtime/default-model.h"

namespace memtile::cli {

void model_flags::add(CLI::App* sub, bool with_threads) {
    sub->add_option("-m,--model", model, "GGUF model (default: the project's default model)");
    sub->add_option("-c,--ctx", ctx, "Context length in tokens (default: min(training context, 4096))")
        ->check(CLI::Range(1u, 1u << 24));
    sub->add_option("--kv-type", kv_type, "KV-cache type: f16 or f32")->check(CLI::IsMember({"f16", "f32"}));
    if (with_threads) {
        sub->add_option("-t,--threads", threads, "Threads (default: physical performance cores)")
            ->check(CLI::Range(1, 1024));
        sub->add_option("--cpu-mask", cpu_mask,
                        "Pin thread i to the i-th CPU of this list, e.g. 0,2-3 (default threads: its length)");
    }
    sub->add_flag("--no-mmap", no_mmap, "Read the model into memory instead of mapping it");
    sub->add_flag("--mlock", mlock, "Lock the model's pages in RAM");
    sub->add_flag("--prefault", prefault, "Touch every weight page before the first token");
    sub->add_flag("--hugepages", hugepages,
                  "Copy the weights into 2 MiB pages (hugetlbfs pool if it has room, else transparent huge pages)");
    sub->add_option("--repack", repack, k_repack_help)->check(CLI::IsMember({"auto", "on", "off"}));
}

void model_flags::add_device(CLI::App* sub, bool with_gpu_layers) {
    sub->add_option("--device", device, "Where to compute: cpu, or cuda (fails when the backend or a GPU is missing)")
        ->check(CLI::IsMember({"cpu", "cuda"}));
    if (with_gpu_layers)
        sub->add_option("--gpu-layers", gpu_layers,
                        "With --device cuda: run only the last N layers (and the output) on the GPU, the rest on "
                        "the CPU (default: all)")
            ->check(CLI::Range(0, 1 << 20));
    if (with_gpu_layers)
        sub->add_flag("--host-sampling", host_sampling,
                      "With --device cuda: copy the logits back and sample on the host (default: on the GPU)");
}

executor_options model_flags::executor_opts() const {
    if (gpu_layers >= 0 && device != "cuda") fail("cli", "--gpu-layers needs --device cuda");
    if (host_sampling && device != "cuda") fail("cli", "--host-sampling needs --device cuda");
    executor_options o;
    o.device = device;
    o.n_ctx = ctx;
    o.kv_type = kv_dtype();
    o.threads = thread_count();
    o.cpus = cpu_ids();
    o.model = options();
    o.gpu_layers = gpu_layers;
    o.host_sampling = host_sampling;
    return o;
}

std::string model_flags::model_path() const {
    return model.empty() ? default_model_path() : model;
}

model_options model_flags::options() const {
    model_options o;
    o.load.use_mmap = !no_mmap;
    o.load.mlock = mlock;
    o.load.prefault = prefault;
    o.load.hugepages = hugepages;
    o.repack = parse_repack_mode(repack);
    return o;
}

std::string model_flags::memory_mode() const {
    std::string m = hugepages ? "hugepages" : no_mmap ? "no-mmap" : "mmap";
    if (prefault) m += "+prefault";
    if (mlock) m += "+mlock";
    return m;
}

uint32_t model_flags::context_for(uint32_t n_ctx_train) const {
    return ctx ? ctx : std::min<uint32_t>(n_ctx_train, 4096);
}

int model_flags::thread_count() const {
    if (threads > 0) return threads;
    return cpu_mask.empty() ? thread_pool::default_threads() : int(cpu_ids().size());
}

std::vector<int> model_flags::cpu_ids() const {
    if (cpu_mask.empty()) return thread_pool::default_cpus(thread_count());
    const std::vector<int> ids = thread_pool::parse_cpu_list(cpu_mask);
    if (threads > 0 && int(ids.size()) < threads)
        fail("cli", "--cpu-mask lists {} CPUs for {} threads", ids.size(), threads);
    return ids;
}

}  // namespace memtile::cli
