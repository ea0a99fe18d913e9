// TrainProgress implementation: plain fprintf on stderr so the bar and the log share one stream.
#include "app/train_progress.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

namespace cnnscale::app {

TrainProgress::TrainProgress(int64_t iterations_per_epoch)
    : tty_(isatty(STDERR_FILENO) == 1), iterations_per_epoch_(iterations_per_epoch) {}

void TrainProgress::clear_bar() {
  if (bar_shown_) std::fputs("\r\033[K", stderr);
  bar_shown_ = false;
}

void TrainProgress::draw(int64_t done, int64_t total) {
  constexpr int kWidth = 30;
  const double frac = total > 0 ? static_cast<double>(done) / total : 1.0;
  const int filled = static_cast<int>(frac * kWidth);
  std::string bar(static_cast<size_t>(filled), '=');
  if (filled < kWidth) bar += '>' + std::string(static_cast<size_t>(kWidth - filled - 1), ' ');
  const int64_t epoch = (done == 0 ? 0 : (done - 1) / iterations_per_epoch_) + 1;
  std::string stats = last_loss_ >= 0 ? fmt::format(" loss {:.4f} {:.0f} samples/s", last_loss_, last_rate_) : "";
  std::fprintf(stderr, "\r\033[Kepoch %lld [%s] %3.0f%% %lld/%lld%s", static_cast<long long>(epoch), bar.c_str(),
               100.0 * frac, static_cast<long long>(done), static_cast<long long>(total), stats.c_str());
  std::fflush(stderr);
  bar_shown_ = true;
  last_draw_ = std::chrono::steady_clock::now();
}

void TrainProgress::iteration(int64_t done, int64_t total) {
  if (!tty_) return;
  if (done != total && std::chrono::steady_clock::now() - last_draw_ < std::chrono::milliseconds(100)) return;
  draw(done, total);
}

void TrainProgress::display(const DisplayInfo& d) {
  last_loss_ = d.loss;
  last_rate_ = d.samples_per_s;
  if (tty_) {
    draw(d.iteration, d.total);
    return;
  }
  std::fprintf(stderr, "iter %lld/%lld epoch %.2f loss %.4f lr %.6g %.0f samples/s\n",
               static_cast<long long>(d.iteration), static_cast<long long>(d.total), d.epoch, d.loss, d.lr,
               d.samples_per_s);
}

void TrainProgress::epoch(const EpochInfo& e) {
  if (!e.test) return;  // the bar or the display lines already show the epoch
  clear_bar();
  std::fprintf(stderr, "epoch %lld (iter %lld): test top-1 %.4f top-%d %.4f loss %.4f (%lld samples, %.1f s)\n",
               static_cast<long long>(e.epoch), static_cast<long long>(e.iteration), e.test->top1, e.test->top5_k,
               e.test->top5, e.test->loss, static_cast<long long>(e.test->samples), e.test->seconds);
}

void TrainProgress::message(const std::string& text) {
  clear_bar();
  std::fprintf(stderr, "%s\n", text.c_str());
}

void TrainProgress::finish() {
  clear_bar();
}

}  // namespace cnnscale::app
