#include "observe/svg.h"

#include <fmt/format.h>

namespace memtile {

std::string xml_escape(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (const char c : s) {
        switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&quot;"; break;
            case '\'': out += "&apos;"; break;
            default:
                if (static_cast<unsigned char>(c) >= 0x20 || c == '\n' || c == '\t') out += c;
        }
    }
    return out;
}

svg_doc::svg_doc(double width, double height) : w_(width), h_(height) {}

void svg_doc::rect(double x, double y, double w, double h, std::string_view fill, std::string_view extra) {
    body_ += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\" {}/>\n", x, y,
                         w, h, xml_escape(fill), extra);
}

void svg_doc::line(double x1, double y1, double x2, double y2, std::string_view stroke, double width,
                   std::string_view extra) {
    body_ += fmt::format(
        "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" stroke-width=\"{:.1f}\" {}/>\n",
        x1, y1, x2, y2, xml_escape(stroke), width, extra);
}

void svg_doc::polyline(const std::string& points, std::string_view stroke, double width) {
    body_ += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"{:.1f}\"/>\n", points,
                         xml_escape(stroke), width);
}

void svg_doc::circle(double cx, double cy, double r, std::string_view fill, std::string_view title) {
    if (title.empty())
        body_ += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"{:.1f}\" fill=\"{}\"/>\n", cx, cy, r, fill);
    else
        body_ +=
            fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"{:.1f}\" fill=\"{}\"><title>{}</title></circle>\n", cx,
                        cy, r, fill, xml_escape(title));
}

void svg_doc::text(double x, double y, std::string_view s, double size, std::string_view anchor, std::string_view fill,
                   std::string_view extra) {
    body_ += fmt::format(
        "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"{:.1f}\" text-anchor=\"{}\" fill=\"{}\" {}>{}</text>\n", x, y,
        size, anchor, fill, extra, xml_escape(s));
}

std::string svg_doc::point(double x, double y) {
    return fmt::format("{:.1f},{:.1f} ", x, y);
}

std::string svg_doc::str() const {
    return fmt::format(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0:.0f}\" height=\"{1:.0f}\" viewBox=\"0 0 {0:.0f} "
        "{1:.0f}\" "
        "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n"
        "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n{2}</svg>\n",
        w_, h_, body_);
}

}  // namespace memtile
