#include "convert/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/fp16.h"

namespace memtile {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Largest header accepted: real checkpoints use well under 1 MiB; the limit stops a corrupt length field from
// making the parser walk (and allocate for) hundreds of megabytes.
constexpr uint64_t k_max_header = uint64_t(100) << 20;

struct dtype_row {
    const char* name;
    st_dtype type;
    uint32_t size;
};
constexpr dtype_row k_dtypes[] = {
    {"F32", st_dtype::f32, 4},    {"F16", st_dtype::f16, 2},       {"BF16", st_dtype::bf16, 2},
    {"F64", st_dtype::other, 8},  {"I64", st_dtype::other, 8},     {"I32", st_dtype::other, 4},
    {"I16", st_dtype::other, 2},  {"I8", st_dtype::other, 1},      {"U8", st_dtype::other, 1},
    {"BOOL", st_dtype::other, 1}, {"F8_E4M3", st_dtype::other, 1}, {"F8_E5M2", st_dtype::other, 1},
    {"U16", st_dtype::other, 2},  {"U32", st_dtype::other, 4},     {"U64", st_dtype::other, 8},
};

uint64_t read_json_u64(const json& j, const std::string& path, const std::string& tensor, const char* field) {
    if (!j.is_number_unsigned())
        fail("convert", "{}: tensor '{}': {} entry {} is not a non-negative integer", path, tensor, field, j.dump());
    return j.get<uint64_t>();
}

}  // namespace

void st_tensor::to_f32(uint64_t first, uint64_t n, float* dst) const {
    if (first > n_elems || n > n_elems - first)
        fail("convert", "{}: tensor '{}': elements [{}, {}) requested of {}", file, name, first, first + n, n_elems);
    switch (type) {
        case st_dtype::f32: std::memcpy(dst, data + first * 4, n * 4); return;
        case st_dtype::f16:
        case st_dtype::bf16: {
            const uint8_t* p = data + first * 2;
            const bool half = type == st_dtype::f16;
            for (uint64_t i = 0; i < n; i++) {
                uint16_t h;
                std::memcpy(&h, p + 2 * i, 2);
                dst[i] = half ? fp16_to_f32(h) : bf16_to_f32(h);
            }
            return;
        }
        case st_dtype::other: break;
    }
    fail("convert", "{}: tensor '{}' has dtype {}, which convert does not support (supported: F32, F16, BF16)", file,
         name, dtype_name);
}

std::shared_ptr<safetensors_file> safetensors_file::open(const std::string& path) {
    return parse(mapped_file::open(path));
}

std::shared_ptr<safetensors_file> safetensors_file::parse(std::shared_ptr<mapped_file> file) {
    const std::string& path = file->path();
    const uint64_t size = file->size();
    if (size < 8) fail("convert", "{}: {} bytes, too short for the 8-byte safetensors header length", path, size);
    uint64_t n_header = 0;
    std::memcpy(&n_header, file->data(), 8);
    if (n_header > size - 8)
        fail("convert",
             "{}: header length {} exceeds the {} bytes after the length field (truncated or not a "
             "safetensors file)",
             path, n_header, size - 8);
    if (n_header > k_max_header)
        fail("convert", "{}: header length {} exceeds the {}-byte limit", path, n_header, k_max_header);
    const char* hp = reinterpret_cast<const char*>(file->data() + 8);
    json header = json::parse(hp, hp + n_header, nullptr, false);
    if (header.is_discarded() || !header.is_object())
        fail("convert", "{}: the {}-byte header at offset 8 is not a JSON object", path, n_header);

    auto out = std::make_shared<safetensors_file>();
    out->file_ = file;
    const uint64_t data_start = 8 + n_header, data_size = size - data_start;
    for (auto& [name, info] : header.items()) {
        if (name == "__metadata__") {
            if (info.is_object())
                for (auto& [k, v] : info.items())
                    if (v.is_string()) out->metadata_[k] = v.get<std::string>();
            continue;
        }
        if (!info.is_object()) fail("convert", "{}: tensor '{}': header entry is not an object", path, name);
        const auto dt = info.find("dtype"), sh = info.find("shape"), off = info.find("data_offsets");
        if (dt == info.end() || !dt->is_string() || sh == info.end() || !sh->is_array() || off == info.end() ||
            !off->is_array() || off->size() != 2)
            fail("convert",
                 "{}: tensor '{}': header entry needs dtype (string), shape (array) and data_offsets "
                 "([begin, end])",
                 path, name);
        st_tensor t;
        t.name = name;
        t.file = path;
        t.dtype_name = dt->get<std::string>();
        uint32_t elem_size = 0;
        for (const auto& r : k_dtypes)
            if (t.dtype_name == r.name) t.type = r.type, elem_size = r.size;
        if (!elem_size) fail("convert", "{}: tensor '{}': unknown dtype '{}'", path, name, t.dtype_name);
        if (sh->size() > 8) fail("convert", "{}: tensor '{}': {} dimensions", path, name, sh->size());
        t.n_elems = 1;
        for (const auto& d : *sh) {
            const uint64_t v = read_json_u64(d, path, name, "shape");
            t.shape.push_back(v);
            // Overflow-safe: the element count can never exceed the data bytes, which fit the file.
            if (v && t.n_elems > data_size / v)
                fail("convert", "{}: tensor '{}': shape {} is larger than the file", path, name, sh->dump());
            t.n_elems *= v;
        }
        const uint64_t begin = read_json_u64((*off)[0], path, name, "data_offsets");
        const uint64_t end = read_json_u64((*off)[1], path, name, "data_offsets");
        if (begin > end || end > data_size)
            fail("convert",
                 "{}: tensor '{}': data_offsets [{}, {}) out of range (data section holds {} bytes at file "
                 "offset {})",
                 path, name, begin, end, data_size, data_start);
        if (end - begin != t.n_elems * elem_size)
            fail("convert",
                 "{}: tensor '{}': data_offsets [{}, {}) hold {} bytes, but {} {} elements of shape {} "
                 "need {}",
                 path, name, begin, end, end - begin, t.n_elems, t.dtype_name, sh->dump(), t.n_elems * elem_size);
        t.data = file->data() + data_start + begin;
        t.n_bytes = end - begin;
        out->tensors_.push_back(std::move(t));
    }
    std::sort(out->tensors_.begin(), out->tensors_.end(),
              [](const st_tensor& a, const st_tensor& b) { return a.data < b.data; });
    for (size_t i = 1; i < out->tensors_.size(); i++) {
        const auto& a = out->tensors_[i - 1];
        const auto& b = out->tensors_[i];
        if (a.data + a.n_bytes > b.data)
            fail("convert", "{}: tensors '{}' and '{}' overlap in the data section", path, a.name, b.name);
    }
    return out;
}

safetensors_set safetensors_set::open_dir(const std::string& dir) {
    safetensors_set s;
    s.dir_ = dir;
    const fs::path root(dir);
    std::map<std::string, std::string> weight_map;  // tensor → shard file name (from the index)
    std::vector<std::string> shards;
    const fs::path index = root / "model.safetensors.index.json";
    if (fs::exists(index)) {
        std::ifstream in(index);
        json j = json::parse(in, nullptr, false);
        if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
            fail("convert", "{}: not a JSON object with a weight_map object", index.string());
        for (auto& [name, shard] : j["weight_map"].items()) {
            if (!shard.is_string()) fail("convert", "{}: weight_map['{}'] is not a string", index.string(), name);
            const std::string f = shard.get<std::string>();
            if (f.empty() || f.find('/') != std::string::npos || f.find("..") != std::string::npos)
                fail("convert", "{}: weight_map['{}'] = '{}' is not a file name in the folder", index.string(), name,
                     f);
            weight_map[name] = f;
            if (std::find(shards.begin(), shards.end(), f) == shards.end()) shards.push_back(f);
        }
    } else if (fs::exists(root / "model.safetensors")) {
        shards.push_back("model.safetensors");
    } else if (fs::is_directory(root)) {
        for (const auto& e : fs::directory_iterator(root))
            if (e.path().extension() == ".safetensors") shards.push_back(e.path().filename().string());
        std::sort(shards.begin(), shards.end());
    }
    if (shards.empty()) fail("convert", "{}: no *.safetensors files (and no model.safetensors.index.json)", dir);
    std::map<std::string, size_t> shard_of_file;
    for (const auto& f : shards) {
        const fs::path p = root / f;
        if (!fs::exists(p)) fail("convert", "{}: shard '{}' listed in the index does not exist", dir, f);
        s.files_.push_back(safetensors_file::open(p.string()));
        shard_of_file[f] = s.files_.size() - 1;
        for (const auto& t : s.files_.back()->tensors()) {
            if (!weight_map.empty()) {
                auto it = weight_map.find(t.name);
                if (it == weight_map.end() || it->second != f) continue;  // the index decides which copy is used
            }
            if (!s.index_.emplace(t.name, &t).second)
                fail("convert", "{}: tensor '{}' appears in more than one shard", dir, t.name);
        }
    }
    for (const auto& [name, f] : weight_map)
        if (!s.index_.count(name))
            fail("convert", "{}: the index puts tensor '{}' in '{}', which does not contain it", dir, name, f);
    return s;
}

const st_tensor* safetensors_set::find(const std::string& name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : it->second;
}

const st_tensor& safetensors_set::require(const std::string& name) const {
    const st_tensor* t = find(name);
    if (!t) fail("convert", "{}: checkpoint has no tensor '{}'", dir_, name);
    return *t;
}

std::vector<std::string> safetensors_set::names() const {
    std::vector<std::string> n;
    for (const auto& [k, v] : index_) n.push_back(k);
    return n;
}

}  // namespace memtile
