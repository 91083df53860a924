// The console of multi-rank runs: stderr lines carry the rank when there are several ranks, every line of a
// multi-line message included; info goes to stdout on rank 0 only.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/console.h"

namespace primer {
namespace {

// What `write` sends to file descriptor `fd`, captured through a temporary file.
template <class Write> std::string captured(int fd, Write&& write) {
  std::fflush(nullptr);
  char path[] = "/tmp/primer_console_XXXXXX";
  int file = mkstemp(path);
  int saved = dup(fd);
  dup2(file, fd);
  write();
  std::fflush(nullptr);
  dup2(saved, fd);
  close(saved);
  close(file);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::remove(path);
  return text.str();
}

struct RankGuard {
  ~RankGuard() { console::set_rank(0, 1); }
};

TEST(Console, SingleProcessHasNoRankPrefix) {
  RankGuard guard;
  console::set_rank(0, 1);
  EXPECT_EQ(captured(STDERR_FILENO, [] { console::warn("disk {} full", "/tmp"); }), "warning: disk /tmp full\n");
}

TEST(Console, EveryLineNamesTheRank) {
  RankGuard guard;
  console::set_rank(2, 4);
  EXPECT_EQ(captured(STDERR_FILENO, [] { console::error("collective timeout\nending the job"); }),
            "[rank 2] error: collective timeout\n[rank 2] ending the job\n");
  EXPECT_EQ(captured(STDERR_FILENO, [] { console::warn("slow\n"); }), "[rank 2] warning: slow\n");
}

TEST(Console, InfoOnlyOnRankZero) {
  RankGuard guard;
  console::set_rank(1, 2);
  EXPECT_EQ(captured(STDOUT_FILENO, [] { console::info("step 1"); }), "");
  console::set_rank(0, 2);
  EXPECT_EQ(captured(STDOUT_FILENO, [] { console::info("step {}", 1); }), "step 1\n");
}

}  // namespace
}  // namespace primer
