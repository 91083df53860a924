#include "recipes/svg_chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace primer::recipes {
namespace {

// Colours that stay apart for the first ten runs, also for the common colour-vision deficiencies.
constexpr const char* kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
constexpr int kPaletteSize = int(std::size(kPalette));

constexpr double kWidth = 960, kColumns = 2, kPanelWidth = kWidth / kColumns, kPanelHeight = 300;
constexpr double kLeft = 70, kRight = 20, kTop = 32, kBottom = 45;  // the plot area inside a panel
constexpr double kLegendRow = 20, kCharWidth = 7;                   // a legend line; a rough width of a glyph

std::string escape_xml(const std::string& text) {
  std::string out;
  for (char c : text) switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  return out;
}

std::string tick_label(double v) {
  const double a = std::fabs(v);
  if (a >= 1e9) return fmt::format("{:.3g}G", v / 1e9);
  if (a >= 1e6) return fmt::format("{:.3g}M", v / 1e6);
  if (a >= 1e3) return fmt::format("{:.3g}k", v / 1e3);
  return fmt::format("{:.3g}", v);
}

// One axis: a data interval mapped onto [pixel_lo, pixel_hi], linearly or by log10.
struct Axis {
  bool log = false;
  double lo = 0, hi = 1;  // in axis units (log10 of the value on a log axis)
  double pixel_lo = 0, pixel_hi = 1;

  double pixel(double value) const {
    const double u = log ? std::log10(value) : value;
    return pixel_lo + (u - lo) / (hi - lo) * (pixel_hi - pixel_lo);
  }
  std::vector<double> ticks() const {
    if (!log) return nice_ticks(lo, hi, 5);
    if (hi - lo >= 2) {  // two decades or more: powers of ten
      std::vector<double> out;
      for (double e = std::ceil(lo); e <= hi; ++e) out.push_back(std::pow(10.0, e));
      return out;
    }
    return nice_ticks(std::pow(10.0, lo), std::pow(10.0, hi), 5);
  }
};

// The axis over `values` (finite ones), padded so that no line runs along the frame.
Axis axis_over(const std::vector<double>& values, bool log) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (double v : values) {
    const double u = log ? std::log10(v) : v;
    lo = std::min(lo, u);
    hi = std::max(hi, u);
  }
  if (lo > hi) lo = 0, hi = 1;  // nothing to show
  const double span = hi - lo, pad = span > 0 ? 0.04 * span : std::max(std::fabs(lo) * 0.05, log ? 0.05 : 0.5);
  return {log, lo - pad, hi + pad};
}

bool finite_point(const std::pair<double, double>& p, bool log_y) {
  return std::isfinite(p.first) && std::isfinite(p.second) && (!log_y || p.second > 0);
}

// `all_xs`: every panel's x values, so that the panels share one x range and read side by side.
void render_panel(std::string& svg, const ChartPanel& panel, const std::vector<double>& all_xs, double left,
                  double top) {
  // A log axis only where every value can sit on it.
  bool log_y = panel.log_y;
  std::vector<double> ys;
  for (const ChartSeries& s : panel.series)
    for (const auto& p : s.points)
      if (std::isfinite(p.first) && std::isfinite(p.second)) {
        ys.push_back(p.second);
        log_y &= p.second > 0;
      }
  Axis x = axis_over(all_xs, false), y = axis_over(ys, log_y);
  x.pixel_lo = left + kLeft, x.pixel_hi = left + kPanelWidth - kRight;
  y.pixel_lo = top + kPanelHeight - kBottom, y.pixel_hi = top + kTop;

  svg += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" text-anchor="middle" font-weight="bold">{}{}</text>)"
                     "\n",
                     left + kPanelWidth / 2, top + 20, escape_xml(panel.title), log_y ? " (log scale)" : "");
  svg += fmt::format(R"(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="none" stroke="#999"/>)"
                     "\n",
                     x.pixel_lo, y.pixel_hi, x.pixel_hi - x.pixel_lo, y.pixel_lo - y.pixel_hi);
  for (double t : x.ticks()) {
    const double px = x.pixel(t);
    svg += fmt::format(R"(<line x1="{0:.1f}" y1="{1:.1f}" x2="{0:.1f}" y2="{2:.1f}" stroke="#eee"/>)"
                       R"(<text x="{0:.1f}" y="{3:.1f}" text-anchor="middle">{4}</text>)"
                       "\n",
                       px, y.pixel_hi, y.pixel_lo, y.pixel_lo + 15, tick_label(t));
  }
  for (double t : y.ticks()) {
    const double py = y.pixel(t);
    svg += fmt::format(R"(<line x1="{1:.1f}" y1="{0:.1f}" x2="{2:.1f}" y2="{0:.1f}" stroke="#eee"/>)"
                       R"(<text x="{3:.1f}" y="{4:.1f}" text-anchor="end">{5}</text>)"
                       "\n",
                       py, x.pixel_lo, x.pixel_hi, x.pixel_lo - 5, py + 4, tick_label(t));
  }
  svg += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" text-anchor="middle">{}</text>)"
                     "\n",
                     (x.pixel_lo + x.pixel_hi) / 2, top + kPanelHeight - 10, escape_xml(panel.x_label));
  if (ys.empty())
    svg += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" text-anchor="middle" fill="#999">no data</text>)"
                       "\n",
                       (x.pixel_lo + x.pixel_hi) / 2, (y.pixel_lo + y.pixel_hi) / 2);
  for (const ChartSeries& s : panel.series) {
    std::string points;
    int count = 0;
    for (const auto& p : s.points)
      if (finite_point(p, log_y)) {
        points += fmt::format("{}{:.1f},{:.1f}", count++ ? " " : "", x.pixel(p.first), y.pixel(p.second));
      }
    if (count == 0) continue;
    const char* colour = kPalette[s.colour % kPaletteSize];
    svg += fmt::format(R"(<polyline fill="none" stroke="{}" stroke-width="1.5" points="{}"/>)"
                       "\n",
                       colour, points);
    // Sparse series (evaluations) get a dot per point: a single evaluation is otherwise invisible.
    if (count <= 30)
      for (const auto& p : s.points)
        if (finite_point(p, log_y))
          svg += fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="2.5" fill="{}"/>)"
                             "\n",
                             x.pixel(p.first), y.pixel(p.second), colour);
  }
}

}  // namespace

std::vector<double> nice_ticks(double lo, double hi, int count) {
  if (!(hi > lo) || count < 1) return {lo};
  const double raw = (hi - lo) / count;
  const int exponent = int(std::floor(std::log10(raw)));
  const double scale = std::pow(10.0, std::abs(exponent)), r = exponent >= 0 ? raw / scale : raw * scale;
  const int64_t multiple = r < 1.5 ? 1 : r < 3 ? 2 : r < 7 ? 5 : 10;
  // k · multiple · 10^exponent, divided rather than multiplied by a negative power: 3 / 10 is 0.3, 3 · 0.1 is not.
  auto tick = [&](int64_t k) { return exponent >= 0 ? double(k * multiple) * scale : double(k * multiple) / scale; };
  const double step = tick(1);
  std::vector<double> out;
  for (int64_t k = int64_t(std::ceil(lo / step - 1e-9)); k <= int64_t(std::floor(hi / step + 1e-9)); ++k)
    out.push_back(tick(k));
  return out;
}

std::string render_svg_chart(const std::string& title, const std::vector<std::string>& legend,
                             const std::vector<ChartPanel>& panels) {
  // The legend wraps into rows across the width, under the title.
  std::vector<std::pair<double, double>> legend_at;
  double lx = 20, ly = 52;
  for (const std::string& name : legend) {
    const double entry = 34 + kCharWidth * double(name.size()) + 20;
    if (lx > 20 && lx + entry > kWidth - 20) lx = 20, ly += kLegendRow;
    legend_at.emplace_back(lx, ly);
    lx += entry;
  }
  const double panels_top = ly + kLegendRow;
  const double rows = std::ceil(double(panels.size()) / kColumns);
  const double height = panels_top + rows * kPanelHeight + 10;

  std::string svg =
      fmt::format(R"(<svg xmlns="http://www.w3.org/2000/svg" width="{0}" height="{1}" viewBox="0 0 {0} {1}" )"
                  R"(font-family="sans-serif" font-size="12">)"
                  "\n"
                  R"(<rect width="{0}" height="{1}" fill="white"/>)"
                  "\n"
                  R"(<text x="{2}" y="26" text-anchor="middle" font-size="16" font-weight="bold">{3}</text>)"
                  "\n",
                  kWidth, height, kWidth / 2, escape_xml(title));
  for (size_t i = 0; i < legend.size(); ++i) {
    const auto [x, y] = legend_at[i];
    svg += fmt::format(R"(<line x1="{0:.1f}" y1="{1:.1f}" x2="{2:.1f}" y2="{1:.1f}" stroke="{3}" stroke-width="3"/>)"
                       R"(<text x="{4:.1f}" y="{5:.1f}">{6}</text>)"
                       "\n",
                       x, y - 4, x + 26, kPalette[i % kPaletteSize], x + 32, y, escape_xml(legend[i]));
  }
  std::vector<double> xs;
  for (const ChartPanel& panel : panels)
    for (const ChartSeries& s : panel.series)
      for (const auto& p : s.points)
        if (std::isfinite(p.first) && std::isfinite(p.second)) xs.push_back(p.first);
  for (size_t i = 0; i < panels.size(); ++i)
    render_panel(svg, panels[i], xs, double(i % size_t(kColumns)) * kPanelWidth,
                 panels_top + double(i / size_t(kColumns)) * kPanelHeight);
  svg += "</svg>\n";
  return svg;
}

}  // namespace primer::recipes
