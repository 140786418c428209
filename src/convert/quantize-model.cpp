#include "convert/quantize-model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <map>

#include "core/error.h"
#include "core/progress.h"
#include "core/thread-pool.h"
#include "gguf/gguf-file.h"
#include "gguf/gguf-writer.h"
#include "models/model-config.h"
#include "models/tensor-table.h"
#include "quant/encode.h"
#include "quant/quant.h"

namespace memtile {
namespace {

constexpr int64_t k_chunk_elems = int64_t(1) << 22;  // 16 MiB of f32 per chunk

}  // namespace

quantize_result quantize_model(const std::string& in_path, const std::string& out_path, const quantize_options& o) {
    if (!file_type_writable(o.type))
        fail("quantize", "cannot write file type {} (writable: {})", file_type_name(o.type), writable_file_types());
    auto g = gguf_file::open(in_path);
    const model_config c = read_model_config(*g);
    std::map<std::string, tensor_spec> specs;
    for (auto& s : tensor_table(c)) specs.emplace(s.name, s);

    gguf_writer w(g->alignment());
    for (const auto& [k, v] : g->metadata()) w.set(k, v);
    w.set("general.file_type", gguf_value::u32(static_cast<uint32_t>(o.type)));
    if (traits(file_type_base(o.type)).quantized) w.set("general.quantization_version", gguf_value::u32(2));

    quantize_result r;
    std::vector<dtype> types;
    uint64_t total = 0;
    for (const auto& t : g->tensors()) {
        if (!can_dequantize(t.type))
            fail("quantize", "{}: tensor '{}' has type {}, which memtile cannot dequantize", in_path, t.name,
                 dtype_name(t.type));
        dtype to = t.type;  // tensors outside the architecture's table are copied in their own type
        if (auto it = specs.find(t.name); it != specs.end()) {
            tensor_spec s = it->second;
            s.dims = t.dims;
            to = tensor_type_for(o.type, s, c);
        }
        if (!can_encode(to))
            fail("quantize", "tensor '{}' needs type {}, which has no encoder", t.name, dtype_name(to));
        types.push_back(to);
        w.add_tensor(t.name, to, t.dims);
        total += w.tensor_bytes(w.tensor_count() - 1);
        r.tensors.push_back({t.name, t.type, to, t.n_elems, 0, 0});
        r.in_bytes += t.n_bytes;
    }
    std::filesystem::path out(out_path);
    if (out.has_parent_path()) std::filesystem::create_directories(out.parent_path());
    w.begin(out_path);

    thread_pool pool(o.threads > 0 ? o.threads : thread_pool::default_threads());
    progress_bar bar(fmt::format("quantize {}", file_type_name(o.type)), o.progress ? total : 0);
    std::vector<float> f32, back;
    std::vector<uint8_t> enc;
    // Per-thread sums (sum x^2, sum (q - x)^2), merged after each tensor so the result does not depend on timing.
    std::vector<std::array<double, 2>> sums(size_t(pool.size()));
    for (size_t ti = 0; ti < g->tensors().size(); ti++) {
        const auto& t = g->tensors()[ti];
        const dtype to = types[ti];
        const int64_t row_len = int64_t(t.dims[0]);
        const int64_t n_rows = int64_t(t.n_rows());
        const int64_t chunk_rows = std::max<int64_t>(1, k_chunk_elems / std::max<int64_t>(row_len, 1));
        const uint64_t in_rb = t.row_size(), out_rb = row_bytes(to, uint64_t(row_len));
        std::fill(sums.begin(), sums.end(), std::array<double, 2>{0, 0});
        for (int64_t r0 = 0; r0 < n_rows; r0 += chunk_rows) {
            const int64_t nr = std::min(chunk_rows, n_rows - r0);
            f32.resize(size_t(nr * row_len));
            back.resize(f32.size());
            enc.resize(size_t(uint64_t(nr) * out_rb));
            pool.parallel_for(nr, [&](int th, int64_t a, int64_t b) {
                const float* x = f32.data() + a * row_len;
                dequantize_rows(t.type, t.data + uint64_t(r0 + a) * in_rb, f32.data() + a * row_len, b - a, row_len);
                encode_rows(to, x, enc.data() + uint64_t(a) * out_rb, b - a, row_len);
                dequantize_rows(to, enc.data() + uint64_t(a) * out_rb, back.data() + a * row_len, b - a, row_len);
                double sx = 0, se = 0;
                for (int64_t i = 0; i < (b - a) * row_len; i++) {
                    const double d = double(back[size_t(a * row_len + i)]) - double(x[i]);
                    sx += double(x[i]) * double(x[i]);
                    se += d * d;
                }
                sums[size_t(th)][0] += sx;
                sums[size_t(th)][1] += se;
            });
            w.write_tensor_data(enc);
            if (o.progress) bar.advance(enc.size());
        }
        double sx = 0, se = 0;
        for (const auto& s : sums) sx += s[0], se += s[1];
        const double n = double(std::max<uint64_t>(t.n_elems, 1));
        r.tensors[ti].rms_input = std::sqrt(sx / n);
        r.tensors[ti].rms_error = std::sqrt(se / n);
    }
    w.finish();
    bar.finish();
    r.out_bytes = std::filesystem::file_size(out);
    return r;
}

}  // namespace memtile
