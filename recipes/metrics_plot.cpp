#include "recipes/metrics_plot.h"

#include <fmt/format.h>

#include "core/check.h"
#include "core/io/atomic_file.h"
#include "recipes/run_metrics.h"
#include "recipes/svg_chart.h"

namespace primer::recipes {
namespace {

struct PanelSpec {
  const char* key;  // the metrics.jsonl field
  const char* title;
  bool log_y;
};

// Loss and perplexity span orders of magnitude early in a run; the gradient norm's spikes do too.
constexpr PanelSpec kPanels[] = {{"loss", "training loss", true},
                                 {"eval_perplexity", "held-out perplexity", true},
                                 {"lr", "learning rate", false},
                                 {"grad_norm", "gradient norm", true},
                                 {"tokens_per_s", "tokens/s", false}};

std::string display_name(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::string plot_runs_svg(const std::vector<std::string>& run_dirs, const std::string& x_axis) {
  PRIMER_CHECK(!run_dirs.empty(), "plot: name at least one run directory");
  PRIMER_CHECK(x_axis == "step" || x_axis == "tokens", "plot: --x '{}': expected step or tokens", x_axis);
  std::vector<std::string> names;
  std::vector<RunMetrics> runs;
  for (const std::string& dir : run_dirs) {
    runs.push_back(read_run_metrics(dir));
    names.push_back(display_name(dir));
    // Logs written before token counts were recorded can only be plotted against steps.
    PRIMER_CHECK(x_axis == "step" || runs.back().any("tokens"),
                 "plot: '{}' records no token counts (written by an older primer); plot it with --x step",
                 runs.back().path);
  }
  std::vector<ChartPanel> panels;
  for (const PanelSpec& spec : kPanels) {
    ChartPanel panel{spec.title, x_axis == "tokens" ? "tokens" : "optimizer step", spec.log_y, {}};
    for (size_t i = 0; i < runs.size(); ++i)
      if (runs[i].any(spec.key)) panel.series.push_back({int(i), runs[i].series(spec.key, x_axis)});
    panels.push_back(std::move(panel));
  }
  return render_svg_chart(x_axis == "tokens" ? "training curves against tokens" : "training curves", names, panels);
}

int run_plot(const std::vector<std::string>& run_dirs, const std::string& out, const std::string& x_axis) {
  const bool html = ends_with(out, ".html");
  PRIMER_CHECK(html || ends_with(out, ".svg"), "plot: --out '{}': expected a file name ending in .svg or .html", out);
  const std::string svg = plot_runs_svg(run_dirs, x_axis);
  io::write_file_atomic(out, html ? "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"/><title>primer plot</title>"
                                    "</head><body>\n" +
                                        svg + "</body></html>\n"
                                  : svg);
  fmt::print("plot: {} run{} against {} → {}\n", run_dirs.size(), run_dirs.size() == 1 ? "" : "s", x_axis, out);
  return 0;
}

}  // namespace primer::recipes
