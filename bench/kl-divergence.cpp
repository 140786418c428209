// KL divergence of a model's next-token distribution from a reference model's, over a text:
//   bench-kl-divergence REF.gguf TEST.gguf TEXT_FILE [max_tokens=8192] [window=512]
// Prints perplexity of both, mean and max KL(ref || test) in nats, and top-1 agreement. Typical use: the
// quantized default model against its F32 conversion on the held-out validation text.
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <vector>

#include "core/thread-pool.h"
#include "guarded-main.h"
#include "models/transformer.h"
#include "tokenizer/tokenizer.h"

using namespace memtile;

namespace {

void log_softmax(std::span<const float> l, std::vector<double>& out) {
    const double mx = *std::max_element(l.begin(), l.end());
    double sum = 0;
    for (float v : l) sum += std::exp(double(v) - mx);
    const double lse = mx + std::log(sum);
    out.resize(l.size());
    for (size_t i = 0; i < l.size(); i++) out[i] = double(l[i]) - lse;
}

}  // namespace

static int bench_main(int argc, char** argv) {
    if (argc < 4) {
        fmt::print(stderr, "usage: {} REF.gguf TEST.gguf TEXT_FILE [max_tokens] [window]\n", argv[0]);
        return 2;
    }
    const size_t max_tokens = argc > 4 ? std::stoul(argv[4]) : 8192, window = argc > 5 ? std::stoul(argv[5]) : 512;
    auto ref = transformer::load(argv[1]);
    auto test = transformer::load(argv[2]);
    auto tok = tokenizer::from_gguf(ref->file());
    std::ifstream f(argv[3], std::ios::binary);
    const std::string text(std::istreambuf_iterator<char>(f), {});
    tokenize_options o;
    o.add_special = false;
    o.parse_special = true;
    auto ids = tok->tokenize(text, o);
    if (ids.size() > max_tokens) ids.resize(max_tokens);
    thread_pool pool(thread_pool::default_threads());
    double kl_sum = 0, kl_max = 0, nll_ref = 0, nll_test = 0;
    size_t n = 0, agree = 0;
    std::vector<double> lr, lt;
    const size_t V = ref->config().n_vocab;
    for (size_t start = 0; start + 1 < ids.size(); start += window) {
        const size_t len = std::min(window, ids.size() - start);
        const std::vector<int32_t> chunk(ids.begin() + long(start), ids.begin() + long(start + len));
        forward_context cr(*ref, uint32_t(window), dtype::f32, pool), ct(*test, uint32_t(window), dtype::f32, pool);
        cr.forward(chunk, true);
        ct.forward(chunk, true);
        for (size_t t = 0; t + 1 < len; t++) {
            log_softmax(cr.logits().subspan(t * V, V), lr);
            log_softmax(ct.logits().subspan(t * V, V), lt);
            double kl = 0;
            for (size_t i = 0; i < V; i++) kl += std::exp(lr[i]) * (lr[i] - lt[i]);
            kl_sum += kl;
            kl_max = std::max(kl_max, kl);
            const int32_t next = chunk[t + 1];
            nll_ref -= lr[size_t(next)];
            nll_test -= lt[size_t(next)];
            agree += std::max_element(lr.begin(), lr.end()) - lr.begin() ==
                     std::max_element(lt.begin(), lt.end()) - lt.begin();
            n++;
        }
    }
    fmt::print(
        "tokens scored: {}\nperplexity ref {:.4f}, test {:.4f}\nKL(ref||test) mean {:.6f} nats, max {:.4f}\n"
        "top-1 agreement {:.2f} %\n",
        n, std::exp(nll_ref / double(n)), std::exp(nll_test / double(n)), kl_sum / double(n), kl_max,
        100.0 * double(agree) / double(n));
    return 0;
}

int main(int argc, char** argv) {
    return memtile::bench::guarded_main(argc, argv, bench_main);
}
