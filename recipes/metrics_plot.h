// `primer plot`: training curves of one or more runs from their metrics.jsonl, as a self-contained SVG or HTML file.
#pragma once
#include <string>
#include <vector>

namespace primer::recipes {

// Panels (training loss, held-out perplexity, learning rate, gradient norm, tokens/s) of every run in `run_dirs`, one
// colour per run, against `x_axis` ("step" or "tokens"); the chart as SVG text. Errors name a run without metrics,
// and a run whose log has no token counts when x_axis is "tokens".
std::string plot_runs_svg(const std::vector<std::string>& run_dirs, const std::string& x_axis);

// Writes plot_runs_svg to `out` (.svg, or .html holding the SVG inline); returns 0.
int run_plot(const std::vector<std::string>& run_dirs, const std::string& out, const std::string& x_axis);

}  // namespace primer::recipes
