// A minimal SVG writer for the observability figures: shapes and text with escaped content, numbers in
// fixed notation, one document per object. Coordinates are SVG user units (pixels at 100 % zoom).
#pragma once

#include <string>
#include <string_view>

namespace memtile {

// Escapes &, <, >, " and ' for XML text and attribute values; drops control characters XML 1.0 forbids.
std::string xml_escape(std::string_view s);

class svg_doc {
public:
    svg_doc(double width, double height);
    void rect(double x, double y, double w, double h, std::string_view fill, std::string_view extra = "");
    void line(double x1, double y1, double x2, double y2, std::string_view stroke, double width = 1,
              std::string_view extra = "");
    // points: "x,y x,y ..." built with point().
    void polyline(const std::string& points, std::string_view stroke, double width = 2);
    void circle(double cx, double cy, double r, std::string_view fill, std::string_view title = "");
    // anchor: start, middle or end; extra: further attributes (e.g. transform).
    void text(double x, double y, std::string_view s, double size = 12, std::string_view anchor = "start",
              std::string_view fill = "#222", std::string_view extra = "");
    static std::string point(double x, double y);
    std::string str() const;  // the complete document

private:
    double w_, h_;
    std::string body_;
};

}  // namespace memtile
