// The CUDA backend's interface in builds without it (MEMTILE_CUDA=OFF or no nvcc at configure time).
#include "backends/cuda/cuda-backend.h"
#include "core/error.h"

namespace memtile::cuda {
namespace {
[[noreturn]] void not_compiled() {
    fail("cuda", "memtile was built without the CUDA backend (configure with nvcc available, MEMTILE_CUDA=ON)");
}
}  // namespace

bool compiled() {
    return false;
}
int device_count() {
    return 0;
}
std::string device_description() {
    return "CUDA backend not compiled in";
}
void require_device() {
    not_compiled();
}
void load_blas() {
    not_compiled();
}
bandwidth_probe probe_bandwidth() {
    not_compiled();
}
double bench_matvec(dtype, int64_t, int64_t, int, int, int) {
    not_compiled();
}
std::vector<float> matvec_gguf_rows(dtype, const uint8_t*, int64_t, int64_t, const float*) {
    not_compiled();
}
std::vector<float> qkm_products_gguf(const uint8_t*, int64_t, const uint8_t*, int64_t, int64_t, const float*,
                                     unsigned) {
    not_compiled();
}
std::vector<float> attention_check(const std::vector<std::vector<float>>&, int, int, int, float, bool, int, int, int) {
    not_compiled();
}
std::vector<float> embed_gguf_row(dtype, const uint8_t*, int64_t, int64_t, int32_t) {
    not_compiled();
}
void set_pdl(bool) {
    not_compiled();
}
void set_decode_fusion(unsigned) {
    not_compiled();
}
void set_matvec_early(int) {
    not_compiled();
}
void set_matvec_prefetch(int, unsigned, int) {
    not_compiled();
}
double check_batch_products(dtype, int64_t, int64_t, int, uint64_t) {
    not_compiled();
}
double bench_gemm_f16(int, int64_t, int64_t, int) {
    not_compiled();
}
void set_prefill_options(const prefill_options&) {}
prefill_options get_prefill_options() {
    return {};
}
std::unique_ptr<logits_sampler> logits_sampler::create(int) {
    not_compiled();
}
std::unique_ptr<decoder> decoder::load(std::shared_ptr<gguf_file>, uint32_t, uint32_t) {
    not_compiled();
}
std::unique_ptr<decoder> decoder::random(const model_config&, file_type, uint32_t, uint64_t) {
    not_compiled();
}

}  // namespace memtile::cuda
