// The preprocess pipeline: reader + in-order writer on the calling thread, tokenizing workers.
#include "data_tools/preprocess.h"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/check.h"
#include "data/indexed_dataset.h"
#include "data_tools/inputs.h"

namespace loom::tok {

namespace {

using Clock = std::chrono::steady_clock;

struct Job {
  Batch batch;
  std::vector<int32_t> tokens;
  std::vector<uint32_t> lengths;  // tokens per written document
  int64_t empty = 0, bad = 0, text_bytes = 0;
  std::string error;           // the first UserError of this batch
  std::exception_ptr failure;  // anything else
  bool done = false;
};

// Tokenizes one batch; JSONL lines are parsed here, on the worker.
void run_job(Job& job, Encoder& enc, const PreprocessOptions& opt,
             const std::vector<InputFile>& files, int eod) {
  const std::string fix =
      opt.skip_bad ? "" : " (fix the line, or pass --skip-bad to count and skip such lines)";
  std::string value;
  job.tokens.reserve(job.batch.text.size() / 3 + 16);  // English GPT-2: about 4 bytes per token
  for (const DocRef& d : job.batch.docs) {
    std::string_view text(job.batch.text.data() + d.offset, d.length);
    if (d.json) {
      std::string problem;
      try {
        const auto v = nlohmann::json::parse(text);
        auto it = v.is_object() ? v.find(opt.json_key) : v.end();
        if (!v.is_object())
          problem = "not a JSON object";
        else if (it == v.end())
          problem = str("no \"", opt.json_key, "\" key (choose the key with --json-key)");
        else if (!it->is_string())
          problem = str("\"", opt.json_key, "\" is not a string");
        else
          value = it->get_ref<const std::string&>();
      } catch (const nlohmann::json::exception& e) {
        std::string what = e.what();
        const size_t cut = what.find("] ");
        problem = "malformed JSON: " + (cut == std::string::npos ? what : what.substr(cut + 2));
      }
      if (!problem.empty()) {
        if (opt.skip_bad) {
          ++job.bad;
          continue;
        }
        job.error = str(files[d.file].path, ":", d.line, ": ", problem, fix);
        return;
      }
      text = value;
    }
    if (text.empty()) {
      ++job.empty;
      continue;
    }
    const size_t before = job.tokens.size();
    enc.encode(text, job.tokens);
    if (opt.append_eod) job.tokens.push_back(eod);
    job.lengths.push_back(uint32_t(job.tokens.size() - before));
    job.text_bytes += int64_t(text.size());
  }
}

std::string clock_text(double s) {
  const long t = long(s + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
  return buf;
}

}  // namespace

PreprocessSummary preprocess(const PreprocessOptions& opt, const Tokenizer& tokenizer) {
  const auto t0 = Clock::now();
  LOOM_USER_CHECK(opt.workers >= 1 && opt.workers <= 256, "--workers ", opt.workers,
                  " must be 1..256");
  LOOM_USER_CHECK(!opt.output_prefix.empty(),
                  "--output-prefix is required (writes PREFIX.bin and PREFIX.idx)");
  LOOM_USER_CHECK(opt.split_docs == "file" || opt.split_docs == "paragraph", "--split-docs \"",
                  opt.split_docs, "\": choose file or paragraph");
  LOOM_USER_CHECK(!opt.json_key.empty(), "--json-key must not be empty");
  const std::vector<InputFile> files = expand_inputs(opt.inputs);
  uint64_t total_bytes = 0;
  for (const auto& f : files) total_bytes += f.size;

  PreprocessSummary sum;
  sum.input_files = int64_t(files.size());
  sum.dtype = mmidx::dtype_for_vocab(tokenizer.vocab_size());
  const std::filesystem::path parent = std::filesystem::path(opt.output_prefix).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  IndexedDatasetWriter writer(opt.output_prefix, sum.dtype);
  DocumentReader reader(files,
                        opt.split_docs == "paragraph" ? DocumentReader::Split::Paragraph
                                                      : DocumentReader::Split::File,
                        opt.batch_bytes);

  // Workers take jobs from `pending`; the writer waits on the oldest job of `inflight`.
  std::mutex mu;
  std::condition_variable cv_work, cv_done;
  std::deque<Job*> pending;
  std::deque<std::unique_ptr<Job>> inflight;  // declared before the joiner: outlives the workers
  bool stop = false;
  std::vector<std::thread> threads;
  const int eod = tokenizer.eod();
  for (int w = 0; w < opt.workers; ++w)
    threads.emplace_back([&] {
      std::unique_ptr<Encoder> enc = tokenizer.make_encoder();
      while (true) {
        Job* job;
        {
          std::unique_lock<std::mutex> lk(mu);
          cv_work.wait(lk, [&] { return stop || !pending.empty(); });
          if (stop) return;
          job = pending.front();
          pending.pop_front();
        }
        try {
          run_job(*job, *enc, opt, files, eod);
        } catch (const UserError& e) {
          job->error = e.what();
        } catch (...) {
          job->failure = std::current_exception();
        }
        {
          std::lock_guard<std::mutex> lk(mu);
          job->done = true;
        }
        cv_done.notify_all();
      }
    });
  struct Joiner {  // stops and joins the workers on every exit path
    std::mutex& mu;
    bool& stop;
    std::condition_variable& cv;
    std::vector<std::thread>& threads;
    ~Joiner() {
      {
        std::lock_guard<std::mutex> lk(mu);
        stop = true;
      }
      cv.notify_all();
      for (auto& t : threads) t.join();
    }
  } joiner{mu, stop, cv_work, threads};

  const size_t max_inflight = size_t(2 * opt.workers + 1);
  auto last_progress = Clock::now();
  auto write_oldest = [&] {
    Job& job = *inflight.front();
    {
      std::unique_lock<std::mutex> lk(mu);
      cv_done.wait(lk, [&] { return job.done; });
    }
    if (job.failure) std::rethrow_exception(job.failure);
    if (!job.error.empty()) throw UserError(job.error);
    size_t off = 0;
    for (uint32_t len : job.lengths) {
      writer.add_document(job.tokens.data() + off, len);
      off += len;
    }
    sum.documents += int64_t(job.lengths.size());
    sum.tokens += int64_t(job.tokens.size());
    sum.text_bytes += job.text_bytes;
    sum.empty_skipped += job.empty;
    sum.bad_skipped += job.bad;
    inflight.pop_front();
    const auto now = Clock::now();
    if (opt.progress && now - last_progress > std::chrono::milliseconds(500)) {
      last_progress = now;
      const double s = std::chrono::duration<double>(now - t0).count();
      const double done = double(reader.bytes_consumed()),
                   frac = total_bytes ? done / double(total_bytes) : 0;
      std::fprintf(stderr, "\r\033[K  %.1f / %.1f MB (%.0f%%)  %.2f MB/s  %.0f docs/s  ETA %s",
                   done / 1e6, double(total_bytes) / 1e6, 100 * frac,
                   double(sum.text_bytes) / 1e6 / s, double(sum.documents) / s,
                   frac > 0 ? clock_text(s / frac - s).c_str() : "?");
      std::fflush(stderr);
    }
  };
  while (true) {
    auto job = std::make_unique<Job>();
    if (!reader.next(job->batch)) break;
    {
      std::lock_guard<std::mutex> lk(mu);
      pending.push_back(job.get());
    }
    cv_work.notify_one();
    inflight.push_back(std::move(job));
    while (inflight.size() >= max_inflight) write_oldest();
  }
  while (!inflight.empty()) write_oldest();
  if (opt.progress) std::fprintf(stderr, "\r\033[K");
  LOOM_USER_CHECK(sum.documents > 0, "no documents found in ", files.size(), " input file(s) (",
                  sum.empty_skipped, " empty, ", sum.bad_skipped,
                  " bad lines skipped): nothing to write; check --input and --json-key");
  writer.finish();
  sum.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return sum;
}

}  // namespace loom::tok
