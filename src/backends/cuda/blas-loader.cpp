#include "backends/cuda/blas-loader.h"

#include <dlfcn.h>
#include <fmt/core.h>

#include <string>

#include "backends/cuda/cuda-backend.h"
#include "core/error.h"

namespace memtile::cuda {
namespace {

template <class F>
void resolve(void* lib, const char* name, const std::string& path, F& f) {
    f = reinterpret_cast<F>(dlsym(lib, name));
    if (!f) fail("cuda", "{} has no symbol {} (cuBLAS {} expected)", path, name, CUBLAS_VER_MAJOR);
}

blas_api load() {
    const std::string soname = fmt::format("libcublas.so.{}", CUBLAS_VER_MAJOR);
    std::string path = soname;
    void* lib = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
    std::string first_error = lib ? "" : dlerror();
#ifdef MEMTILE_CUDA_LIBRARY_DIR
    if (!lib) {
        path = std::string(MEMTILE_CUDA_LIBRARY_DIR) + "/" + soname;
        lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    }
#endif
    if (!lib)
        fail("cuda", "cannot load {} (needed for the prefill GEMMs): {}; add its directory to LD_LIBRARY_PATH", soname,
             first_error);
    blas_api a;
    resolve(lib, "cublasCreate_v2", path, a.create);
    resolve(lib, "cublasDestroy_v2", path, a.destroy);
    resolve(lib, "cublasSetStream_v2", path, a.set_stream);
    resolve(lib, "cublasGemmEx", path, a.gemm_ex);
    return a;  // the library stays loaded for the life of the process
}

}  // namespace

const blas_api& blas() {
    static const blas_api api = load();
    return api;
}

void load_blas() {
    blas();
}

void check_blas(cublasStatus_t e, const char* what) {
    if (e != CUBLAS_STATUS_SUCCESS) fail("cuda", "{} failed: cuBLAS status {}", what, int(e));
}

}  // namespace memtile::cuda
