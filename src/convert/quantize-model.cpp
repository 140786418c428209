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
#include "quant/tensor-stream.h"

namespace memtile {
namespace {}  // namespace

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
    // Per-row sums (sum x^2, sum (q - x)^2), added in row order after each tensor, so the result does not depend
    // on which thread took which rows.
    std::vector<std::array<double, 2>> sums;
    std::vector<std::vector<float>> back(size_t(pool.size()));  // per-thread dequantized rows
    for (size_t ti = 0; ti < g->tensors().size(); ti++) {
        const auto& t = g->tensors()[ti];
        const dtype to = types[ti];
        const int64_t row_len = int64_t(t.dims[0]);
        const uint64_t in_rb = t.row_size();
        sums.assign(size_t(t.n_rows()), std::array<double, 2>{0, 0});
        auto fill = [&](int, int64_t row0, int64_t n, float* dst) {
            dequantize_rows(t.type, t.data + uint64_t(row0) * in_rb, dst, n, row_len);
        };
        auto measure = [&](int th, int64_t row0, int64_t n, const float* x, const uint8_t* enc) {
            auto& y = back[size_t(th)];
            y.resize(size_t(n * row_len));
            dequantize_rows(to, enc, y.data(), n, row_len);
            for (int64_t r = 0; r < n; r++) {
                double sx = 0, se = 0;
                for (int64_t i = r * row_len; i < (r + 1) * row_len; i++) {
                    const double d = double(y[size_t(i)]) - double(x[i]);
                    sx += double(x[i]) * double(x[i]);
                    se += d * d;
                }
                sums[size_t(row0 + r)] = {sx, se};
            }
        };
        write_encoded_tensor(w, to, int64_t(t.n_rows()), row_len, pool, fill, measure, o.progress ? &bar : nullptr);
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
