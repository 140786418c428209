// The CUDA backend's interface in builds without it (MEMTILE_CUDA=OFF or no nvcc at configure time).
#include "backends/cuda/cuda-backend.h"
#include "core/error.h"

namespace memtile::cuda {
namespace {
[[noreturn]] void not_compiled() {
    fail("cuda", "memtile was built without the CUDA backend (configure with nvcc available, MEMTILE_CUDA=ON)");
}
}  // namespace
}  // namespace memtile::cuda

// Definitions by qualified name: one whose signature no longer matches a declaration of cuda-backend.h is a compile
// error (not a new overload that only fails to link in a CPU-only build); CMakeLists.txt compiles this file in CUDA
// builds too, for that check.
namespace memtile {

bool cuda::compiled() {
    return false;
}
int cuda::device_count() {
    return 0;
}
std::string cuda::device_description() {
    return "CUDA backend not compiled in";
}
void cuda::require_device() {
    not_compiled();
}
void cuda::load_blas() {
    not_compiled();
}
cuda::bandwidth_probe cuda::probe_bandwidth() {
    not_compiled();
}
double cuda::bench_matvec(dtype, int64_t, int64_t, int, int, int, bool) {
    not_compiled();
}
double cuda::bench_matvec_bits(dtype, int64_t, int64_t, int, unsigned, bool, int, int) {
    not_compiled();
}
std::vector<cuda::boundary_figures> cuda::bench_boundaries(const std::vector<uint64_t>&, const std::vector<int>&, int) {
    not_compiled();
}
std::vector<float> cuda::matvec_gguf_rows(dtype, const uint8_t*, int64_t, int64_t, const float*) {
    not_compiled();
}
std::vector<float> cuda::qkm_products_gguf(const uint8_t*, int64_t, const uint8_t*, int64_t, int64_t, const float*,
                                           unsigned) {
    not_compiled();
}
std::vector<float> cuda::attention_check(const std::vector<std::vector<float>>&, int, int, int, float, bool, int, int,
                                         int, int) {
    not_compiled();
}
std::vector<float> cuda::embed_gguf_row(dtype, const uint8_t*, int64_t, int64_t, int32_t) {
    not_compiled();
}
std::vector<int32_t> cuda::argmax_rows_check(const std::vector<float>&, int, int) {
    not_compiled();
}
void cuda::set_pdl(bool) {
    not_compiled();
}
void cuda::set_attention_group(int) {
    not_compiled();
}
void cuda::set_attention_pipe(int) {
    not_compiled();
}
void cuda::set_norm_fusion(int) {
    not_compiled();
}
int cuda::norm_fusion() {
    not_compiled();
}
void cuda::set_q6k_variant(int, int) {
    not_compiled();
}
int cuda::q6k_variant() {
    not_compiled();
}
void cuda::set_decode_fusion(unsigned) {
    not_compiled();
}
void cuda::set_matvec_early(int) {
    not_compiled();
}
void cuda::set_q4k_matvec(int) {
    not_compiled();
}
int cuda::q4k_matvec() {
    not_compiled();
}
void cuda::set_matvec_prefetch(int, unsigned, int) {
    not_compiled();
}
void cuda::set_norm_loads(int) {
    not_compiled();
}
double cuda::check_batch_products(dtype, int64_t, int64_t, int, uint64_t) {
    not_compiled();
}
std::pair<int64_t, double> cuda::check_batch_q4k_xs(int64_t, int64_t, int, int, uint64_t) {
    not_compiled();
}
double cuda::bench_gemm_f16(int, int64_t, int64_t, int) {
    not_compiled();
}
void cuda::set_prefill_options(const prefill_options&) {}
cuda::prefill_options cuda::get_prefill_options() {
    return {};
}
std::unique_ptr<cuda::logits_sampler> cuda::logits_sampler::create(int) {
    not_compiled();
}
std::unique_ptr<cuda::decoder> cuda::decoder::load(std::shared_ptr<gguf_file>, uint32_t, uint32_t) {
    not_compiled();
}
std::unique_ptr<cuda::decoder> cuda::decoder::random(const model_config&, file_type, uint32_t, uint64_t) {
    not_compiled();
}

}  // namespace memtile
