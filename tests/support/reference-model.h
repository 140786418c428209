// A deliberately simple f32 reference of the Llama-family forward pass, written independently of the
// engine (no shared ops): every weight dequantized to f32 up front, full softmax attention over an f32
// cache, double accumulation in dot products. Slow and obvious; the oracle for the engine's logits.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "gguf/gguf-file.h"
#include "models/model-config.h"
#include "quant/quant.h"

namespace memtile::test {

class reference_model {
public:
    explicit reference_model(const gguf_file& g) : c_(read_model_config(g)) {
        auto get = [&](const std::string& name) {
            const auto* t = g.find_tensor(name);
            return t ? dequantize_tensor(t->type, t->data, int64_t(t->n_elems / t->dims[0]), int64_t(t->dims[0]))
                     : std::vector<float>();
        };
        emb_ = get("token_embd.weight");
        out_ = get("output.weight");
        if (out_.empty()) out_ = emb_;
        out_norm_ = get("output_norm.weight");
        rope_freqs_ = get("rope_freqs.weight");
        for (uint32_t l = 0; l < c_.n_layer; l++) {
            const std::string p = "blk." + std::to_string(l) + ".";
            layer L;
            L.attn_norm = get(p + "attn_norm.weight");
            L.ffn_norm = get(p + "ffn_norm.weight");
            L.wo = get(p + "attn_output.weight");
            L.wdown = get(p + "ffn_down.weight");
            const auto qkv = get(p + "attn_qkv.weight");
            const size_t E = c_.n_embd, Q = c_.q_dim(), KV = c_.kv_dim(), F = c_.n_ff;
            if (!qkv.empty()) {
                L.wq.assign(qkv.begin(), qkv.begin() + long(Q * E));
                L.wk.assign(qkv.begin() + long(Q * E), qkv.begin() + long((Q + KV) * E));
                L.wv.assign(qkv.begin() + long((Q + KV) * E), qkv.end());
            } else {
                L.wq = get(p + "attn_q.weight");
                L.wk = get(p + "attn_k.weight");
                L.wv = get(p + "attn_v.weight");
            }
            L.bq = get(p + "attn_q.bias");
            L.bk = get(p + "attn_k.bias");
            L.bv = get(p + "attn_v.bias");
            const auto gate = get(p + "ffn_gate.weight");
            const auto up = get(p + "ffn_up.weight");
            if (gate.empty()) {  // fused [E, 2F]: gate rows first
                L.wgate.assign(up.begin(), up.begin() + long(F * E));
                L.wup.assign(up.begin() + long(F * E), up.end());
            } else {
                L.wgate = gate;
                L.wup = up;
            }
            layers_.push_back(std::move(L));
        }
        keys_.resize(c_.n_layer);
        values_.resize(c_.n_layer);
    }

    const model_config& config() const { return c_; }

    // Appends one token at the next position and returns its logits.
    std::vector<float> step(int token) {
        const size_t E = c_.n_embd, Q = c_.q_dim(), KV = c_.kv_dim(), F = c_.n_ff, hd = c_.head_dim;
        const int pos = n_past_++;
        std::vector<float> x(emb_.begin() + long(size_t(token) * E), emb_.begin() + long(size_t(token + 1) * E));
        for (uint32_t l = 0; l < c_.n_layer; l++) {
            layer& L = layers_[l];
            auto h = norm(x, L.attn_norm);
            auto q = matvec(L.wq, h, Q), k = matvec(L.wk, h, KV), v = matvec(L.wv, h, KV);
            if (!L.bq.empty())
                for (size_t i = 0; i < Q; i++) q[i] += L.bq[i];
            if (!L.bk.empty())
                for (size_t i = 0; i < KV; i++) k[i] += L.bk[i], v[i] += L.bv[i];
            rotate(q, c_.n_head, pos);
            rotate(k, c_.n_head_kv, pos);
            keys_[l].push_back(k);
            values_[l].push_back(v);
            std::vector<float> att(Q, 0.0f);
            const size_t group = c_.n_head / c_.n_head_kv;
            for (size_t hh = 0; hh < c_.n_head; hh++) {
                const size_t kvh = hh / group;
                std::vector<double> s(size_t(pos + 1));
                double mx = -1e300;
                for (int j = 0; j <= pos; j++) {
                    double d = 0;
                    for (size_t i = 0; i < hd; i++) d += double(q[hh * hd + i]) * keys_[l][size_t(j)][kvh * hd + i];
                    s[size_t(j)] = d / std::sqrt(double(hd));
                    mx = std::max(mx, s[size_t(j)]);
                }
                double sum = 0;
                for (auto& e : s) sum += (e = std::exp(e - mx));
                for (int j = 0; j <= pos; j++)
                    for (size_t i = 0; i < hd; i++)
                        att[hh * hd + i] += float(s[size_t(j)] / sum * values_[l][size_t(j)][kvh * hd + i]);
            }
            auto o = matvec(L.wo, att, E);
            for (size_t i = 0; i < E; i++) x[i] += o[i];
            h = norm(x, L.ffn_norm);
            auto g = matvec(L.wgate, h, F), u = matvec(L.wup, h, F);
            for (size_t i = 0; i < F; i++) g[i] = float(g[i] / (1.0 + std::exp(-double(g[i]))) * u[i]);
            auto d = matvec(L.wdown, g, E);
            for (size_t i = 0; i < E; i++) x[i] += d[i];
        }
        return matvec(out_, norm(x, out_norm_), c_.n_vocab);
    }

private:
    struct layer {
        std::vector<float> attn_norm, ffn_norm, wq, wk, wv, wo, bq, bk, bv, wgate, wup, wdown;
    };
    std::vector<float> norm(const std::vector<float>& x, const std::vector<float>& w) const {
        double ss = 0;
        for (float v : x) ss += double(v) * v;
        const double r = 1.0 / std::sqrt(ss / double(x.size()) + double(c_.norm_eps));
        std::vector<float> y(x.size());
        for (size_t i = 0; i < x.size(); i++) y[i] = float(x[i] * r * w[i]);
        return y;
    }
    static std::vector<float> matvec(const std::vector<float>& w, const std::vector<float>& x, size_t n_out) {
        std::vector<float> y(n_out);
        for (size_t o = 0; o < n_out; o++) {
            double s = 0;
            for (size_t i = 0; i < x.size(); i++) s += double(w[o * x.size() + i]) * x[i];
            y[o] = float(s);
        }
        return y;
    }
    void rotate(std::vector<float>& v, size_t n_heads, int pos) const {
        const size_t hd = c_.head_dim, half = c_.n_rot / 2;
        for (size_t h = 0; h < n_heads; h++)
            for (size_t i = 0; i < half; i++) {
                double theta = pos * std::pow(double(c_.rope_freq_base), -2.0 * double(i) / double(c_.n_rot));
                if (!rope_freqs_.empty()) theta /= rope_freqs_[i];
                const size_t a = h * hd + (c_.rope == rope_style::normal ? 2 * i : i);
                const size_t b = h * hd + (c_.rope == rope_style::normal ? 2 * i + 1 : i + half);
                const double x0 = v[a], x1 = v[b];
                v[a] = float(x0 * std::cos(theta) - x1 * std::sin(theta));
                v[b] = float(x0 * std::sin(theta) + x1 * std::cos(theta));
            }
    }

    model_config c_;
    std::vector<float> emb_, out_, out_norm_, rope_freqs_;
    std::vector<layer> layers_;
    std::vector<std::vector<std::vector<float>>> keys_, values_;
    int n_past_ = 0;
};

inline double nmse(const std::vector<float>& ref, std::span<const float> x) {
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        num += (double(x[i]) - ref[i]) * (double(x[i]) - ref[i]);
        den += double(ref[i]) * ref[i];
    }
    return den > 0 ? num / den : num;
}

}  // namespace memtile::test
