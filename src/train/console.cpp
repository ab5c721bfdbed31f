// Formatting of the operator console: units, the step line, config banner, grid table, summary.
#include "train/console.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/check.h"

namespace loom {

namespace {

std::string fmt(const char* f, double a) {
  char b[64];
  std::snprintf(b, sizeof b, f, a);
  return b;
}

// Three significant figures of x scaled by `units` (base 1000 or 1024), e.g. "12.3k".
std::string scaled(double x, double base, const char* const* units, int n_units, const char* sep) {
  if (!std::isfinite(x)) return fmt("%g", x);
  double a = std::fabs(x);
  int u = 0;
  while (u + 1 < n_units && a >= 999.5) {
    a /= base;
    ++u;
  }
  double v = x < 0 ? -a : a;
  const char* f = u == 0 ? "%.0f" : a < 9.995 ? "%.2f" : a < 99.95 ? "%.1f" : "%.0f";
  return fmt(f, v) + sep + units[u];
}

}  // namespace

std::string format_duration(double seconds) {
  if (!(seconds >= 0) || !std::isfinite(seconds)) return "?";
  long long s = std::llround(seconds);
  char b[48];
  if (s < 60)
    std::snprintf(b, sizeof b, "%llds", s);
  else if (s < 3600)
    std::snprintf(b, sizeof b, "%lldm%02llds", s / 60, s % 60);
  else if (s < 86400)
    std::snprintf(b, sizeof b, "%lldh%02lldm", s / 3600, (s % 3600) / 60);
  else
    std::snprintf(b, sizeof b, "%lldd%02lldh", s / 86400, (s % 86400) / 3600);
  return b;
}

std::string format_count(double x) {
  static const char* const units[] = {"", "k", "M", "G", "T", "P", "E"};
  return scaled(x, 1000.0, units, 7, "");
}

std::string format_bytes(double bytes) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  return scaled(bytes, 1024.0, units, 6, " ");
}

std::string format_percent(double fraction) {
  if (!(fraction >= 0) || !std::isfinite(fraction)) return "n/a";
  double p = fraction * 100.0;
  return fmt(p < 0.1 ? "%.3f%%" : p < 9.995 ? "%.2f%%" : "%.1f%%", p);
}

std::string format_ms(double ms) {
  if (!std::isfinite(ms)) return "? ms";
  if (ms < 9.995) return fmt("%.2f ms", ms);
  if (ms < 99.95) return fmt("%.1f ms", ms);
  if (ms < 9999.5) return fmt("%.0f ms", ms);
  return fmt("%.1f s", ms / 1000.0);
}

std::string format_flops(double flops_per_s) {
  static const char* const units[] = {"FLOP/s",  "kFLOP/s", "MFLOP/s", "GFLOP/s",
                                      "TFLOP/s", "PFLOP/s", "EFLOP/s"};
  return scaled(flops_per_s, 1000.0, units, 7, " ");
}

std::string format_step_line(const StepLine& s) {
  const int width = int(std::to_string(std::max(s.total_steps, 1)).size());
  char head[160];
  std::snprintf(head, sizeof head, "step %*d/%d | loss %.4f | lr %.2e | grad norm %.3f | ", width,
                s.step, s.total_steps, s.loss, s.lr, s.grad_norm);
  std::string line = head;
  line += format_count(s.tokens_per_s) + " tok/s | MFU " + format_percent(s.mfu) + " | ";
  line += format_ms(s.step_ms) + "/step | mem " + format_bytes(s.mem_peak_bytes) + " (r0 peak)";
  if (s.step < s.total_steps) line += " | ETA " + format_duration(s.eta_s);
  return line;
}

void Progress::start(int first_step, double now_ms) {
  points_.clear();
  points_.emplace_back(first_step - 1, now_ms);
  first_step_ = first_step;
  start_ms_ = now_ms;
  logged_ = 0;
}

double Progress::on_log(int step, double now_ms, double loss) {
  if (points_.empty()) start(step, now_ms);
  points_.emplace_back(step, now_ms);
  while (points_.size() > window + 1) points_.pop_front();
  if (logged_ == 0 || loss < min_loss_ || std::isnan(min_loss_)) {
    min_loss_ = loss;
    min_step_ = step;
  }
  final_loss_ = loss;
  ++logged_;
  const auto& old = points_.front();
  return step > old.first ? (now_ms - old.second) / double(step - old.first) : 0.0;
}

double Progress::eta_s(int step, int total, double mean_step_ms) {
  if (!(mean_step_ms > 0)) return -1;
  return std::max(0, total - step) * mean_step_ms / 1000.0;
}

std::vector<std::string> format_config_banner(const Config& cfg, const RunLayout& run,
                                              int64_t params, double flops_per_token,
                                              const std::string& yaml_path) {
  const auto& m = cfg.model;
  const auto& t = cfg.train;
  const auto& o = cfg.optimizer;
  std::vector<std::string> out;
  out.push_back(str("run '", cfg.run.name, "' in ", cfg.run_dir(), " | config ",
                    cfg.source.empty() ? "(built-in)" : cfg.source,
                    ", resolved in full: ", yaml_path));
  std::string vocab = std::to_string(m.vocab_size);
  if (run.params().padded_vocab() != m.vocab_size)
    vocab += " (padded to " + std::to_string(run.params().padded_vocab()) + ")";
  const std::string heads = m.kv_heads() == m.n_head
                                ? str(m.n_head, " heads")
                                : str(m.n_head, " heads (", m.kv_heads(), " kv heads)");
  out.push_back(str("model ", m.llama() ? "Llama " : "GPT-2 ", m.n_layer, " layers x ", heads,
                    " x d_model ", m.d_model, ", mlp ", m.ffn(), ", vocab ", vocab, ", seq_len ",
                    m.seq_len, " | ", format_count(double(params)), " parameters | ",
                    format_count(flops_per_token), " training FLOPs/token"));
  out.push_back(str("parallel dp", run.dp(), " x pp", run.pp(), " x tp", run.tp(),
                    run.cp() > 1 ? str(" x cp", run.cp(), " (", m.seq_len / run.cp(),
                                       " tokens of each sequence per rank)")
                                 : "",
                    " = ", run.grid().world(), " ranks | ", schedule_name(run.schedule()),
                    " schedule, ", run.microbatches(), " micro-batches of ", run.micro_batch(),
                    " sequences per data-parallel rank | ZeRO stage ", run.zero_stage()));
  const double tokens_per_step = double(t.global_batch_size) * m.seq_len;
  out.push_back(str("train ", t.steps, " steps x ", t.global_batch_size, " sequences x ", m.seq_len,
                    " tokens = ", format_count(tokens_per_step), " tokens/step (",
                    format_count(tokens_per_step * t.steps), " in all) | ", t.dtype, " on ",
                    cfg.device, " | seed ", t.seed, " | log every ",
                    plural(t.log_interval, "step", "steps")));
  char lr[96];
  if (o.schedule == "constant")
    std::snprintf(lr, sizeof lr, "lr %.2e constant", o.lr);
  else
    std::snprintf(lr, sizeof lr, "lr %.2e %s to %.2e", o.lr, o.schedule.c_str(), o.min_lr);
  out.push_back(str("optimizer AdamW ", lr, ", ",
                    plural(o.warmup_steps, "warm-up step", "warm-up steps"), " | betas ", o.beta1,
                    "/", o.beta2, " eps ", o.eps, " weight decay ", o.weight_decay, " | grad clip ",
                    t.grad_clip > 0 ? str(t.grad_clip) : std::string("off")));
  return out;
}

std::vector<std::string> format_summary(const RunSummary& s) {
  const int steps = std::max(0, s.last_step - s.first_step + 1);
  const double tps = s.step_s > 0 ? s.tokens / s.step_s : 0;
  std::vector<std::string> out;
  if (steps == 0) {
    out.push_back(str("done: no steps to run (already at step ", s.last_step,
                      ") | metrics: ", s.metrics_path));
    return out;
  }
  out.push_back(str("done: ", plural(steps, "step", "steps"), " (", s.first_step, "-", s.last_step,
                    "), ", format_count(s.tokens), " tokens | ", format_duration(s.step_s),
                    " in steps, ", format_duration(s.wall_s), " since start | mean ",
                    format_count(tps), " tok/s, MFU ", format_percent(s.mfu), " over the steps"));
  std::string loss = "loss: none logged";
  if (s.logged > 0) {
    char b[160];
    std::snprintf(b, sizeof b, "loss: final %.4f | lowest logged %.4f (step %d)", s.final_loss,
                  s.min_loss, s.min_loss_step);
    loss = b;
  }
  out.push_back(str(loss, " | peak memory ", format_bytes(s.peak_mem_bytes), " (largest rank)"));
  out.push_back(str("metrics: ", s.metrics_path, " | plot: scripts/plot_metrics.py ",
                    s.run_dir.empty() ? std::string("RUN_DIR") : s.run_dir));
  return out;
}

}  // namespace loom
