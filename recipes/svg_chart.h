// Line charts as a self-contained SVG document (no scripts, fonts or files it links to): a grid of panels, each with
// its own axes and one polyline per series, and a legend naming what each colour is. Written for `primer plot`.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace primer::recipes {

struct ChartSeries {
  int colour = 0;                                 // index into the legend (and the palette)
  std::vector<std::pair<double, double>> points;  // (x, y); non-finite ones are left out
};

struct ChartPanel {
  std::string title, x_label;
  bool log_y = false;               // log scale where every y is positive; linear otherwise
  std::vector<ChartSeries> series;  // a series with no finite point draws nothing
};

// One polyline per series holding a finite point; `legend[i]` names colour i. Text is XML-escaped.
std::string render_svg_chart(const std::string& title, const std::vector<std::string>& legend,
                             const std::vector<ChartPanel>& panels);

// Tick values covering [lo, hi]: multiples of 1, 2 or 5 × 10^k, about `count` of them (exposed for tests).
std::vector<double> nice_ticks(double lo, double hi, int count);

}  // namespace primer::recipes
