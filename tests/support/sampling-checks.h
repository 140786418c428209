// Checks of the GPU sampler (backends/cuda/gpu-sampler.h) against memtile::sampler, shared by the GoogleTest
// suite (skipped without a device) and the device-machine driver tests/cuda/cuda-check.cpp.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda/cuda-backend.h"
#include "core/rng.h"
#include "gguf/gguf-file.h"
#include "sampling/sampler.h"
#include "support/sampling-reference.h"

namespace memtile::test {

// A mismatch counts as near a boundary when the reference puts a decision within this (relative) distance.
constexpr double near_boundary = 1e-5;

// Greedy with and without penalties, and temperature x top-k (off, 1, 40, 2000) x top-p x min-p x penalties.
inline std::vector<sampling_params> sampler_param_sets() {
    std::vector<sampling_params> sets;
    auto penalties = [](sampling_params p, int kind) {
        if (kind == 1) p.repeat_penalty = 1.3f;
        if (kind == 2) {
            p.repeat_penalty = 1.1f;
            p.presence_penalty = 0.4f;
            p.frequency_penalty = 0.3f;
        }
        return p;
    };
    for (int pen = 0; pen < 3; pen++) {
        sampling_params g;
        g.temperature = 0;
        sets.push_back(penalties(g, pen));
    }
    for (float t : {0.8f, 1.5f})
        for (int k : {0, 1, 40, 2000})
            for (float tp : {1.0f, 0.95f, 0.6f})
                for (float mp : {0.0f, 0.05f, 0.25f})
                    for (int pen = 0; pen < 3; pen++) {
                        sampling_params p;
                        p.temperature = t;
                        p.top_k = k;
                        p.top_p = tp;
                        p.min_p = mp;
                        sets.push_back(penalties(p, pen));
                    }
    return sets;
}

// The four settings the decoder-path checks run: the defaults, greedy, greedy with a repeat penalty, and a
// wide one (temperature 1.2, top-k off, top-p 0.9, presence and frequency penalties).
inline std::vector<std::pair<std::string, sampling_params>> decoder_sampling_sets() {
    sampling_params greedy, greedy_pen, wide;
    greedy.temperature = 0;
    greedy_pen.temperature = 0;
    greedy_pen.repeat_penalty = 1.3f;
    wide.temperature = 1.2f;
    wide.top_k = 0;
    wide.top_p = 0.9f;
    wide.presence_penalty = 0.5f;
    wide.frequency_penalty = 0.1f;
    return {{"default", sampling_params{}}, {"greedy", greedy}, {"greedy+repeat", greedy_pen}, {"wide", wide}};
}

inline std::vector<sampling_params> decoder_sampling_params() {
    std::vector<sampling_params> v;
    for (const auto& s : decoder_sampling_sets()) v.push_back(s.second);
    return v;
}

// Logits of three kinds: 0 Gaussian (sd 3), 1 peaked (sd 8), 2 coarse (multiples of 0.5, sd 2: many exact ties,
// and +0 / -0 both present), each with a few high outliers.
inline std::vector<float> test_logits(int n, int kind, uint64_t seed) {
    rng r(seed);
    std::vector<float> l(static_cast<size_t>(n));
    const float sd = kind == 1 ? 8.0f : kind == 2 ? 2.0f : 3.0f;
    for (auto& v : l) {
        v = r.normal() * sd;
        if (kind == 2) v = std::round(v * 2) / 2;
    }
    for (int i = 0; i < 5; i++) l[size_t(r.next() % uint64_t(n))] += 6.0f;
    if (kind == 2 && n > 4) l[3] = -0.0f;
    return l;
}

struct sampler_comparison {
    int draws = 0, equal = 0, near_boundary = 0, unexplained = 0;
    std::string first_unexplained;
};

inline void tally(sampler_comparison& c, std::span<const float> logits, const sampling_draw& d, int32_t host,
                  int32_t gpu) {
    c.draws++;
    if (host == gpu) {
        c.equal++;
        return;
    }
    const auto ref = reference_draw(logits, d);
    if (ref.margin < near_boundary) {
        c.near_boundary++;
        return;
    }
    if (c.unexplained++ == 0) {
        const auto& p = d.params;
        c.first_unexplained = fmt::format(
            "host {} gpu {} reference {} (margin {:.1e}); temp {} top-k {} top-p {} min-p {} repeat {} presence {} "
            "frequency {} u {} penalised ids {}",
            host, gpu, ref.token, ref.margin, p.temperature, p.top_k, p.top_p, p.min_p, p.repeat_penalty,
            p.presence_penalty, p.frequency_penalty, d.u, d.penalty_ids.size());
    }
}

// Every parameter set on its own logits (n_vocab values), draws_per_set draws each: memtile::sampler on the
// host and the GPU sampler with a second sampler of the same seed (its next_draw()), both recording the host's
// token so that the penalty windows stay equal.
inline sampler_comparison compare_gpu_sampler(int n_vocab, int draws_per_set, uint64_t seed) {
    auto gpu = cuda::logits_sampler::create(n_vocab);
    sampler_comparison c;
    int index = 0;
    for (sampling_params p : sampler_param_sets()) {
        p.seed = seed * 1000 + uint64_t(index);
        const auto logits = test_logits(n_vocab, index % 3, seed * 7919 + uint64_t(index));
        gpu->set_logits(logits);
        sampler host(p), dev(p);
        sampling_draw d;
        for (int i = 0; i < draws_per_set; i++) {
            const int32_t h = host.sample(logits);
            dev.next_draw(d);
            tally(c, logits, d, h, gpu->sample(d));
            host.accept(h);
            dev.accept(h);
        }
        index++;
    }
    return c;
}

// Batched draws (device_sampler::sample_rows, as memtile serve's steps): the parameter sets in groups of `rows`,
// each row its own logits, sampler and seed; every step draws all rows in one call and each row is compared with
// the host sampler on its logits. with_argmax hands the rows' argmax as the batched step does.
inline sampler_comparison compare_gpu_sampler_rows(int n_vocab, int rows, int draws_per_set, uint64_t seed,
                                                   bool with_argmax) {
    auto gpu = cuda::logits_sampler::create(n_vocab);
    const auto sets = sampler_param_sets();
    const size_t V = size_t(n_vocab);
    sampler_comparison c;
    for (size_t first = 0; first < sets.size(); first += size_t(rows)) {
        const size_t b = std::min(sets.size() - first, size_t(rows));
        std::vector<float> logits(b * V);
        std::vector<sampler> host, dev;
        for (size_t r = 0; r < b; r++) {
            sampling_params p = sets[first + r];
            p.seed = seed * 1000 + uint64_t(first + r) + 17;
            const auto l = test_logits(n_vocab, int((first + r) % 3), seed * 7919 + uint64_t(first + r) * 31 + 5);
            std::copy(l.begin(), l.end(), logits.begin() + std::ptrdiff_t(r * V));
            host.emplace_back(p);
            dev.emplace_back(p);
        }
        std::vector<sampling_draw> d(b);
        for (int i = 0; i < draws_per_set; i++) {
            for (size_t r = 0; r < b; r++) dev[r].next_draw(d[r]);
            const auto got = gpu->sample_rows(logits, d, with_argmax);
            for (size_t r = 0; r < b; r++) {
                const std::span<const float> row(logits.data() + r * V, V);
                const int32_t h = host[r].sample(row);
                tally(c, row, d[r], h, got[r]);
                host[r].accept(h);
                dev[r].accept(h);
            }
        }
    }
    return c;
}

struct batch_sampling_comparison {
    int tokens = 0;     // tokens compared (all sequences, until a sequence's first difference)
    int differ = 0;     // sequences whose tokens differ somewhere
    int near = 0;       // of those, the first difference near a boundary
    std::string first;  // the first difference not near a boundary
};

// The batched decoder's step_sample (draws on the GPU) against step + memtile::sampler on the copied logits,
// n_seq sequences each with its own parameters (sets[s % size]) and seed, two batch decoders on one model's
// weights, each fed its own tokens; the step order of the sequences is reversed every other step, and every
// fifth step leaves sequence 0 out, so that rows and sequences do not line up.
inline batch_sampling_comparison compare_batch_sampling(const std::string& path, int n_seq, int n_steps,
                                                        const std::vector<sampling_params>& sets) {
    const uint32_t n_ctx = uint32_t(8 + 3 * n_seq + n_steps + 1);
    auto d = cuda::decoder::load(gguf_file::open(path), n_ctx);
    auto a = d->make_batch(n_seq, n_ctx), b = d->make_batch(n_seq, n_ctx);
    const size_t V = d->config().n_vocab;
    std::vector<sampler> sa, sb;
    std::vector<int32_t> next_a(static_cast<size_t>(n_seq)), next_b(static_cast<size_t>(n_seq));
    std::vector<bool> stopped(size_t(n_seq), false);
    batch_sampling_comparison r;
    for (int s = 0; s < n_seq; s++) {
        sampling_params p = sets[size_t(s) % sets.size()];
        p.seed = 100 + uint64_t(s);
        sa.emplace_back(p);
        sb.emplace_back(p);
        std::vector<int32_t> prompt;
        for (int j = 0; j < 4 + 3 * s; j++) prompt.push_back(int32_t((3 + 11 * uint32_t(s) + 37 * uint32_t(j)) % V));
        for (int32_t t : prompt) {
            sa.back().accept(t);
            sb.back().accept(t);
        }
        // The first token from the prefill logits on the host (as the server does), for both.
        next_a[size_t(s)] = sa.back().sample(a->prefill(s, prompt));
        next_b[size_t(s)] = sb.back().sample(b->prefill(s, prompt));
        sa.back().accept(next_a[size_t(s)]);
        sb.back().accept(next_b[size_t(s)]);
    }
    for (int i = 0; i < n_steps; i++) {
        std::vector<int32_t> seqs, ta, tb;
        for (int s = 0; s < n_seq; s++)
            if (!(i % 5 == 4 && s == 0 && n_seq > 1)) seqs.push_back(s);
        if (i % 2) std::reverse(seqs.begin(), seqs.end());
        std::vector<sampling_draw> draws(seqs.size());
        for (size_t k = 0; k < seqs.size(); k++) {
            ta.push_back(next_a[size_t(seqs[k])]);
            tb.push_back(next_b[size_t(seqs[k])]);
            sa[size_t(seqs[k])].next_draw(draws[k]);
        }
        const auto got = a->step_sample(ta, seqs, draws);
        const std::vector<int32_t> ids(got.begin(), got.end());
        const auto logits = b->step(tb, seqs);
        for (size_t k = 0; k < seqs.size(); k++) {
            const size_t s = size_t(seqs[k]);
            const auto row = logits.subspan(k * V, V);
            const int32_t h = sb[s].sample(row);
            if (!stopped[s] && ids[k] != h) {
                // Past a difference the two sequences diverge: compare the rest no further.
                stopped[s] = true;
                r.differ++;
                const auto ref = reference_draw(row, draws[k]);
                if (ref.margin < near_boundary)
                    r.near++;
                else if (r.first.empty())
                    r.first = fmt::format("sequence {} step {}: gpu {} host {} (temp {}, top-k {})", s, i, ids[k], h,
                                          draws[k].params.temperature, draws[k].params.top_k);
            } else if (!stopped[s]) {
                r.tokens++;
            }
            next_a[s] = ids[k];
            next_b[s] = h;
            sa[s].accept(ids[k]);
            sb[s].accept(h);
        }
    }
    return r;
}

struct decoder_sampling_comparison {
    int tokens = 0;              // generated by both paths until the first difference
    int first_mismatch = -1;     // step of the first difference, -1: none
    bool near_boundary = false;  // that difference was near a boundary
};

// The decoder's own path (append + sample on the GPU) against forward / forward_prefill + memtile::sampler on
// the copied logits, each decoder fed its own tokens: the logits are the same kernels' output, so the tokens
// must agree (a difference near a boundary is reported as such).
inline decoder_sampling_comparison compare_decoder_sampling(const std::string& path, const sampling_params& p, int n) {
    const auto file = gguf_file::open(path);
    auto a = cuda::decoder::load(file, uint32_t(n + 8));
    auto b = cuda::decoder::load(file, uint32_t(n + 8));
    const uint32_t V = a->config().n_vocab;
    const std::vector<int32_t> prompt = {int32_t(1 % V), int32_t(17 % V), int32_t(260 % V), int32_t(33 % V)};
    sampler sa(p), sb(p);
    for (int32_t t : prompt) {
        sa.accept(t);
        sb.accept(t);
    }
    a->append(prompt);
    std::span<const float> logits = b->forward_prefill(prompt);
    decoder_sampling_comparison r;
    sampling_draw d;
    for (int i = 0; i < n; i++) {
        sa.next_draw(d);
        const int32_t ta = a->sample(d), tb = sb.sample(logits);
        if (ta != tb) {
            r.first_mismatch = i;
            r.near_boundary = reference_draw(logits, d).margin < near_boundary;
            return r;
        }
        r.tokens++;
        sa.accept(ta);
        sb.accept(tb);
        a->append(std::span<const int32_t>(&ta, 1));
        logits = b->forward(tb);
    }
    return r;
}

}  // namespace memtile::test
