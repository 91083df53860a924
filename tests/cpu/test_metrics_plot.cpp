// `primer plot`: training curves of runs read from their metrics.jsonl into one self-contained SVG (or HTML) chart.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "recipes/metrics_plot.h"
#include "recipes/run_metrics.h"
#include "recipes/svg_chart.h"
#include "tests/support/scratch_dir.h"
#include "tests/support/test_util.h"
#include "tests/support/xml_check.h"

namespace primer {
namespace {

void write_log(const std::string& dir, const std::string& lines) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/metrics.jsonl") << lines;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Records as the train loop writes them: evaluations before and after, a training record per step.
std::string run_log(int steps, bool evaluations) {
  std::string out;
  if (evaluations)
    out += R"({"step": 0, "eval_loss": 5.5, "eval_perplexity": 244.7, "tokens": 0})"
           "\n";
  for (int s = 1; s <= steps; ++s)
    out += fmt::format(
        R"({{"step": {}, "loss": {}, "lr": 0.001, "grad_norm": {}, "tokens": {}, "tokens_per_s": 900.0, "mfu": 0, "peak_memory_gb": 0.1}})"
        "\n",
        s, 5.5 / s, 2.0 / s, 256 * s);
  if (evaluations)
    out += fmt::format(R"({{"step": {}, "eval_loss": 2.0, "eval_perplexity": 7.39, "tokens": {}}})"
                       "\n",
                       steps, 256 * steps);
  return out;
}

// Two runs on one chart: well-formed SVG naming both runs, one polyline per (panel, run) that has the metric —
// five for the run with evaluations, four for the one without.
TEST(MetricsPlot, TwoRunsMakeWellFormedSvgWithOneLinePerSeries) {
  test::ScratchDir dir("plot", test::fresh_seed());
  write_log(dir / "stage2", run_log(6, true));
  write_log(dir / "scratch & co", run_log(4, false));
  for (const char* x : {"step", "tokens"}) {
    const std::string svg = recipes::plot_runs_svg({dir / "stage2", dir / "scratch & co/"}, x);
    const test::XmlCheck xml = test::check_xml(svg);
    ASSERT_EQ(xml.error, "") << svg;
    EXPECT_EQ(xml.elements.at("svg"), 1);
    EXPECT_EQ(xml.elements.at("polyline"), 9) << "x " << x;
    EXPECT_NE(xml.text.find(dir / "stage2"), std::string::npos);
    EXPECT_NE(xml.text.find(dir / "scratch &amp; co"), std::string::npos) << "run names are escaped, slash dropped";
    EXPECT_NE(xml.text.find("training loss (log scale)"), std::string::npos);
  }
  const std::string html = dir / "curves.html";
  EXPECT_EQ(recipes::run_plot({dir / "stage2"}, html, "step"), 0);
  const test::XmlCheck page = test::check_xml(read_text(html));
  ASSERT_EQ(page.error, "");
  EXPECT_EQ(page.elements.at("svg"), 1);
  EXPECT_EQ(page.elements.at("polyline"), 5);
}

// After a resume whose log kept the interrupted run's later records (an older primer, or a trim that failed), the
// resumed run's records replace them: one point per step, the later value.
TEST(MetricsPlot, RecordsSupersededByAResumeAreDropped) {
  test::ScratchDir dir("plot-resume", test::fresh_seed());
  write_log(dir / "run",
            R"({"step": 0, "eval_loss": 3.0})"
            "\n"
            R"({"step": 1, "loss": 9.0})"
            "\n"
            R"({"step": 2, "loss": 8.0})"
            "\n"
            R"({"step": 3, "loss": 7.0})"
            "\n"
            R"({"step": 2, "eval_loss": 2.5})"
            "\n"
            R"({"step": 3, "loss": 6.0})"
            "\n"
            R"({"step": 3, "eval_loss": 2.0})"
            "\n"
            R"({"step": 3, "eval_loss": 1.5})"
            "\n"
            R"({"step": 4, "loss": 5.)");  // torn by a kill
  const recipes::RunMetrics m = recipes::read_run_metrics(dir / "run");
  using Points = std::vector<std::pair<double, double>>;
  EXPECT_EQ(m.series("loss", "step"), (Points{{1, 9.0}, {2, 8.0}, {3, 6.0}}));
  EXPECT_EQ(m.series("eval_loss", "step"), (Points{{0, 3.0}, {2, 2.5}, {3, 1.5}}));
}

TEST(MetricsPlot, BadInputIsNamed) {
  test::ScratchDir dir("plot-bad", test::fresh_seed());
  std::filesystem::create_directories(dir / "empty-dir");
  write_log(dir / "no-records", "\n");
  write_log(dir / "bad-line", "{\"step\": 1, \"loss\": 2}\nnot json\n{\"step\": 2, \"loss\": 1}\n");
  write_log(dir / "no-step", "{\"loss\": 2}\n");
  write_log(dir / "old", "{\"step\": 1, \"loss\": 2}\n");
  test::expect_error([&] { recipes::plot_runs_svg({dir / "missing"}, "step"); }, {"missing' does not exist"});
  test::expect_error([&] { recipes::plot_runs_svg({dir / "empty-dir"}, "step"); }, {"empty-dir' has no metrics.jsonl"});
  test::expect_error([&] { recipes::plot_runs_svg({dir / "no-records"}, "step"); }, {"holds no record"});
  test::expect_error([&] { recipes::plot_runs_svg({dir / "bad-line"}, "step"); }, {"bad-line/metrics.jsonl:2"});
  test::expect_error([&] { recipes::plot_runs_svg({dir / "no-step"}, "step"); }, {"metrics.jsonl:1", "integer 'step'"});
  test::expect_error([&] { recipes::plot_runs_svg({dir / "old"}, "tokens"); }, {"no token counts", "--x step"});
  test::expect_error([&] { recipes::run_plot({dir / "old"}, dir / "chart.png", "step"); },
                     {"chart.png", ".svg or .html"});
  EXPECT_FALSE(std::filesystem::exists(dir / "chart.png"));
}

TEST(MetricsPlot, TicksAreRoundNumbersCoveringTheRange) {
  EXPECT_EQ(recipes::nice_ticks(0, 10, 5), (std::vector<double>{0, 2, 4, 6, 8, 10}));
  EXPECT_EQ(recipes::nice_ticks(0.13, 0.61, 5), (std::vector<double>{0.2, 0.3, 0.4, 0.5, 0.6}));
  EXPECT_EQ(recipes::nice_ticks(3, 3, 5), (std::vector<double>{3}));
}

}  // namespace
}  // namespace primer
