#include "observe/svg-charts.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "observe/svg.h"

namespace memtile {
namespace {

const char* k_blue = "#3b6fb6";
const char* k_light = "#9dbbe3";
const char* k_orange = "#d9822b";
const char* k_grid = "#e3e3e3";

std::string size_label(uint64_t b) {
    if (b >= (uint64_t(1) << 30) && b % (uint64_t(1) << 30) == 0) return fmt::format("{}G", b >> 30);
    if (b >= (uint64_t(1) << 20)) return fmt::format("{}M", b >> 20);
    return fmt::format("{}K", b >> 10);
}

// A "nice" axis maximum and step for values up to v: 1, 2 or 5 times a power of ten.
std::pair<double, double> nice_axis(double v, int ticks = 5) {
    if (v <= 0) return {1, 0.2};
    const double raw = v / ticks, mag = std::pow(10, std::floor(std::log10(raw)));
    double step = mag;
    for (const double m : {1.0, 2.0, 5.0, 10.0})
        if (raw <= m * mag) {
            step = m * mag;
            break;
        }
    return {std::ceil(v / step) * step, step};
}

std::string num(double v) {
    if (v == 0) return "0";
    return v >= 100 ? fmt::format("{:.0f}", v) : v >= 10 ? fmt::format("{:.1f}", v) : fmt::format("{:.2f}", v);
}

void ladder_panel(svg_doc& d, const probe_result& r, const std::vector<cache_info>& caches, double x0, double y0,
                  double w, double h) {
    d.text(x0, y0 - 14, "Latency ladder: one dependent load (pointer chase, random order) by working-set size", 15,
           "start", "#111", "font-weight=\"bold\"");
    if (r.ladder.empty()) {
        d.text(x0 + w / 2, y0 + h / 2, "not measured", 14, "middle");
        return;
    }
    const double lx0 = std::log2(double(r.ladder.front().bytes)), lx1 = std::log2(double(r.ladder.back().bytes));
    double ymin = 1e30, ymax = 0;
    for (const auto& p : r.ladder) {
        ymin = std::min(ymin, p.ns);
        ymax = std::max(ymax, p.ns);
    }
    const double ly0 = std::floor(std::log10(std::max(ymin, 0.1))), ly1 = std::ceil(std::log10(std::max(ymax, 1.0)));
    auto X = [&](double bytes) { return x0 + (std::log2(bytes) - lx0) / std::max(lx1 - lx0, 1.0) * w; };
    auto Y = [&](double ns) { return y0 + h - (std::log10(std::max(ns, 0.1)) - ly0) / std::max(ly1 - ly0, 1.0) * h; };
    d.rect(x0, y0, w, h, "#fafafa", "stroke=\"#bbb\"");
    for (double e = ly0; e <= ly1; e++)
        for (const double m : {1.0, 2.0, 5.0}) {
            const double v = m * std::pow(10, e);
            if (std::log10(v) > ly1 + 1e-9) break;
            d.line(x0, Y(v), x0 + w, Y(v), k_grid);
            d.text(x0 - 6, Y(v) + 4, num(v), 11, "end");
        }
    for (double l = std::ceil(lx0); l <= lx1; l += 2) {
        d.line(X(std::pow(2, l)), y0, X(std::pow(2, l)), y0 + h, k_grid);
        d.text(X(std::pow(2, l)), y0 + h + 16, size_label(uint64_t(std::pow(2, l))), 11, "middle");
    }
    d.text(x0 - 44, y0 + h / 2, "ns per load (log)", 12, "middle", "#222",
           fmt::format("transform=\"rotate(-90 {:.1f} {:.1f})\"", x0 - 44, y0 + h / 2));
    d.text(x0 + w / 2, y0 + h + 34, "working set (log2)", 12, "middle");
    // Data caches: a dashed line at the capacity one core sees (one instance's size).
    for (const auto& c : caches) {
        if (c.type == "Instruction" || c.bytes == 0) continue;
        const double b = double(c.bytes);
        if (std::log2(b) < lx0 || std::log2(b) > lx1) continue;
        d.line(X(b), y0, X(b), y0 + h, k_orange, 1.5, "stroke-dasharray=\"5,4\"");
        d.text(X(b) + 4, y0 + 14, fmt::format("L{} {}", c.level, size_label(c.bytes)), 11, "start", k_orange);
    }
    std::string pts;
    for (const auto& p : r.ladder) pts += svg_doc::point(X(double(p.bytes)), Y(p.ns));
    d.polyline(pts, k_blue, 2.5);
    for (const auto& p : r.ladder)
        d.circle(X(double(p.bytes)), Y(p.ns), 3, k_blue, fmt::format("{}: {:.2f} ns", size_label(p.bytes), p.ns));
    // Label a few plateaus: first point, the last point and the point at each cache capacity.
    for (const size_t i : {size_t(0), r.ladder.size() - 1})
        d.text(X(double(r.ladder[i].bytes)) + (i == 0 ? 6 : -6), Y(r.ladder[i].ns) - 8,
               fmt::format("{:.1f} ns", r.ladder[i].ns), 12, i == 0 ? "start" : "end", k_blue);
}

void bandwidth_panel(svg_doc& d, const probe_result& r, double x0, double y0, double w, double h) {
    d.text(x0, y0 - 14, "Bandwidth by access pattern (GB/s, higher is better)", 15, "start", "#111",
           "font-weight=\"bold\"");
    std::vector<std::string> tests;
    double vmax = 0;
    for (const auto& b : r.bandwidth) {
        if (std::find(tests.begin(), tests.end(), b.test) == tests.end()) tests.push_back(b.test);
        vmax = std::max(vmax, b.gbps);
    }
    if (tests.empty()) return;
    const auto [ymax, step] = nice_axis(vmax);
    auto Y = [&, ymax = ymax](double v) { return y0 + h - v / ymax * h; };
    d.rect(x0, y0, w, h, "#fafafa", "stroke=\"#bbb\"");
    for (double v = 0; v <= ymax + 1e-9; v += step) {
        d.line(x0, Y(v), x0 + w, Y(v), k_grid);
        d.text(x0 - 6, Y(v) + 4, num(v), 11, "end");
    }
    d.text(x0 - 44, y0 + h / 2, "GB/s", 12, "middle", "#222",
           fmt::format("transform=\"rotate(-90 {:.1f} {:.1f})\"", x0 - 44, y0 + h / 2));
    const double slot = w / double(tests.size()), bw = slot * 0.36;
    for (size_t i = 0; i < tests.size(); i++) {
        const double cx = x0 + slot * (double(i) + 0.5);
        int k = 0;
        for (const auto& b : r.bandwidth) {
            if (b.test != tests[i]) continue;
            const double bx = cx - bw + k * bw;
            const bool one = b.threads == 1;
            d.rect(bx + 1, Y(b.gbps), bw - 2, y0 + h - Y(b.gbps), one ? k_light : k_blue);
            d.text(bx + bw / 2, Y(b.gbps) - 4, num(b.gbps), 10, "middle");
            k++;
        }
        d.text(cx, y0 + h + 16, tests[i], tests[i].size() > 12 ? 9.5 : 11, "middle");
    }
    // Legend.
    d.rect(x0 + w - 190, y0 + 8, 12, 12, k_light);
    d.text(x0 + w - 172, y0 + 18, "1 thread", 11);
    d.rect(x0 + w - 110, y0 + 8, 12, 12, k_blue);
    d.text(x0 + w - 92, y0 + 18, fmt::format("{} threads", r.threads), 11);
}

}  // namespace

std::string probe_svg(const probe_result& r, const std::vector<cache_info>& caches) {
    svg_doc d(960, 780);
    d.text(20, 26,
           fmt::format("memtile probe: sequential read {:.1f} GB/s (1 thread) / {:.1f} GB/s ({} threads)",
                       r.read_gbps(1), r.read_gbps(r.threads), r.threads),
           17, "start", "#111", "font-weight=\"bold\"");
    ladder_panel(d, r, caches, 90, 80, 840, 280);
    bandwidth_panel(d, r, 90, 460, 840, 260);
    return d.str();
}

std::string roofline_svg(const std::string& title, const std::vector<roofline_bar>& bars) {
    const double x0 = 230, w = 600, row = 40, y0 = 70;
    svg_doc d(960, y0 + row * double(bars.size()) + 70);
    d.text(20, 28, title, 17, "start", "#111", "font-weight=\"bold\"");
    d.text(20, 50,
           "filled: bandwidth the measured speed implies (bytes per token x tokens/s); outline: the machine's "
           "sequential read at that thread count",
           12, "start", "#555");
    double vmax = 0;
    for (const auto& b : bars) vmax = std::max({vmax, b.achieved_gbps, b.available_gbps});
    const auto [xmax, step] = nice_axis(vmax);
    auto X = [&, xmax = xmax](double v) { return x0 + v / xmax * w; };
    const double y_end = y0 + row * double(bars.size());
    for (double v = 0; v <= xmax + 1e-9; v += step) {
        d.line(X(v), y0 - 4, X(v), y_end, k_grid);
        d.text(X(v), y_end + 16, num(v), 11, "middle");
    }
    d.text(x0 + w / 2, y_end + 36, "GB/s", 12, "middle");
    for (size_t i = 0; i < bars.size(); i++) {
        const auto& b = bars[i];
        const double y = y0 + row * double(i);
        d.text(x0 - 10, y + row / 2 + 4, b.label, 12, "end");
        if (b.available_gbps > 0)
            d.rect(x0, y + 6, X(b.available_gbps) - x0, row - 12, "none", "stroke=\"#333\" stroke-width=\"1.5\"");
        const double frac = b.available_gbps > 0 ? b.achieved_gbps / b.available_gbps : 0;
        d.rect(x0, y + 9, X(b.achieved_gbps) - x0, row - 18,
               frac >= 0.7   ? "#4a9a5b"
               : frac >= 0.4 ? k_orange
                             : "#c4473a");
        d.text(std::max(X(b.achieved_gbps), X(b.available_gbps)) + 8, y + row / 2 + 4,
               b.available_gbps > 0 ? fmt::format("{:.2f} GB/s ({:.0f} %)", b.achieved_gbps, frac * 100)
                                    : fmt::format("{:.2f} GB/s", b.achieved_gbps),
               12);
    }
    return d.str();
}

std::string soak_svg(const std::string& title, const std::vector<soak_sample>& s) {
    struct series {
        std::string name;
        std::string unit;
        std::function<std::optional<double>(const soak_sample&)> get;
    };
    const std::vector<series> panels = {
        {"decode speed", "tok/s", [](const soak_sample& x) { return std::optional<double>(x.tokens_per_second); }},
        {"CPU frequency", "MHz", [](const soak_sample& x) { return x.mhz; }},
        {"hottest thermal zone", "deg C", [](const soak_sample& x) { return x.celsius; }},
        {"resident memory", "MiB", [](const soak_sample& x) { return std::optional<double>(x.rss_mib); }},
        {"page faults", "per s",
         [](const soak_sample& x) { return std::optional<double>(double(x.minor_faults + x.major_faults)); }},
    };
    const double x0 = 100, w = 820, ph = 110, gap = 40, y_start = 60;
    svg_doc d(960, y_start + (ph + gap) * double(panels.size()) + 30);
    d.text(20, 28, title, 17, "start", "#111", "font-weight=\"bold\"");
    const double t_end = s.empty() ? 1 : std::max(s.back().t_s, 1.0);
    for (size_t pi = 0; pi < panels.size(); pi++) {
        const auto& p = panels[pi];
        const double y0 = y_start + double(pi) * (ph + gap);
        d.text(x0, y0 - 8, fmt::format("{} ({})", p.name, p.unit), 13, "start", "#111", "font-weight=\"bold\"");
        d.rect(x0, y0, w, ph, "#fafafa", "stroke=\"#bbb\"");
        double lo = 1e300, hi = -1e300;
        for (const auto& x : s)
            if (auto v = p.get(x)) {
                lo = std::min(lo, *v);
                hi = std::max(hi, *v);
            }
        if (hi < lo) {
            d.text(x0 + w / 2, y0 + ph / 2 + 5, "unavailable on this machine", 13, "middle", "#888");
            continue;
        }
        // The axis starts at zero so that a 10 % drop looks like one.
        const auto [ymax, step] = nice_axis(hi > 0 ? hi : 1, 3);
        auto X = [&](double t) { return x0 + t / t_end * w; };
        auto Y = [&, ymax = ymax](double v) { return y0 + ph - v / ymax * ph; };
        for (double v = 0; v <= ymax + 1e-9; v += step) {
            d.line(x0, Y(v), x0 + w, Y(v), k_grid);
            d.text(x0 - 6, Y(v) + 4, num(v), 10, "end");
        }
        std::string pts;
        for (const auto& x : s)
            if (auto v = p.get(x)) pts += svg_doc::point(X(x.t_s), Y(*v));
        d.polyline(pts, pi == 0 ? k_blue : k_orange, 1.8);
        if (pi + 1 == panels.size())
            for (double t = 0; t <= t_end + 1e-9; t += nice_axis(t_end, 6).second)
                d.text(X(t), y0 + ph + 16, fmt::format("{:.0f} s", t), 10, "middle");
    }
    return d.str();
}

}  // namespace memtile
