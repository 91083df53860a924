// Console discipline for multi-rank runs, usable from every layer without knowing about MPI: only rank 0
// writes progress to stdout; warnings and errors from every rank reach stderr, prefixed "[rank N] " when
// the job has several ranks, each message in one write() so that lines from different ranks do not interleave.
#pragma once
#include <fmt/format.h>

#include <string_view>

namespace primer::console {

// Called once by the launcher (parallel/comm/launch) after the rank is known; a single process keeps rank 0 of 1.
void set_rank(int rank, int world_size);
int rank();
int world_size();

// Points this process's stdout (file descriptor 1, so printf, std::cout and fmt::print alike) at /dev/null
// on every rank but 0. Without it, non-zero ranks' stdout is kept (the test harness wants it).
void silence_stdout_off_rank0();

void write_info(std::string_view message);     // stdout, rank 0 only
void write_warning(std::string_view message);  // stderr, every rank, "warning: " after the rank prefix
void write_error(std::string_view message);    // stderr, every rank, "error: " after the rank prefix

template <class... Args> void info(fmt::format_string<Args...> format, Args&&... args) {
  write_info(fmt::format(format, std::forward<Args>(args)...));
}
template <class... Args> void warn(fmt::format_string<Args...> format, Args&&... args) {
  write_warning(fmt::format(format, std::forward<Args>(args)...));
}
template <class... Args> void error(fmt::format_string<Args...> format, Args&&... args) {
  write_error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace primer::console
